"""A sweep against the same runs one after another (and, with --concurrent, as separate vf-rl runs at once), side by
side in one invocation: wall time, the CPU seconds of every process of the runs, their peak memory (PSS summed over
the processes at each sample), and every run's final reward.

    .venv/bin/python benchmarks/sweep.py [--config configs/rl/quickstart.toml] [--key trainer.args.learning_rate]
        [--values 1e-3,2e-3,3e-3,5e-3] [--steps N] [--concurrent] [--sequential-sync adapter|merged] [--write]

Each side runs on a tmux socket of its own; the processes measured are the tmux server's descendants and the vf-rl
client's. Sequential runs use the config as it is (the quick start merges its adapter into vLLM's weights; a sweep
serves each run's adapter: `--sequential-sync adapter` runs the sequential side that way too). `--write` puts the
table into docs/benchmarks.md (its own section).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quickstart import write_section  # noqa: E402

from vfrl.launcher import tmux  # noqa: E402
from vfrl.launcher.plot import read_metrics  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
HEADING = "## A sweep on one vLLM against runs one by one (`benchmarks/sweep.py`)"


class Sampler:
    """Every `period` s: the processes under the tmux server of `socket` and under `clients` (the vf-rl commands);
    the CPU seconds each has used (its last sample counts once it is gone) and the sum of their PSS."""

    def __init__(self, socket: str, period: float = 1.0):
        self.socket, self.period = socket, period
        self.cpu: dict[tuple[int, float], float] = {}
        self.peak_pss, self.clients = 0, []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def processes(self) -> list[psutil.Process]:
        roots = []
        if pid := tmux.server_pid(tmux.server(self.socket)):
            roots.append(pid)
        roots += [c.pid for c in self.clients if c.poll() is None]
        found = {}
        for pid in roots:
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(pid)
                for p in [root, *root.children(recursive=True)]:
                    found[p.pid] = p
        return list(found.values())

    def _run(self) -> None:
        while not self._done.is_set():
            pss = 0
            for p in self.processes():
                with contextlib.suppress(psutil.Error):
                    t = p.cpu_times()
                    self.cpu[(p.pid, p.create_time())] = t.user + t.system
                    pss += p.memory_full_info().pss
            self.peak_pss = max(self.peak_pss, pss)
            self._done.wait(self.period)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._done.set()
        self._thread.join()


def vf_rl(args: list[str], socket: str, out: Path) -> subprocess.Popen:
    return subprocess.Popen([str(BIN / "vf-rl"), *args, "--no-attach", "--tmux-socket", socket],
                            cwd=ROOT, stdout=open(out, "w"), stderr=subprocess.STDOUT)


def final_reward(run_dir: Path, last: int = 10) -> float | None:
    rewards = [r["reward_mean"] for r in read_metrics(run_dir) if isinstance(r.get("reward_mean"), (int, float))]
    return sum(rewards[-last:]) / len(rewards[-last:]) if rewards else None


def side(name: str, commands: list[list[str]], together: bool, out_dir: Path) -> dict:
    """Run `commands` (vf-rl arguments) one after another, or all at once; measure the whole side."""
    socket = f"bench-sweep-{name}-{os.getpid()}"
    codes = []
    t0 = time.time()
    with Sampler(socket) as sampler:
        if together:
            sampler.clients = [vf_rl(c, socket, out_dir / f"{name}-{i}.out") for i, c in enumerate(commands)]
            codes = [p.wait() for p in sampler.clients]
        else:
            for i, c in enumerate(commands):
                sampler.clients = [vf_rl(c, socket, out_dir / f"{name}-{i}.out")]
                codes.append(sampler.clients[0].wait())
    wall = time.time() - t0
    subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
    if any(codes):
        sys.exit(f"{name}: a run failed ({codes}); see {out_dir}/{name}-*.out")
    return {"wall_s": wall, "cpu_s": sum(sampler.cpu.values()), "peak_pss_gib": sampler.peak_pss / 2**30}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/rl/quickstart.toml")
    ap.add_argument("--key", default="trainer.args.learning_rate")
    ap.add_argument("--values", default="1e-3,2e-3,3e-3,5e-3")
    ap.add_argument("--steps", type=int, default=None, help="trainer.args.max_steps (default: the config's)")
    ap.add_argument("--concurrent", action="store_true", help="also the runs as separate vf-rl runs at once")
    ap.add_argument("--sides", default="sweep,sequential", help="which of sweep, sequential to run")
    ap.add_argument("--sweep-args", default="", help="more vf-rl arguments for the sweep alone (e.g. "
                    "'--trainer.share_cpus true')")
    ap.add_argument("--sequential-sync", choices=("config", "adapter", "merged"), default="config")
    ap.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    a = ap.parse_args()
    values = a.values.split(",")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = ROOT / "outputs" / "bench_sweep" / stamp
    out_dir.mkdir(parents=True, exist_ok=True)
    common = ["@", a.config, "--inference.port", "0"] + (["--trainer.args.max_steps", str(a.steps)] if a.steps else [])
    sync = [] if a.sequential_sync == "config" else ["--trainer.args.lora_sync", a.sequential_sync]

    def separate(where: str, prefix: str) -> list[list[str]]:
        return [common + [f"--{a.key}", v, "--trainer.args.output_dir", str(out_dir / where),
                          "--trainer.args.run_name", f"{prefix}{i}"] + sync for i, v in enumerate(values)]

    sides, results = a.sides.split(","), {}
    if "sweep" in sides:
        results["sweep"] = side("sweep", [common + ["--sweep", f"{a.key}={a.values}", "--trainer.args.output_dir",
                                                    str(out_dir / "sweep"), "--trainer.args.run_name", "s",
                                                    *a.sweep_args.split()]], False, out_dir)
    if "sequential" in sides:
        results["sequential"] = side("sequential", separate("sequential", "v"), False, out_dir)
    if a.concurrent:
        results["concurrent"] = side("concurrent", separate("concurrent", "c"), True, out_dir)
    leaf = a.key.rsplit(".", 1)[-1]
    if "sweep" in results:
        results["sweep"]["rewards"] = [final_reward(out_dir / "sweep" / "s" / f"{leaf}={v}") for v in values]
    if "sequential" in results:
        results["sequential"]["rewards"] = [final_reward(out_dir / "sequential" / f"v{i}") for i in range(len(values))]
    if "concurrent" in results:
        results["concurrent"]["rewards"] = [final_reward(out_dir / "concurrent" / f"c{i}") for i in range(len(values))]
    command = " ".join([".venv/bin/python", "benchmarks/sweep.py", *sys.argv[1:]])
    machine = f"{platform.node()}: {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB"
    (out_dir / "result.json").write_text(json.dumps({"command": command, "machine": machine, "config": a.config,
                                                     "key": a.key, "values": values, **results}, indent=1))
    section = render(results, values, a, command, machine)
    print(section)
    if a.write:
        write_section(ROOT / "docs" / "benchmarks.md", section, HEADING)


def render(results: dict, values: list[str], a, command: str, machine: str) -> str:
    seq = results.get("sequential")
    lines = [HEADING, "", f"Command: `{command}` ({a.config}, {a.key} = {', '.join(values)}; {machine}; "
             f"{time.strftime('%Y-%m-%d')}). Sequential runs: lora_sync "
             f"{'as the config sets it' if a.sequential_sync == 'config' else a.sequential_sync}; the sweep serves "
             "each run's adapter.", "",
             "| side | wall | vs one by one | CPU s | peak PSS | final reward (mean of the last 10 steps), per value |",
             "|---|---|---|---|---|---|"]
    for name, r in results.items():
        rewards = ", ".join("-" if x is None else f"{x:.3f}" for x in r["rewards"])
        ratio = f"{r['wall_s'] / seq['wall_s']:.2f}x" if seq else "-"
        lines.append(f"| {name} | {r['wall_s']:.0f} s | {ratio} | {r['cpu_s']:.0f} | "
                     f"{r['peak_pss_gib']:.2f} GiB | {rewards} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
