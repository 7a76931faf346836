"""A real full disk under a real run: the trainer's four kinds of writes each hit ENOSPC once (issue 42, item 4).

    sudo .venv/bin/python benchmarks/full_disk.py          # root: it mounts tmpfs file systems

One vf-vllm (the tiny model, CPU) serves every run. Each case trains 6 steps of the quick start's task
(reverse-text, a checkpoint every 2 steps) with vf-train, on a run directory built of small tmpfs mounts
inside a temp dir: the run directory itself (metrics.jsonl), and adapters/, rollouts/ and checkpoints/ each
on its own. Once the run has reached the step a case targets, a file takes every free byte of the target's
file system, so its next write there finds the disk full: a real ENOSPC, cut-short writes included.

    rollouts      after step 2's line: step 3's rollout file finds rollouts/ full; the space is given back
                  after step 3's line, so one file is lost
    metrics       after step 2's line: the first metrics line that needs another page of the run dir's disk
    adapter       after step 2's line, and kept full (each push deletes the adapter vLLM unloaded, freeing
                  its space): the next push finds adapters/ full
    checkpoint    once checkpoints/step-2 is whole: the save of step 4 (and the emergency checkpoint)

Then the filler is removed and, where the run stopped, vf-train runs again with `resume_from` set to the newest
whole checkpoint (what `vf-rl ... --resume` does). Prints a markdown table: what the user saw (the one line),
the exit code, what was kept, and whether the resumed run finished with every step's line. Every mount is
unmounted when the script ends, whatever happens.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import tomli_w
import tomllib

ROOT = Path(__file__).resolve().parents[1]

from vfrl.run_dir import RunDir, read_jsonl  # noqa: E402
from vfrl.testing import BIN, free_port, vf_vllm, write_config  # noqa: E402
from vfrl.learner.checkpoint import latest_checkpoint, list_checkpoints  # noqa: E402

STEPS = 6
KEY = "full-disk-bench-key"
RESUME_COMMAND = "vf-rl @ cfg.toml"  # what vf-rl would put in the line: the command that started the run
CASES = ("rollouts", "metrics", "adapter", "checkpoint")


@contextmanager
def tmpfs(directory: Path, size: str):
    """A tmpfs of `size` mounted over `directory` (created), unmounted when the block ends."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)], check=True)
    try:
        yield directory
    finally:
        if subprocess.run(["umount", str(directory)], capture_output=True).returncode != 0:
            # vLLM still holds a loaded adapter's file open: detached now, freed when it lets go
            subprocess.run(["umount", "-l", str(directory)], check=True)


def fill(directory: Path) -> Path:
    """Every free byte of `directory`'s file system, taken by one file (unlink it to give them back)."""
    filler = directory / ".filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def steps_logged(run_dir: Path) -> list[int]:
    metrics = RunDir(run_dir).metrics
    return [r["step"] for r in read_jsonl(metrics)] if metrics.exists() else []


def when(condition, stop: threading.Event, poll: float = 0.02) -> bool:
    while not stop.is_set():
        if condition():
            return True
        time.sleep(poll)
    return False


def disk_filler(case: str, run_dir: Path, stop: threading.Event, events: list[str]) -> None:
    """The case's full disk, at its step (module docstring)."""
    paths = RunDir(run_dir)
    if case == "checkpoint":
        if when(lambda: (paths.checkpoints / "step-2" / "COMPLETE").exists(), stop):
            fill(paths.checkpoints)
            events.append("checkpoints/ filled once step-2 was whole")
        return
    if not when(lambda: 2 in steps_logged(run_dir), stop):
        return
    target = {"rollouts": paths.rollouts, "metrics": run_dir, "adapter": paths.adapters}[case]
    filler = fill(target)
    events.append(f"{'the run dir' if target == run_dir else target.name + '/'} filled after step 2's line")
    if case == "rollouts" and when(lambda: 3 in steps_logged(run_dir), stop):
        filler.unlink()
        events.append("its space given back after step 3's line")
    elif case == "adapter":  # each push deletes the adapter vLLM no longer serves: taken at once, as by another writer
        events.append("kept full")
        while not stop.wait(0.005):
            fill(target)


