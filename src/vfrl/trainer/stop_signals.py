"""Ctrl-C and SIGTERM while vf-train starts: held, then acted on at one safe point.

Python raises KeyboardInterrupt wherever the main thread happens to be, the middle of an import included.
An import cut short leaves half-made modules behind (asyncio without its submodules: a NameError on the way
out, exit code 1 instead of 130), and click, which parses vf-train's arguments, turns a KeyboardInterrupt into
"Aborted!" and exit code 1. So vf-train holds both signals from its first line until its arguments are parsed
and its modules imported (a few seconds), then `release` makes them raise KeyboardInterrupt as usual, and
raises one at once if a signal came while they were held: a stop at any moment of start-up exits 130.
"""

from __future__ import annotations

import signal

_held: list[int] = []


def _remember(signum: int, frame: object) -> None:
    if not _held:
        print("vf-train: stopping once start-up is done (a few seconds)", flush=True)
    _held.append(signum)


def hold() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _remember)


def release() -> None:
    """From here on SIGINT and SIGTERM (Slurm's scancel, a job's time limit) raise KeyboardInterrupt; one that
    came while they were held raises it now."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.default_int_handler)
    if _held:
        raise KeyboardInterrupt
