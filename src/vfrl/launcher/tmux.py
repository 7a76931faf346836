"""The tmux session of a run: one window, two titled panes (Inference | Trainer)."""

from __future__ import annotations

from pathlib import Path

import libtmux

from vfrl.launcher.plan import Plan


def server(socket_name: str | None) -> libtmux.Server:
    return libtmux.Server(socket_name=socket_name) if socket_name else libtmux.Server()


def session_exists(srv: libtmux.Server, name: str) -> bool:
    try:
        return srv.has_session(name)
    except Exception:  # no tmux server running yet
        return False


def start_session(srv: libtmux.Server, plan: Plan, workdir: Path) -> libtmux.Session:
    session = srv.new_session(
        session_name=plan.session, window_name="vf-rl", start_directory=str(workdir),
        window_command=f"bash {plan.inference.script}", x=200, y=50,
    )
    window = session.active_window
    # panes stay visible after their process exits, so the last lines can be read
    window.set_option("remain-on-exit", "on")
    session.set_option("pane-border-status", "top")
    session.set_option("pane-border-format", " #{pane_index}: #{pane_title} ")
    inference = window.active_pane
    trainer = window.split(shell=f"bash {plan.trainer.script}", start_directory=str(workdir))
    inference.cmd("select-pane", "-T", plan.inference.title)
    trainer.cmd("select-pane", "-T", plan.trainer.title)
    window.select_layout("even-horizontal")
    trainer.select()
    return session
