"""Ctrl-C and SIGTERM while vf-train starts: held, then acted on at one safe point.

Python raises KeyboardInterrupt wherever the main thread happens to be, the middle of an import included.
An import cut short leaves half-made modules behind (asyncio without its submodules: a NameError on the way
out, exit code 1 instead of 130), and click, which parses vf-train's arguments, turns a KeyboardInterrupt into
"Aborted!" and exit code 1. So vf-train holds both signals from its first line until its arguments are parsed
and its modules imported (a few seconds), then `release` makes them raise KeyboardInterrupt as usual, and
raises one at once if a signal came while they were held: a stop at any moment of start-up exits 130.

SIGUSR2 is `vf-rl stop RUN_DIR` of a Slurm job (`scancel --signal=USR2 --full`): the job's other processes
ignore it (the pane scripts' `trap '' USR2`), so the trainer stops first, as on Ctrl-C, and its pane script
then stops vLLM, as in tmux. A plain scancel or a job's time limit sends SIGTERM to every process at once,
vLLM included, and the trainer may see its server gone before it acts on its own signal: every SIGTERM is
remembered (`requested`), and such a run was stopped, not lost: vf-train still exits 130.
Once released, SIGTERM and SIGUSR2 do whatever Ctrl-C does at that moment (`_terminate`): inside the training
loop, asyncio.Runner's cancel of the main task, never a KeyboardInterrupt that the garbage collector drops.
"""

from __future__ import annotations

import contextlib
import signal
import threading

SLURM_STOP = "USR2"  # the signal `vf-rl stop` sends a Slurm job, by the name scancel and bash's trap take
TERMINATING = (signal.SIGTERM, getattr(signal, f"SIG{SLURM_STOP}"))  # stop like Ctrl-C, and are remembered
STOPS = (signal.SIGINT, *TERMINATING)

_held: list[int] = []
_seen: list[int] = []  # every SIGTERM or SIGUSR2 since vf-train started, and any stop signal on its way out
_hung_up: list[int] = []  # a SIGHUP since the training could begin


def _remember(signum: int, frame: object) -> None:
    if not _held:
        print("vf-train: stopping once start-up is done (a few seconds)", flush=True)
    _held.append(signum)
    _seen.append(signum)


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM and SIGUSR2 do what Ctrl-C does now. Inside the training loop that is asyncio.Runner's SIGINT
    handler: it cancels the loop's main task, which ends at its next await. Raising KeyboardInterrupt here
    instead lands in whatever the main thread runs, and where that is a weakref callback of the garbage
    collector, Python prints "Exception ignored" and drops it, and a Slurm job trains on after `vf-rl stop`.
    Outside the loop (start-up, the final save) Ctrl-C's handler raises KeyboardInterrupt."""
    _seen.append(signum)
    _as_ctrl_c(signum, frame)


def _hang_up(signum: int, frame: object) -> None:
    """SIGHUP: vf-train's terminal is gone (its tmux pane closed, the tmux server killed). Not a stop anyone
    asked for but a fault: the loop ends as on Ctrl-C, and the trainer then keeps the steps trained as it does
    when vLLM is lost (`hung_up`; RLTrainer.train). Python's default for SIGHUP ends the process on the spot.
    The kernel sends more than one (the terminal's hang-up, then its session leader's exit): only the first acts,
    so that a later one does not cut the emergency checkpoint short."""
    _hung_up.append(signum)
    if len(_hung_up) == 1:
        _as_ctrl_c(signum, frame)


def _as_ctrl_c(signum: int, frame: object) -> None:
    on_ctrl_c = signal.getsignal(signal.SIGINT)  # release's default_int_handler, or asyncio.Runner's
    if callable(on_ctrl_c):
        on_ctrl_c(signal.SIGINT, frame)
    else:
        signal.default_int_handler(signum, frame)  # KeyboardInterrupt, as Ctrl-C


def _note(signum: int, frame: object) -> None:
    _seen.append(signum)


def hold() -> None:
    for sig in STOPS:
        signal.signal(sig, _remember)


def release() -> None:
    """From here on SIGTERM (scancel, a job's time limit) and SIGUSR2 (`vf-rl stop` of a Slurm job) are Ctrl-C:
    KeyboardInterrupt, or inside asyncio.Runner its cancel of the loop's main task; one that came while they
    were held raises KeyboardInterrupt now. SIGINT keeps Python's own handler, so that asyncio.Runner can take
    Ctrl-C over (it cancels the loop's main task instead of raising in the middle of a callback)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in TERMINATING:
        signal.signal(sig, _terminate)
    signal.signal(signal.SIGHUP, _hang_up)
    if _held:
        raise KeyboardInterrupt


def quiet() -> None:
    """On the way out: a late or second stop signal is noted, never raised (no traceback from an atexit hook)."""
    for sig in STOPS:
        signal.signal(sig, _note)


@contextlib.contextmanager
def noted():
    """Inside, a stop signal is noted (`requested`), never raised; the handlers before are restored after. Only the
    main thread receives signals and may set handlers; elsewhere (the Python API run from a thread) this does
    nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.signal(s, _note) for s in STOPS}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)


def hung_up() -> bool:
    """Did vf-train's terminal go away (SIGHUP) while it trained?"""
    return bool(_hung_up)


def requested() -> bool:
    """Did a SIGTERM or SIGUSR2 (or a signal on the way out) ask vf-train to stop?"""
    return bool(_seen)
