"""The machine's process table, read from /proc: which processes are alive, their parents, groups and sessions.

The launcher finds a run's processes with it (launcher/procs.py), vf-vllm the processes left in its server's
group (inference/supervisor.py), the trainer whether vf-vllm is still there (trainer/inference_watch.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple


class Stat(NamedTuple):
    ppid: int
    pgrp: int
    sid: int
    start: int  # clock ticks after boot: with the pid, names one process for good


def stat(pid: int) -> Stat | None:
    """What /proc/<pid>/stat says of a live process; None if it is gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "; fields[0] is field 3 (state)
    if fields[0] == "Z":
        return None
    return Stat(int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]))


def table() -> dict[int, Stat]:
    """Every live process: pid -> its Stat."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := stat(int(entry))):
            out[int(entry)] = st
    return out


def pid_alive(pid: int) -> bool:
    return stat(pid) is not None


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group `pgid`."""
    return [pid for pid, st in table().items() if st.pgrp == pgid]
