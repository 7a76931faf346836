"""A sweep in tmux (launcher/sweep.py says what a sweep is): its files written, its sessions started, followed to
the end, stopped.

The sweep's session holds vf-vllm and the metrics of every run; each run has a session of its own (its trainer and
its metrics), named `<sweep>-<n>`, so `vf-rl stop`, `status` and `logs` take a run as they take any run. One API key
for the server and every run; each run's directory holds it as a run's does, deleted the same way.
"""

from __future__ import annotations

import os
import secrets
import shlex
from pathlib import Path
from typing import Callable

from vfrl.config import write_config
from vfrl.launcher import lifecycle, tmux
from vfrl.launcher.pane_env import write_environment
from vfrl.launcher.plan import console_script
from vfrl.launcher.render import inference_epilogue, pane_script, pane_scripts, render_plan
from vfrl.launcher.sweep import Sweep, write_record
from vfrl.launcher.watch import watch_runs
from vfrl.run_dir import RunDir


def metrics_command(sweep: Sweep) -> list[str]:
    return [console_script("vf-rl"), "watch", str(sweep.directory)]


def scripts(sweep: Sweep, workdir: Path) -> list[tuple[Path, str]]:
    """Each pane script of the sweep: its server's, then each run's trainer."""
    server = sweep.server
    paths = RunDir(server.run_dir)
    # the server's pane read its key and environment at start; the runs' trainer panes delete theirs
    after = inference_epilogue(server.run_dir) + [f"rm -f {shlex.quote(str(paths.api_key))} "
                                                   f"{shlex.quote(str(paths.environment))}"]
    out = [(server.inference.script, pane_script(server.inference, server.run_dir, workdir, after))]
    for run in sweep.runs:
        out += [(pane.script, script) for pane, script in pane_scripts(run.plan, workdir)]
    return out


def launch(srv, sweep: Sweep, workdir: Path) -> None:
    """Write the sweep's directory and every run's (resolved config, environment, API key, pane scripts) and start
    the sweep's session, then one per run."""
    key = secrets.token_urlsafe(24)
    for plan in [sweep.server] + [run.plan for run in sweep.runs]:
        paths = RunDir(plan.run_dir)
        paths.logs.mkdir(parents=True, exist_ok=True)
        write_config(plan.config, paths.config)
        write_environment(plan.run_dir, os.environ)
        paths.api_key.touch(mode=0o600)
        paths.api_key.write_text(key)
    write_record(sweep)
    for path, script in scripts(sweep, workdir):
        path.write_text(script)
    tmux.start_sweep_session(srv, sweep.server, metrics_command(sweep), workdir)
    for run in sweep.runs:
        tmux.start_session(srv, run.plan, workdir)


def render(sweep: Sweep, workdir: Path, machine, socket_name: str | None) -> str:
    """What `--dry-run` prints for a sweep: its runs and their values, the server's plan, each run's trainer."""
    out = [f"sweep:          {sweep.name}, {len(sweep.runs)} runs against one vLLM; directory {sweep.directory}"]
    out += [f"  {run.plan.session:<{len(sweep.name) + 4}} {run.name}  (run directory {run.plan.run_dir})"
            for run in sweep.runs]
    served = sweep.server.config
    out.append(f"vLLM serves:    every run's adapters, up to {served.inference.args['max_loras']} at once "
               f"(--max-loras), rank <= {served.args.lora_rank}")
    out += [f"note:           {note}" for note in sweep.notes]
    server_plan = render_plan(sweep.server, workdir, machine, socket_name, scripts=False)  # its own below
    out += ["", "# the sweep's server (its session: vf-vllm and the metrics of every run)", server_plan,
            f"trainer threads: {sweep.runs[0].plan.trainer.env.get('OMP_NUM_THREADS', '-')} per run"
            if sweep.runs[0].plan.device == "cpu" else f"trainer GPUs: {','.join(sweep.runs[0].plan.trainer_devices)}"
            f" (each run's)"]
    for path, script in scripts(sweep, workdir):
        out += ["", f"--- {path} ---", script.rstrip()]
    return "\n".join(out)


def follow(srv, sweep: Sweep, write: Callable[[str], None]) -> list[int]:
    """Stream every run's steps until each has ended; then stop the sweep. Returns each run's exit code (1 when
    unknown: its session was closed first)."""
    record = sweep.record()
    try:
        codes = watch_runs([run.plan.run_dir for run in sweep.runs], write=write)
    finally:
        stop(srv, record, echo=write)
    return [1 if code is None else code for code in codes]


def stop(srv, record: dict, only: str | None = None, trainer_grace: float = 60,
         echo: Callable[[str], None] = print) -> None:
    """Stop the runs of a sweep (each as `vf-rl stop` stops a run), then its server; `only`: that run's session
    alone, the server going on for the others."""
    for run in record["runs"]:
        if (only is None or run["session"] == only) and tmux.session_exists(srv, run["session"]):
            lifecycle.stop_run(srv, run["session"], trainer_grace=trainer_grace, echo=echo)
    if only is None and tmux.session_exists(srv, record["session"]):
        lifecycle.stop_run(srv, record["session"], echo=echo)