def train(run_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "VFRL_API_KEY": KEY, "VFRL_RESUME_COMMAND": RESUME_COMMAND, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([str(BIN / "vf-train"), "@", str(run_dir / "config.toml")], capture_output=True, text=True,
                          env=env, cwd=run_dir.parent, timeout=900)


def said(proc: subprocess.CompletedProcess) -> str:
    """What the user saw of the fault: the warnings of a run that went on, else vf-train's last line."""
    lines = (proc.stdout + proc.stderr).splitlines()
    warned = [x for x in lines if x.startswith("!!! WARNING")]
    return " / ".join(warned) if warned else [x for x in lines if x.startswith("vf-train: ")][-1]


def whole_lines(path: Path) -> bool:
    text = path.read_text() if path.exists() else ""
    try:
        return text.endswith("\n") and all(json.loads(x) for x in text.splitlines())
    except json.JSONDecodeError:
        return False


def kept(run_dir: Path) -> str:
    paths = RunDir(run_dir)
    rollouts = sorted(int(p.stem.removeprefix("step_")) for p in paths.rollouts.glob("step_*.jsonl"))
    lost = max((r.get("rollout_files_lost", 0) for r in read_jsonl(paths.metrics)), default=0)
    return (f"checkpoints {[p.name for p in list_checkpoints(paths.checkpoints)]}; metrics lines of steps "
            f"{steps_logged(run_dir)} ({'whole' if whole_lines(paths.metrics) else 'A CUT LINE'}); rollout files of "
            f"steps {rollouts}" + (f" (rollout_files_lost {lost})" if lost else "")
            + f"; left behind: {sorted(p.name for p in run_dir.rglob('.*.tmp')) or 'no tmp dir'}")


def run_case(case: str, base: Path, server_cfg: dict) -> dict:
    run_dir = base / case
    with ExitStack() as mounts:
        mounts.enter_context(tmpfs(run_dir, "8m"))
        for sub in ("adapters", "rollouts", "checkpoints"):
            mounts.enter_context(tmpfs(run_dir / sub, "8m"))
        (run_dir / "logs").mkdir()
        config = dict(server_cfg)
        config["trainer"] = {"args": {**server_cfg["trainer"]["args"], "run_name": case, "output_dir": str(base)}}
        (run_dir / "config.toml").write_text(tomli_w.dumps(config))
        stop, events = threading.Event(), []
        filler = threading.Thread(target=disk_filler, args=(case, run_dir, stop, events), daemon=True)
        filler.start()
        t0 = time.time()
        first = train(run_dir)
        stop.set()
        filler.join()
        for f in run_dir.rglob(".filler"):
            f.unlink()
        row = {"case": case, "disk": "; ".join(events) or "NOT FILLED", "said": said(first),
               "code": first.returncode, "kept": kept(run_dir), "seconds": round(time.time() - t0)}
        newest, again = latest_checkpoint(RunDir(run_dir).checkpoints), None
        if first.returncode == 0:
            row["resume"] = "not needed: the run finished"
        elif newest is None:
            row["resume"] = "NO CHECKPOINT"
        else:
            config["trainer"]["args"]["resume_from"] = str(newest)
            (run_dir / "config.toml").write_text(tomli_w.dumps(config))
            again = train(run_dir)
            steps = steps_logged(run_dir)
            row["resume"] = (f"from {newest.name}: exit {again.returncode}, metrics lines of steps {steps} "
                             f"({'whole' if whole_lines(RunDir(run_dir).metrics) else 'A CUT LINE'})")
        for proc, name in ((first, "first"), (again, "resumed")):
            if proc is not None:  # kept outside the mounts, for a look after
                (base / f"{case}.{name}.out").write_text(proc.stdout + "\n--- stderr\n" + proc.stderr)
        return row


def table(rows: list[dict]) -> str:
    out = ["| case | the full disk | what the user saw | exit | what was kept | `--resume` from the newest |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r["case"], r["disk"], f"`{r['said']}`", str(r["code"]), r["kept"], r["resume"]]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("full_disk.py mounts tmpfs file systems: run it as root")
    base = Path(tempfile.mkdtemp(prefix="vfrl-full-disk-"))
    port = free_port()
    cfg = write_config(base / "server.toml", ROOT / "models" / "tiny-reverse", port=port, output_dir=base,
                       max_steps=STEPS, save_strategy="steps", save_steps=2, eval_strategy="no")
    with vf_vllm(cfg, port, KEY, base / "inference.log") as base_url:
        server_cfg = tomllib.loads(cfg.read_text())
        # the runs train against this one server (a server vf-train did not start: watched by /health only)
        server_cfg["inference"] = {"base_url": base_url, "api_key_var": "VFRL_API_KEY"}
        rows = []
        for case in args.cases:
            rows.append(run_case(case, base, server_cfg))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(table(rows))
    print(f"\n(outputs of each vf-train in {base})", file=sys.stderr)


if __name__ == "__main__":
    main()
