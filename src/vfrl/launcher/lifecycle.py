"""Life of a running session for people not attached: stop it cleanly, show its state, read its logs.

Stopping takes the path of a Ctrl-C in the trainer pane: the trainer gets SIGINT, finishes or drops
its step (adapters are written atomically, so the last one on disk is whole), its pane script
records the exit code and stops the inference server (a trainer that already exited gets no Ctrl-C:
its pane is left to finish that). Whatever is still alive after that (a stuck
process, a child that escaped) gets SIGTERM, then SIGKILL; then the tmux session is closed.
A remote server (inference.base_url) has no pane and no process of the run: nothing here reaches it.
"""

from __future__ import annotations

import time
import tomllib
from pathlib import Path
from typing import Callable

import libtmux

from vfrl.launcher import procs, tmux
from vfrl.launcher.sweep import read_record
from vfrl.proc_table import pid_alive
from vfrl.run_dir import RunDir, read_jsonl
from vfrl.trainer.failure import TRACEBACK_END, TRACEBACK_START


def pane_gone(srv: libtmux.Server, session: str, role: str) -> bool:
    state = tmux.pane_state(srv, session, role)
    return state is None or state.dead


def poll(done: Callable[[], bool], timeout: float, every: float) -> bool:
    """Until `done()` or `timeout` seconds; whether it came true."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(every)
    return True


def wait_dead(srv: libtmux.Server, session: str, role: str, timeout: float) -> bool:
    return poll(lambda: pane_gone(srv, session, role), timeout, every=0.3)


def wait_listening(srv: libtmux.Server, session: str, paths: RunDir, timeout: float) -> None:
    """Until vf-train has written its pid (trainer/cli.py: it handles Ctrl-C from then on, stop_signals.py)
    or its pane has died. A pane script runs a few commands before vf-train starts."""
    poll(lambda: paths.trainer_pid.exists() or pane_gone(srv, session, "trainer"), timeout, every=0.1)


def stop_run(srv: libtmux.Server, session: str, trainer_grace: float = 60, grace: float = 30,
             echo: Callable[[str], None] = print) -> set[procs.Proc]:
    """Stop every pane of a vf-rl session and close it. Returns the processes that needed SIGKILL (ideally none)."""
    run_dir_option = tmux.option(srv, session, tmux.RUN_DIR_OPTION)
    run_dir = Path(run_dir_option or "")
    paths = RunDir(run_dir)
    panes = {role: tmux.pane_state(srv, session, role) for role in tmux.PANE_OPTION}

    def processes(*roles: str) -> set[procs.Proc]:
        # a dead pane's pid may already belong to someone else: only live panes are leaders
        leaders = [p.pid for role in roles if (p := tmux.pane_state(srv, session, role)) and not p.dead]
        return procs.pane_processes(leaders, run_dir if len(roles) == len(tmux.PANE_OPTION) else None)

    everything = processes(*tmux.PANE_OPTION)
    killed: set[procs.Proc] = set()
    trainer = panes["trainer"]
    trainer_done = bool(run_dir_option) and paths.exit_code("trainer").exists()
    if trainer and not trainer.dead and trainer_done:
        # the trainer has exited and its pane script is stopping the server: no Ctrl-C into that epilogue
        echo(f"vf-rl: '{session}': the trainer has exited; its pane is "
             + ("stopping the inference server" if panes["inference"] else "finishing"))
        wait_dead(srv, session, "trainer", grace + 15)
    elif trainer and not trainer.dead:
        echo(f"vf-rl: stopping '{session}': Ctrl-C to the trainer (waits up to {trainer_grace:.0f}s for its step)")
        if run_dir_option:  # a Ctrl-C before vf-train listens would reach only its pane script, and be lost
            wait_listening(srv, session, paths, trainer_grace)
        tmux.send_ctrl_c(srv, trainer.pane_id)
        if not wait_dead(srv, session, "trainer", trainer_grace):
            echo("vf-rl: the trainer did not stop; terminating it")
            # the pane's shell is spared, so its epilogue still records the exit code and stops inference
            killed |= procs.terminate({p for p in processes("trainer") if p.pid != trainer.pid}, grace=10)
            if not wait_dead(srv, session, "trainer", grace):
                killed |= procs.terminate(processes("trainer"), grace=5)
    inference = panes["inference"]
    if inference and not inference.dead and trainer is None:  # a sweep's server: no trainer's epilogue stops it
        echo(f"vf-rl: stopping '{session}': Ctrl-C to the inference server")
        tmux.send_ctrl_c(srv, inference.pane_id)
    if inference and not wait_dead(srv, session, "inference", grace):
        echo("vf-rl: the inference server did not stop; terminating it")
        killed |= procs.terminate(processes("inference"), grace=10)
    # children (vLLM's engine core) may still be finishing their own shutdown: give them a moment. Not the metrics
    # pane: it only shows the run, and closing the session ends it; after a trainer gone without its exit code
    # (its pane killed) the pane's `vf-rl watch` would wait out its own grace for that code first
    shown = processes("metrics")
    left = procs.wait_gone((everything | processes(*tmux.PANE_OPTION)) - shown, timeout=grace / 3)
    if left:
        echo(f"vf-rl: terminating {len(left)} leftover process(es) of the run: {procs.describe(left)}")
        killed |= procs.terminate(left, grace=5)
    tmux.kill_session(srv, session)
    if run_dir_option:  # the panes read these at start; with them gone, no secret stays on disk
        paths.api_key.unlink(missing_ok=True)
        paths.environment.unlink(missing_ok=True)
    return killed


def last_metrics(run_dir: Path) -> dict | None:
    """The last training step's line (an eval line, the last one after an eval, has no reward_mean)."""
    path = RunDir(run_dir).metrics
    rows = read_jsonl(path) if path.is_file() else []  # without a line being written
    steps = [r for r in rows if "reward_mean" in r]
    return steps[-1] if steps else None


