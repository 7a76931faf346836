"""The processes of a run, read from /proc, without ever touching a process that is not the run's.

A process belongs to the run if it descends from one of its live panes (a pane's shell is a session
leader: tmux calls setsid, so its processes also carry its pid as session id), or if it carries the
run's marker `VFRL_RUN_DIR=<run dir>` in its environment (the pane scripts export it, children
inherit it; that finds orphans of a pane that already exited), or if it is an engine core vf-vllm recorded in
the run dir (`inference.engines`: vLLM's process title overwrites the engine core's environment, marker and
all). Pids are small and get reused
(pid_max is 32768 here), so a process is named by (pid, start time), and every signal re-checks it.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from vfrl.proc_table import stat, table
from vfrl.run_dir import RunDir

MARKER = "VFRL_RUN_DIR"


@dataclass(frozen=True)
class Proc:
    pid: int
    start: int  # clock ticks after boot: with the pid it names one process, even once the pid is reused


def _has_marker(pid: int, marker: bytes) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def pane_processes(leaders: list[int], run_dir: Path | None = None) -> set[Proc]:
    """Live processes of the run: the live pane shells `leaders`, their sessions and descendants, and
    (given run_dir) every process that carries the run's marker or is an engine core recorded in it."""
    processes = table()
    found = {p for p in leaders if p in processes}
    found |= {pid for pid, st in processes.items() if st.sid in found}
    if run_dir is not None:
        marker = f"{MARKER}={run_dir}".encode()
        found |= {pid for pid in processes if _has_marker(pid, marker)}
        found |= {p.pid for p in recorded_engines(run_dir) if p.pid in processes and processes[p.pid].start == p.start}
    while children := {pid for pid, st in processes.items() if st.ppid in found} - found:
        found |= children
    return {Proc(pid, processes[pid].start) for pid in found}


def recorded_engines(run_dir: Path) -> set[Proc]:
    """The engine cores the run's vf-vllm recorded (RunDir.inference_engines), alive or not."""
    try:
        lines = RunDir(run_dir).inference_engines.read_text().split("\n")
    except OSError:
        return set()
    return {Proc(int(f[0]), int(f[1])) for line in lines if len(f := line.split()) == 2 and all(map(str.isdigit, f))}


def alive(procs: set[Proc]) -> set[Proc]:
    return {p for p in procs if (st := stat(p.pid)) and st.start == p.start}


def describe(procs: set[Proc]) -> str:
    """`123 (python3), 456 (VLLM::EngineCore)` for messages."""
    names = []
    for p in sorted(procs, key=lambda p: p.pid):
        try:
            names.append(f"{p.pid} ({Path(f'/proc/{p.pid}/comm').read_text().strip()})")
        except OSError:
            names.append(str(p.pid))
    return ", ".join(names)


def signal_all(procs: set[Proc], sig: int) -> None:
    for p in alive(procs):  # re-checked right before the signal: never a reused pid
        try:
            os.kill(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def wait_gone(procs: set[Proc], timeout: float) -> set[Proc]:
    """Wait until none of procs is alive; returns those still alive at the timeout."""
    deadline = time.monotonic() + timeout
    while (left := alive(procs)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def terminate(procs: set[Proc], grace: float) -> set[Proc]:
    """SIGTERM, wait `grace` seconds, then SIGKILL what is left. Returns the processes that needed SIGKILL."""
    signal_all(procs, signal.SIGTERM)
    stubborn = wait_gone(procs, grace)
    signal_all(stubborn, signal.SIGKILL)
    wait_gone(stubborn, 5)
    return stubborn
