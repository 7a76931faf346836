"""The tmux session of a run: one window, titled panes: Inference | Trainer, with Metrics under the trainer
(no Inference pane when the server is remote, inference.base_url, or a sweep's: the sweep's own session holds it,
with the metrics of all its runs under it).

The session records its run in tmux user options, so `vf-rl stop/status/logs` find it from the
session name alone: @vfrl-run-dir, @vfrl-inference-pane, @vfrl-trainer-pane (pane ids).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

import libtmux
from libtmux.constants import PaneDirection

from vfrl.launcher.plan import Plan
from vfrl.launcher.procs import MARKER

RUN_DIR_OPTION = "@vfrl-run-dir"
PANE_OPTION = {"inference": "@vfrl-inference-pane", "trainer": "@vfrl-trainer-pane", "metrics": "@vfrl-metrics-pane"}


@dataclass
class PaneState:
    pane_id: str
    pid: int  # the pane's shell: a session leader, so its processes have this session id
    dead: bool
    exit_status: int | None


def server(socket_name: str | None) -> libtmux.Server:
    return libtmux.Server(socket_name=socket_name) if socket_name else libtmux.Server()


def server_pid(srv: libtmux.Server) -> int | None:
    """The tmux server's pid; None when none runs on that socket."""
    try:
        out = srv.cmd("display-message", "-p", "#{pid}").stdout
    except Exception:  # no tmux server running
        return None
    return int(out[0]) if out and out[0].strip().isdigit() else None


def session_exists(srv: libtmux.Server, name: str) -> bool:
    try:
        return srv.has_session(name, exact=True)
    except Exception:  # no tmux server running yet
        return False


def new_run_session(srv: libtmux.Server, name: str, window_name: str, first_script: Path, run_dir: Path,
                    workdir: Path) -> libtmux.Session:
    """A session whose first pane runs `first_script`, recording `run_dir`; panes stay visible after their process
    exits, so the last lines can be read, and show their titles."""
    session = srv.new_session(session_name=name, window_name=window_name, start_directory=str(workdir),
                              window_command=f"bash {first_script}", x=200, y=50)
    session.active_window.set_option("remain-on-exit", "on")
    session.set_option("pane-border-status", "top")
    session.set_option("pane-border-format", " #{pane_index}: #{pane_title} ")
    session.set_option(RUN_DIR_OPTION, str(run_dir))
    return session


def name_pane(session: libtmux.Session, role: str, pane, title: str) -> None:
    """Title `pane` and record it as the session's `role` pane (PANE_OPTION)."""
    pane.cmd("select-pane", "-T", title)
    session.set_option(PANE_OPTION[role], pane.pane_id)


def start_session(srv: libtmux.Server, plan: Plan, workdir: Path) -> libtmux.Session:
    """The panes of `plan`; without an inference pane (a remote server, a sweep's run) the trainer's is the first."""
    first = plan.inference or plan.trainer
    session = new_run_session(srv, plan.session, "vf-rl", first.script, plan.run_dir, workdir)
    window = session.active_window
    if plan.inference is None:
        trainer = window.active_pane
    else:
        inference = window.active_pane
        trainer = window.split(shell=f"bash {plan.trainer.script}", start_directory=str(workdir))
        name_pane(session, "inference", inference, plan.inference.title)
        window.select_layout("even-horizontal")
    name_pane(session, "trainer", trainer, plan.trainer.title)
    metrics = trainer.split(direction=PaneDirection.Below, size=12, shell=shlex.join(plan.metrics.command),
                            start_directory=str(workdir), environment={MARKER: str(plan.run_dir)})
    name_pane(session, "metrics", metrics, plan.metrics.title)
    trainer.select()
    return session


def start_sweep_session(srv: libtmux.Server, server: Plan, metrics_command: list[str],
                        workdir: Path) -> libtmux.Session:
    """A sweep's own session (launcher/sweep.py): its vf-vllm, and under it the metrics of every run (each run has a
    session of its own, started by start_session)."""
    session = new_run_session(srv, server.session, "vf-rl sweep", server.inference.script, server.run_dir, workdir)
    inference = session.active_window.active_pane
    name_pane(session, "inference", inference, server.inference.title)
    metrics = inference.split(direction=PaneDirection.Below, shell=shlex.join(metrics_command),
                              start_directory=str(workdir), environment={MARKER: str(server.run_dir)})
    name_pane(session, "metrics", metrics, "Metrics of the runs")
    metrics.select()
    return session


def option(srv: libtmux.Server, session: str, name: str) -> str | None:
    res = srv.cmd("show-options", "-t", session, "-v", name)
    return res.stdout[0].strip() if res.returncode == 0 and res.stdout else None


def run_sessions(srv: libtmux.Server) -> dict[str, Path]:
    """{session name: run dir} of the vf-rl sessions on this tmux server."""
    try:
        names = [s.session_name for s in srv.sessions]
    except Exception:  # no server
        return {}
    out = {}
    for name in names:
        if run_dir := option(srv, name, RUN_DIR_OPTION):
            out[name] = Path(run_dir)
    return out


def pane_state(srv: libtmux.Server, session: str, role: str) -> PaneState | None:
    pane_id = option(srv, session, PANE_OPTION[role])
    if not pane_id:
        return None
    res = srv.cmd("display-message", "-p", "-t", pane_id, "#{pane_pid} #{pane_dead} #{pane_dead_status}")
    if res.returncode != 0 or not res.stdout:
        return None
    pid, dead, *status = res.stdout[0].split()
    return PaneState(pane_id, int(pid), dead == "1", int(status[0]) if status else None)


def send_ctrl_c(srv: libtmux.Server, pane_id: str) -> None:
    srv.cmd("send-keys", "-t", pane_id, "C-c")


def kill_session(srv: libtmux.Server, session: str) -> None:
    if session_exists(srv, session):
        srv.cmd("kill-session", "-t", f"={session}")