def trainer_exit_code(run_dir: Path) -> str:
    """The exit code the trainer pane recorded, as written; "?" before it has."""
    exit_file = RunDir(run_dir).exit_code("trainer")
    return exit_file.read_text().strip() if exit_file.exists() else "?"


def describe_pane(state: tmux.PaneState | None, exit_code_file: Path | None = None) -> str:
    """tmux can report a pane dead (its pty closed) a moment before it knows the exit status; the pane
    script's own record (RunDir.exit_code) is the authority when present."""
    if exit_code_file is not None and exit_code_file.is_file() and (code := exit_code_file.read_text().strip()):
        if state is None or state.dead:
            return f"exited {code}"
    if state is None:
        return "gone"
    if not state.dead:
        return "running"
    return f"exited {state.exit_status}" if state.exit_status is not None else "exited"


def remote_server(run_dir: Path) -> str | None:
    """The run's inference.base_url (a server vf-rl did not start), from its resolved config; None for its own."""
    try:
        return tomllib.loads(RunDir(run_dir).config.read_text()).get("inference", {}).get("base_url")
    except (OSError, tomllib.TOMLDecodeError):
        return None


def status_line(srv: libtmux.Server, session: str, run_dir: Path) -> str:
    paths = RunDir(run_dir)
    inference = server_state(srv, session, paths)
    if record := read_record(run_dir):  # a sweep's own session: its server
        return f"{session}: sweep of {len(record['runs'])} runs, inference {inference} | {run_dir}"
    trainer = describe_pane(tmux.pane_state(srv, session, "trainer"), paths.exit_code("trainer"))
    if remote := remote_server(run_dir):
        inference = f"remote at {remote}"
    elif read_record(run_dir.parent):
        inference = f"the sweep's ({run_dir.parent.name})"
    m = last_metrics(run_dir)
    progress = (f"step {m['step']}/{m['max_steps']}, reward {m['reward_mean']:.3f}" if m
                else "no step yet")
    return (f"{session}: trainer {trainer}, inference {inference}, {progress} "
            f"| {run_dir}")


def server_state(srv: libtmux.Server, session: str, paths: RunDir) -> str:
    state = describe_pane(tmux.pane_state(srv, session, "inference"), paths.exit_code("inference"))
    if restarted := len(paths.server_restarts()):
        state += f" (vLLM started again {restarted}x)"
    return state


def run_ended(run_dir: Path, pane: str) -> bool:
    paths = RunDir(run_dir)
    if pane == "inference" and paths.exit_code("inference").exists():  # a sweep's server has no trainer of its own
        return True
    if not paths.exit_code("trainer").exists():
        return False
    if pane == "inference" and (pid_file := paths.inference_pid).is_file():
        return not pid_alive(int(pid_file.read_text() or 0))
    return True


def tail(path: Path, lines: int) -> tuple[str, int]:
    """The last `lines` lines of a file and the byte offset of its end."""
    data = path.read_bytes() if path.is_file() else b""
    kept = data.splitlines(keepends=True)[-lines:] if lines > 0 else []
    return b"".join(kept).decode(errors="replace"), len(data)


class ConsoleStream:
    """What `vf-rl @ cfg --no-attach` shows of trainer.log, written to `write`: all of it but the tracebacks
    vf-train put in the log for the record (between its markers; the console already got the one line)."""

    def __init__(self, write: Callable[[str], None]):
        self.write, self.partial, self.hiding = write, "", False

    def __call__(self, chunk: str) -> None:
        lines = (self.partial + chunk).split("\n")
        self.partial = lines.pop()  # a line still being written
        for line in lines:
            if line == TRACEBACK_START:
                self.hiding = True
            elif line == TRACEBACK_END:
                self.hiding = False
            elif not self.hiding:
                self.write(line + "\n")

    def close(self) -> None:
        if self.partial and not self.hiding:
            self.write(self.partial)
        self.partial = ""


def follow(path: Path, pos: int, until: Callable[[], bool], write: Callable[[str], None], poll: float = 0.5) -> None:
    """Write what is appended to path from byte `pos` on, until `until()` is true (then the rest)."""
    while True:
        done = until()
        if path.is_file():
            with open(path, "rb") as f:
                f.seek(pos)
                chunk = f.read()
            pos += len(chunk)
            if chunk:
                write(chunk.decode(errors="replace"))
        if done:
            return
        time.sleep(poll)
