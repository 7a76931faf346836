"""vf-vllm's watch over the vLLM server: run it as a child, pass signals on, leave nothing behind.

vLLM's API server starts an engine core process, which starts workers. When the API server dies
without its own shutdown (kill -9, a crash), those children can live on (2.7 GB of them, seen),
holding the pane's log pipe open: the inference pane never ends, its exit code is never recorded and
`vf-rl status` keeps saying "running". So the server runs in a process group of its own, signals sent
to vf-vllm are passed to that group, and however the server ends, every process still in its group
is ended too before vf-vllm exits with the server's exit code.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from vfrl.proc_table import group_members

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_empty(pgid: int, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def end_group(pgid: int, linger: float = 5.0, grace: float = 10.0) -> list[int]:
    """After the group's leader exited: give its children `linger` seconds to finish their own shutdown,
    then SIGTERM (with SIGCONT, so a stopped one sees it), then SIGKILL. Returns the pids that were left."""
    left = _wait_empty(pgid, linger)
    if left:
        _signal_group(pgid, signal.SIGTERM)
        _signal_group(pgid, signal.SIGCONT)
        if _wait_empty(pgid, grace):
            _signal_group(pgid, signal.SIGKILL)
            _wait_empty(pgid, 5)
    return left


def run_supervised(argv: list[str], env: dict[str, str], say=print, started=None) -> int:
    """Run `argv` as the leader of a new process group; return its exit code (128 + N for signal N).
    `started(pid)`, when given, is called with the server's pid once it is running."""
    proc = subprocess.Popen(argv, env=env, process_group=0)
    if started is not None:
        started(proc.pid)

    def forward(signum, _frame):
        _signal_group(proc.pid, signum)
        if signum == signal.SIGTERM:
            _signal_group(proc.pid, signal.SIGCONT)  # a stopped (hung) server would never see the TERM

    for sig in FORWARDED:
        signal.signal(sig, forward)
    code = proc.wait()
    code = code if code >= 0 else 128 - code
    left = end_group(proc.pid)
    if left:
        say(f"vf-vllm: the vLLM server exited ({code}); ended {len(left)} process(es) it left behind: "
            + ", ".join(map(str, left)), flush=True)
    return code
