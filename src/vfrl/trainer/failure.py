"""When the run cannot go on: keep what was trained, say what happened in one line, exit with a known code.

A crash of the other process (vLLM killed, hung, out of memory) or of an environment must not cost
the user the steps trained so far, whatever `save_strategy` says: the trainer still holds the model
and optimizer, so it writes an emergency checkpoint (the same format as any checkpoint; `--resume`
continues from it). The console gets one line: the cause, where to look, the checkpoint and the exact
command that continues the run. The traceback goes to logs/trainer.log only.

Exit codes of vf-train (the trainer pane records them in trainer.exitcode; `vf-rl @ cfg --no-attach`
exits with them):
    0    the run finished
    1    an error in the trainer or the environment (one line; traceback in logs/trainer.log)
    3    the vLLM server was lost: it exited or stopped answering (emergency checkpoint written)
    130  interrupted (Ctrl-C in the trainer pane, `vf-rl stop`)
"""

from __future__ import annotations

import asyncio
import errno
import os
import shlex
import traceback
from pathlib import Path

EXIT_ERROR = 1
EXIT_INFERENCE_LOST = 3
EXIT_INTERRUPTED = 130
RESUME_COMMAND_ENV = "VFRL_RESUME_COMMAND"  # set by vf-rl: the command line that started this run


class TrainingStopped(Exception):
    """The run stopped on a failure it has dealt with: `line` is all the console needs, `code` the exit code."""

    def __init__(self, code: int, line: str):
        self.code, self.line = code, line
        super().__init__(line)


# around each traceback written into the log: `vf-rl --no-attach`, which streams the log as the console,
# leaves them out (launcher/lifecycle.py: ConsoleStream); `vf-rl logs` and the file keep them
TRACEBACK_START = "vf-train: traceback, for the log only (the console got one line):"
TRACEBACK_END = "vf-train: end of traceback"


class HungUp(RuntimeError):
    """vf-train's terminal went away (SIGHUP) while it trained: its tmux pane or server is gone."""

    worded_for_users = True


def log_traceback(log: Path, error: BaseException, about: str = "") -> None:
    """The whole story for the log file, not the console (the pane tees the console into the same file)."""
    try:
        with open(log, "a") as f:
            f.write("\n".join([TRACEBACK_START, *([about] if about else []),
                               "".join(traceback.format_exception(error)).rstrip("\n"), TRACEBACK_END]) + "\n")
    except OSError:
        pass


def unretrieved_errors_to(log: Path):
    """asyncio's handler for errors nobody awaited. Ctrl-C cancels every task at once; a gather of in-flight
    requests then ends with a CancelledError nobody is left to retrieve, and a second Ctrl-C during that
    shutdown ends a task with KeyboardInterrupt: the expected stop, not an error worth a traceback. Anything
    else (a generation task that failed while the run was already stopping for another reason) belongs in the
    log file, not on the console."""

    def handle(loop: asyncio.AbstractEventLoop, context: dict) -> None:
        error = context.get("exception")
        if isinstance(error, (asyncio.CancelledError, KeyboardInterrupt)):
            return
        try:
            if error is not None:
                log_traceback(log, error, about=f"asyncio: {context.get('message', '')}")
            else:
                with open(log, "a") as f:
                    f.write(f"asyncio: {context.get('message', '')}\n")
        except Exception:  # noqa: BLE001 -- a task collected at interpreter exit, where open() may already be gone
            pass           # (NameError): the run's own error was reported; a traceback here would only confuse

    return handle


def describe(error: BaseException) -> str:
    """An error in a few words: the message alone for errors vfrl words for users (`worded_for_users`,
    e.g. an environment that does not load), else its type and message, said to be a full disk where it is one."""
    if getattr(error, "worded_for_users", False):
        return str(error)
    said = f"{type(error).__name__}: {error}"
    return f"the disk is full ({said})" if disk_full(error) else said


def disk_full(error: BaseException | None) -> bool:
    """ENOSPC, from Python or worded by a library that wraps it (safetensors, torch.save), or behind `error`."""
    while error is not None:
        if getattr(error, "errno", None) == errno.ENOSPC or "No space left on device" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def resume_hint(checkpoint: Path) -> str:
    """`vf-rl @ cfg.toml ... --resume <checkpoint>`: the command that started the run, continuing it."""
    base = os.environ.get(RESUME_COMMAND_ENV)
    return f"{base or 'vf-rl @ CONFIG'} --resume {shlex.quote(str(as_typed(checkpoint)))}"


def as_typed(path: Path) -> Path:
    """A path as the user can type it from where vf-rl was started (the panes' working directory)."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path
