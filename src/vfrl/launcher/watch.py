"""`vf-rl watch RUN_DIR`: live metrics of a run, one line per step (the third pane of a vf-rl session); of a sweep's
directory, the lines of every run under its name.

Reads metrics.jsonl as the trainer appends to it, only what was appended since the last look (re-reading the
whole file each second costs memory and CPU that grow with the run: docs/reliability.md, "Soak"); stops when the
trainer has exited, or is gone without its exit code (its pane killed with it).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from vfrl.inference.supervisor import TrainerGone
from vfrl.run_dir import RunDir, parse_jsonl

HEADER = f"{'step':>9}  {'reward':>7}  {'avg10':>7}  {'loss':>8}  {'mismatch':>8}  {'step s':>6}  {'eta':>8}"


def format_eta(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def row(rec: dict, recent: list[float], step_s: float | None) -> str:
    step = f"{rec.get('step', '?')}/{rec.get('max_steps', '?')}"
    eta = (format_eta(step_s * (rec["max_steps"] - rec["step"])) if step_s and "max_steps" in rec and "step" in rec
           else "")
    num = lambda key, fmt: format(rec[key], fmt) if isinstance(rec.get(key), (int, float)) else "-"  # noqa: E731
    avg = format(sum(recent) / len(recent), ".3f") if recent else "-"
    return (f"{step:>9}  {num('reward_mean', '.3f'):>7}  {avg:>7}  {num('loss', '+.4f'):>8}  "
            f"{num('mismatch_kl', '.1e'):>8}  {format(step_s, '.2f') if step_s else '-':>6}  {eta:>8}")


class NewRecords:
    """The records appended to a JSON-lines file since the last call. A line is taken once it ends in a newline
    (not the line the trainer is writing); one that does not parse (a crash cut it short) is skipped. A file
    that shrank (rewritten) is read again from its start."""

    def __init__(self, path: Path):
        self.path, self.offset = path, 0

    def __call__(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                if f.seek(0, 2) < self.offset:
                    self.offset = 0
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        whole = chunk[:chunk.rfind(b"\n") + 1]
        self.offset += len(whole)
        return parse_jsonl(whole.splitlines())


class RunWatch:
    """One run's new lines since the last look, and whether its trainer has ended (with its exit code)."""

    def __init__(self, run_dir: Path):
        paths = RunDir(run_dir)
        self.exit_file, self.new_records = paths.exit_code("trainer"), NewRecords(paths.metrics)
        self.rewards: list[float] = []
        self.ends: list[float] = []
        self.trainer_gone = TrainerGone(paths.trainer_pid)  # its pane died with it: no exit code will come
        self.ended, self.code, self.last = False, None, None

    def __call__(self) -> list[str]:
        done = self.exit_file.exists()
        if not done and (pid := self.trainer_gone()):
            self.ended = True
            return [f"the trainer (pid {pid}) is gone without an exit code (its pane closed?)"]
        lines = []
        for rec in self.new_records():
            if isinstance(rec.get("reward_mean"), (int, float)):
                self.rewards = (self.rewards + [rec["reward_mean"]])[-10:]
            self.ends = (self.ends + [rec.get("train_end", time.time())])[-10:]
            step_s = (self.ends[-1] - self.ends[0]) / (len(self.ends) - 1) if len(self.ends) > 1 else None
            self.last = row(rec, self.rewards, step_s)
            lines.append(self.last)
        if done:
            code = self.exit_file.read_text().strip()
            self.ended, self.code = True, int(code) if code.lstrip("-").isdigit() else None
            lines.append(f"trainer exited with code {code}")
        return lines


def watch(run_dir: Path, write: Callable[[str], None] = print, poll: float = 1.0) -> int | None:
    """Print one line per logged step until the trainer exits; returns its exit code (None if unknown)."""
    write(f"metrics of {run_dir}")
    write(HEADER)
    run = RunWatch(run_dir)
    while True:
        for line in run():
            write(line)
        if run.ended:
            return run.code
        time.sleep(poll)


def watch_runs(run_dirs: list[Path], write: Callable[[str], None] = print, poll: float = 1.0,
               live: bool = False) -> list[int | None]:
    """The runs of a sweep until every trainer has ended, then one line per run (its last step and exit code).
    `live` (a terminal: the sweep's metrics pane): one line per run, redrawn as they log; else each new line under
    its run's name. Returns the exit codes (None: unknown)."""
    width = max(len(d.name) for d in run_dirs)
    title = f"metrics of {len(run_dirs)} runs in {run_dirs[0].parent}"
    runs = {d.name: RunWatch(d) for d in run_dirs}

    def table() -> list[str]:
        ends = {name: f"  exit {run.code if run.code is not None else '?'}" if run.ended else ""
                for name, run in runs.items()}
        return [f"{'run':<{width}}  {HEADER}"] + [f"{name:<{width}}  {run.last or '(no step yet)'}{ends[name]}"
                                                  for name, run in runs.items()]

    if not live:
        write(title)
        write(f"{'run':<{width}}  {HEADER}")
    while True:
        changed = False
        for name, run in runs.items():
            if not run.ended:
                for line in run():
                    changed = True
                    if not live:
                        write(f"{name:<{width}}  {line}")
        if live and changed:
            write("\033[H\033[J" + "\n".join([title, *table()]))
        if all(run.ended for run in runs.values()):
            if not live:
                write("every run ended; the last step of each:\n" + "\n".join(table()))
            return [run.code for run in runs.values()]
        time.sleep(poll)
