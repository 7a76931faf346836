"""Soak run: the real quick start for many steps, every process of the run sampled for leaks.

    .venv/bin/python benchmarks/soak.py [--steps 1500] [--config configs/rl/quickstart.toml] [--interval 5]
                                        [--out outputs/soak] [--report] [-- VF-RL OVERRIDE ...]

Starts `vf-rl @ CONFIG --detach --trainer.args.max_steps STEPS --inference.port 0` in a tmux session and socket
of its own (`soak-<pid>`), its run directory under OUT/run. Every INTERVAL seconds it samples every process of
the run: the tmux server and everything under it (pane shells, tee, vf-vllm, vLLM's API server, its engine core,
vf-train, the metrics pane's `vf-rl watch`), plus any process whose environment names the run directory
(`VFRL_RUN_DIR`: the reaper, which runs in a session of its own, or anything reparented). Per process: RSS,
USS and PSS (/proc/PID/smaps_rollup), open file descriptors, threads; per sample: the step reached (the last
line of metrics.jsonl) and the load average. When the trainer has exited it stops the session (`vf-rl stop`)
and checks that no process of the run is left.

Writes OUT/samples.csv (one row per process and sample), OUT/soak.json (every figure below) and prints a
markdown table: per process RSS at the first step, half-way and the end, the least-squares slope of RSS and
USS over steps in MB per 1000 steps over the second half of the run (after warm-up; RSS also over the last
quarter), fds and threads first vs last (samples taken while the trainer trains: up to its last step, not its
way out); and the step time (`step_s` of metrics.jsonl), median and mean, of the first quarter vs the last.
`--report --out OUT` analyses OUT's samples again and starts nothing.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "src"))
from vfrl.launcher import tmux  # noqa: E402
MB = 1024 * 1024


def role(p: psutil.Process, tmux_pid: int | None) -> str:
    """What a process of the run is, from its name and command line."""
    if p.pid == tmux_pid:
        return "tmux server"
    name, cmd = p.name(), " ".join(p.cmdline())
    if "EngineCore" in name or "EngineCore" in cmd:
        return "vLLM EngineCore"
    if "vfrl.inference.reaper" in cmd:
        return "reaper"
    if "vf-vllm" in cmd:
        return "vf-vllm"
    if "vf-train" in cmd:
        return "vf-train"
    if "vf-rl" in cmd and "watch" in cmd:
        return "vf-rl watch (metrics pane)"
    if "vllm" in cmd.lower():
        return "vLLM API server"
    for pane in ("inference", "trainer"):
        if f"{pane}.sh" in cmd:
            return f"pane shell {pane}.sh"
        if name == "tee" and f"{pane}.log" in cmd:
            return f"tee {pane}.log"
    if "resource_tracker" in cmd:
        return "multiprocessing resource_tracker"
    return f"{name}"


def run_processes(socket: str, run_dir: Path) -> tuple[int | None, list[psutil.Process]]:
    """The tmux server of `socket`, everything under it and every process whose VFRL_RUN_DIR is `run_dir`."""
    tmux_pid = tmux.server_pid(tmux.server(socket))
    procs: dict[int, psutil.Process] = {}
    if tmux_pid:
        try:
            server = psutil.Process(tmux_pid)
            procs[tmux_pid] = server
            for c in server.children(recursive=True):
                procs[c.pid] = c
        except psutil.Error:
            pass
    me = os.getpid()
    for p in psutil.process_iter():
        if p.pid in procs or p.pid == me:
            continue
        try:
            if p.environ().get("VFRL_RUN_DIR") == str(run_dir):
                procs[p.pid] = p
                for c in p.children(recursive=True):
                    procs.setdefault(c.pid, c)
        except psutil.Error:
            pass
    return tmux_pid, list(procs.values())


class Metrics:
    """metrics.jsonl read as it grows."""

    def __init__(self, path: Path):
        self.path, self.offset, self.rows, self.partial = path, 0, [], ""

    def read(self) -> list[dict]:
        if self.path.exists():
            with self.path.open() as f:
                f.seek(self.offset)
                chunk = f.read()
                self.offset = f.tell()
            lines = (self.partial + chunk).split("\n")
            self.partial = lines.pop()
            for line in lines:
                if line.strip():
                    row = json.loads(line)
                    if "loss" in row:  # a training step (eval lines have no loss)
                        self.rows.append(row)
        return self.rows

    @property
    def step(self) -> int:
        return self.rows[-1]["step"] if self.rows else 0


def sample(socket: str, run_dir: Path, step: int, t0: float) -> list[dict]:
    tmux_pid, procs = run_processes(socket, run_dir)
    load = os.getloadavg()[0]
    rows = []
    for p in procs:
        try:
            with p.oneshot():
                r = {"t": round(time.time() - t0, 2), "step": step, "load1": load, "pid": p.pid,
                     "role": role(p, tmux_pid), "rss_mb": p.memory_info().rss / MB,
                     "fds": p.num_fds(), "threads": p.num_threads()}
            try:
                full = p.memory_full_info()
                r["uss_mb"], r["pss_mb"] = full.uss / MB, full.pss / MB
            except psutil.Error:
                r["uss_mb"] = r["pss_mb"] = None
            rows.append(r)
        except psutil.Error:  # gone between listing and reading
            pass
    return rows


def slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of ys over xs."""
    if len(xs) < 3 or len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def analyse(samples: list[dict], steps_rows: list[dict], max_steps: int) -> dict:
    """Per process (role and pid): RSS at the first step / half-way / end, slopes over the second half, fds and
    threads first vs last; the step time of the first quarter vs the last."""
    done = max(r["step"] for r in samples) if samples else 0
    samples = [s for s in samples if s["step"] < done]  # training: not the trainer's way out after its last step
    half = done / 2
    procs = []
    keys = sorted({(s["role"], s["pid"]) for s in samples}, key=lambda k: min(
        s["t"] for s in samples if (s["role"], s["pid"]) == k))
    for key in keys:
        rows = [s for s in samples if (s["role"], s["pid"]) == key and s["step"] >= 1]
        if not rows:
            continue
        second = [s for s in rows if s["step"] >= half]
        fourth = [s for s in rows if s["step"] >= done * 3 / 4]
        mid = min(rows, key=lambda s: abs(s["step"] - half))
        rss_slope = slope([s["step"] for s in second], [s["rss_mb"] for s in second])
        rss_slope4 = slope([s["step"] for s in fourth], [s["rss_mb"] for s in fourth])
        uss = [s for s in second if s["uss_mb"] is not None]
        uss_slope = slope([s["step"] for s in uss], [s["uss_mb"] for s in uss])
        procs.append({
            "role": key[0], "pid": key[1], "samples": len(rows),
            "first_step": rows[0]["step"], "last_step": rows[-1]["step"],
            "rss_first_mb": rows[0]["rss_mb"], "rss_mid_mb": mid["rss_mb"], "rss_last_mb": rows[-1]["rss_mb"],
            "rss_max_mb": max(s["rss_mb"] for s in rows),
            "uss_first_mb": rows[0]["uss_mb"], "uss_last_mb": rows[-1]["uss_mb"],
            "rss_slope_mb_per_1000_steps": None if rss_slope is None else rss_slope * 1000,
            "uss_slope_mb_per_1000_steps": None if uss_slope is None else uss_slope * 1000,
            "rss_slope_last_quarter_mb_per_1000_steps": None if rss_slope4 is None else rss_slope4 * 1000,
            "fds_first": rows[0]["fds"], "fds_mid": mid["fds"], "fds_last": rows[-1]["fds"],
            "fds_max": max(s["fds"] for s in rows),
            "threads_first": rows[0]["threads"], "threads_last": rows[-1]["threads"],
        })
    step_s = [r["step_s"] for r in steps_rows if "step_s" in r]
    q = max(1, len(step_s) // 4)
    first, last = step_s[1:q + 1], step_s[-q:]  # step 1 carries start-up
    timing = {
        "steps": len(step_s),
        "first_quarter": {"median_s": statistics.median(first), "mean_s": statistics.fmean(first)} if first else None,
        "last_quarter": {"median_s": statistics.median(last), "mean_s": statistics.fmean(last)} if last else None,
        "step_s_slope_ms_per_1000_steps": (slope(list(range(len(step_s))), step_s) or 0) * 1000 * 1000,
    }
    procs.sort(key=lambda p: -p["rss_last_mb"])
    return {"processes": procs, "step_time": timing, "steps_done": done, "max_steps": max_steps}


def fmt(x, spec=".1f") -> str:
    return "-" if x is None else format(x, spec)


def table(result: dict) -> str:
    lines = ["| process | pid | RSS at step 1 / half-way / end (MB) | RSS slope, 2nd half (MB/1000 steps) "
             "| RSS slope, last quarter | USS slope, 2nd half | fds first / last (max) | threads first / last |",
             "|---|---|---|---|---|---|---|---|"]
    for p in result["processes"]:
        lines.append(
            f"| {p['role']} | {p['pid']} | {fmt(p['rss_first_mb'])} / {fmt(p['rss_mid_mb'])} / "
            f"{fmt(p['rss_last_mb'])} | {fmt(p['rss_slope_mb_per_1000_steps'], '+.2f')} | "
            f"{fmt(p['rss_slope_last_quarter_mb_per_1000_steps'], '+.2f')} | "
            f"{fmt(p['uss_slope_mb_per_1000_steps'], '+.2f')} | {p['fds_first']} / {p['fds_last']} ({p['fds_max']}) | "
            f"{p['threads_first']} / {p['threads_last']} |")
    st = result["step_time"]
    if st["first_quarter"] and st["last_quarter"]:
        lines += ["", "| step time (`step_s`) | median | mean |", "|---|---|---|",
                  f"| first quarter (steps 2..{st['steps'] // 4 + 1}) | {st['first_quarter']['median_s']:.3f} s | "
                  f"{st['first_quarter']['mean_s']:.3f} s |",
                  f"| last quarter (steps {st['steps'] - st['steps'] // 4 + 1}..{st['steps']}) | "
                  f"{st['last_quarter']['median_s']:.3f} s | {st['last_quarter']['mean_s']:.3f} s |"]
    return "\n".join(lines)


def leftovers(socket: str, run_dir: Path) -> list[str]:
    return [f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in run_processes(socket, run_dir)[1]
            if p.is_running()]


def report(out: Path) -> None:
    """Analyse OUT/samples.csv and the run's metrics.jsonl again (after a change to the analysis) and print the
    table; OUT/soak.json gets the new figures."""
    result = json.loads((out / "soak.json").read_text())
    with (out / "samples.csv").open() as f:
        samples = [{k: (v if k == "role" else None if v == "" else float(v) if "." in v else int(v))
                    for k, v in r.items()} for r in csv.DictReader(f)]
    metrics = Metrics(Path(result["run_dir"]) / "metrics.jsonl")
    result.update(analyse(samples, metrics.read(), result["max_steps"]))
    (out / "soak.json").write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--config", default="configs/rl/quickstart.toml")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    p.add_argument("--out", default="outputs/soak", help="samples, results and the run directory (under OUT/run)")
    p.add_argument("--report", action="store_true", help="start nothing: analyse OUT's samples again")
    p.add_argument("overrides", nargs="*", help="more vf-rl overrides (after --)")
    a = p.parse_args()
    out = (ROOT / a.out).resolve() if not Path(a.out).is_absolute() else Path(a.out)
    if a.report:
        return report(out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"soak-{os.getpid()}"
    cmd = [str(BIN / "vf-rl"), "@", a.config, "--detach", "--trainer.args.max_steps", str(a.steps),
           "--inference.port", "0", "--trainer.args.output_dir", str(out / "run"), "--session", name,
           "--tmux-socket", name, *a.overrides]
    load_before = os.getloadavg()
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"vf-rl failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    run_dir = Path(re.search(r"run directory (\S+)", proc.stdout).group(1))
    if not run_dir.is_absolute():
        run_dir = (ROOT / run_dir).resolve()
    print(f"run directory {run_dir}, session {name}; sampling every {a.interval:g} s", flush=True)
    metrics = Metrics(run_dir / "metrics.jsonl")
    samples: list[dict] = []
    fields = ["t", "step", "load1", "pid", "role", "rss_mb", "uss_mb", "pss_mb", "fds", "threads"]
    try:
        with (out / "samples.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            last_print = 0.0
            while not (run_dir / "trainer.exitcode").exists():
                metrics.read()
                rows = sample(name, run_dir, metrics.step, t0)
                samples += rows
                w.writerows(rows)
                f.flush()
                if time.time() - last_print > 60:
                    last_print = time.time()
                    big = {r["role"]: round(r["rss_mb"]) for r in rows if r["rss_mb"] > 50}
                    print(f"{time.time() - t0:6.0f} s  step {metrics.step:5d}  load {os.getloadavg()[0]:.1f}  "
                          f"RSS MB {big}", flush=True)
                time.sleep(a.interval)
    finally:
        code = (run_dir / "trainer.exitcode").read_text().strip() if (run_dir / "trainer.exitcode").exists() else None
        subprocess.run([str(BIN / "vf-rl"), "stop", name, "--tmux-socket", name], cwd=ROOT, capture_output=True)
        deadline = time.time() + 60
        while (left := leftovers(name, run_dir)) and time.time() < deadline:
            time.sleep(1)
    metrics.read()
    result = analyse(samples, metrics.rows, a.steps)
    du = sum(f.stat().st_size for f in run_dir.rglob("*") if f.is_file())
    result.update({
        "command": " ".join(["vf-rl", *cmd[1:]]), "config": a.config, "interval_s": a.interval,
        "trainer_exitcode": code, "wall_s": round(time.time() - t0, 1),
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
                   f"{psutil.virtual_memory().total / 2**30:.0f} GiB",
        "load_before": load_before, "load_after": os.getloadavg(),
        "load1_during": {"min": min(s["load1"] for s in samples), "median": statistics.median(
            s["load1"] for s in samples), "max": max(s["load1"] for s in samples)} if samples else None,
        "run_dir": str(run_dir), "run_dir_bytes": du, "processes_left": left,
        "measured": time.strftime("%Y-%m-%d %H:%M"),
    })
    (out / "soak.json").write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    print(f"\ntrainer exit code {code}; {result['steps_done']} steps; wall {result['wall_s']:.0f} s; load before "
          f"{load_before[0]:.1f}, during {result['load1_during']}; run dir {du / MB:.0f} MB; processes left: "
          f"{left or 'none'}; samples: {out / 'samples.csv'}, results: {out / 'soak.json'}")


if __name__ == "__main__":
    main()
