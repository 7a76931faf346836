"""The processes of a tmux pane, read from /proc: everything in the pane's session, plus descendants.

A pane's shell is a session leader (tmux calls setsid), so every process started from it carries
its pid as session id unless it started a session of its own; the descendant walk catches those.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, sid) of a live process, None if it is gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "
    if fields[0] == "Z":
        return None
    return int(fields[1]), int(fields[3])


def _all() -> dict[int, tuple[int, int]]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))):
            out[int(entry)] = st
    return out


def pane_processes(leaders: list[int]) -> set[int]:
    """Live pids in the sessions of `leaders`, the leaders themselves, and all their descendants."""
    table = _all()
    found = {pid for pid, (_, sid) in table.items() if sid in leaders} | {p for p in leaders if p in table}
    grew = True
    while grew:
        children = {pid for pid, (ppid, _) in table.items() if ppid in found} - found
        found |= children
        grew = bool(children)
    return found


def alive(pids: set[int]) -> set[int]:
    return {p for p in pids if _stat(p)}


def describe(pids: set[int]) -> str:
    """`123 (python3), 456 (VLLM::EngineCore)` for messages."""
    names = []
    for pid in sorted(pids):
        try:
            names.append(f"{pid} ({Path(f'/proc/{pid}/comm').read_text().strip()})")
        except OSError:
            names.append(str(pid))
    return ", ".join(names)


def signal_all(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def wait_gone(pids: set[int], timeout: float) -> set[int]:
    """Wait until none of pids is alive; returns those still alive at the timeout."""
    deadline = time.monotonic() + timeout
    while (left := alive(pids)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def terminate(pids: set[int], grace: float) -> set[int]:
    """SIGTERM, wait `grace` seconds, then SIGKILL what is left. Returns the pids that needed SIGKILL."""
    signal_all(alive(pids), signal.SIGTERM)
    stubborn = wait_gone(pids, grace)
    signal_all(stubborn, signal.SIGKILL)
    wait_gone(stubborn, 5)
    return stubborn
