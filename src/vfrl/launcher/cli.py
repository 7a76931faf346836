"""vf-rl: validate a run config, plan devices, and start vLLM + trainer in a tmux session.

    vf-rl @ configs/rl/quickstart.toml       start (attaches when run in a terminal)
    tmux attach -t <session>                 watch a running session

Imports no torch or vLLM: the launcher stays fast and its errors come before anything starts.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from vfrl.config import RLConfig, write_config
from vfrl.launcher.config_errors import ConfigError, load_user_config
from vfrl.launcher.plan import make_plan, pane_script, trainer_epilogue, count_gpus

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__.split("\n\n")[0],
                  context_settings={"help_option_names": ["-h", "--help"]})


def fail(msg: str, code: int = 2) -> None:
    typer.secho(f"vf-rl: error: {msg}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((host if host not in ("0.0.0.0", "::") else "127.0.0.1", port)) == 0


def new_run_dir(base: Path) -> Path:
    """Never reuse a run directory that has content: outputs/name, then outputs/name-2, -3, ..."""
    if not base.exists() or not any(base.iterdir()):
        return base
    n = 2
    while (candidate := base.with_name(f"{base.name}-{n}")).exists():
        n += 1
    return candidate


@app.callback()
def _root() -> None:
    """vf-rl: RL training runs in tmux (vLLM + trainer)."""


@app.command("run")
def run(
    config_path: Annotated[Path, typer.Argument(metavar="CONFIG", help="The run's TOML file.")],
    session: Annotated[Optional[str], typer.Option("--session", "-s", help="tmux session name \\[default: run_name].")] = None,
    tmux_socket: Annotated[Optional[str], typer.Option(envvar="VFRL_TMUX_SOCKET", help="tmux socket name (-L).")] = None,
    attach: Annotated[Optional[bool], typer.Option("--attach/--no-attach", help="Attach to the session \\[default: when stdout is a terminal]; without it vf-rl waits for the trainer, streams its log and exits with its code.")] = None,
    resume: Annotated[Optional[str], typer.Option("--resume", is_flag=False, flag_value="latest", metavar="[STEP|PATH]", help="Continue from a checkpoint in the same run dir: alone, the newest one of the newest run dir of this run_name; or a step number; or a checkpoint/run dir path.")] = None,
) -> None:
    """Start a run: `vf-rl @ CONFIG` (same as `vf-rl run CONFIG`)."""
    try:
        cfg = load_user_config(config_path)
    except ConfigError as e:
        fail(str(e))
    from vfrl.launcher import tmux

    srv = tmux.server(tmux_socket)
    session_name = session or cfg.args.run_name
    if tmux.session_exists(srv, session_name):
        fail(f"a tmux session named '{session_name}' is already running. Attach with "
             f"`tmux attach -t {session_name}`, or pick another name with --session.")
    host = cfg.inference.host
    if cfg.inference.port == 0:
        cfg.inference.port = free_port(host)
    elif port_in_use(host, cfg.inference.port):
        fail(f"{config_path}: inference.port = {cfg.inference.port} is already in use on {host}; "
             f"choose another port, or set inference.port = 0 to pick a free one.")
    if resume is not None:  # reuse the checkpoint's run dir; the trainer loads it (resume_from)
        from vfrl.launcher.resume import ResumeError, find_checkpoint, prepare_run_dir

        try:
            run_dir, checkpoint = find_checkpoint(Path(cfg.args.output_dir) / cfg.args.run_name, resume)
        except ResumeError as e:
            fail(f"{config_path}: {e}")
        run_dir = run_dir.resolve()
        cfg.args.resume_from = str(checkpoint.resolve())
        prepare_run_dir(run_dir)
        typer.echo(f"vf-rl: resuming from {checkpoint}")
    else:
        run_dir = new_run_dir(Path(cfg.args.output_dir) / cfg.args.run_name).resolve()
    plan = make_plan(cfg, run_dir, session_name, count_gpus(), os.cpu_count() or 1)
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    write_config(cfg, run_dir / "config.toml")
    key_file = run_dir / ".api_key"
    key_file.touch(mode=0o600)
    key_file.write_text(secrets.token_urlsafe(24))
    workdir = Path.cwd()
    plan.inference.script.write_text(pane_script(plan.inference, run_dir, workdir))
    plan.trainer.script.write_text(pane_script(plan.trainer, run_dir, workdir, trainer_epilogue(run_dir)))
    tmux.start_session(srv, plan, workdir)
    typer.echo(f"vf-rl: run directory {run_dir}")
    typer.echo(f"vf-rl: tmux session '{session_name}' started (inference on {plan.device}, "
               f"vLLM at http://{host}:{cfg.inference.port}/v1)")
    if attach is None:
        attach = sys.stdout.isatty()
    if attach:
        sock = ["-L", tmux_socket] if tmux_socket else []
        os.execvp("tmux", ["tmux", *sock, "attach", "-t", session_name])
    typer.echo(f"vf-rl: watch with `tmux {'-L ' + tmux_socket + ' ' if tmux_socket else ''}attach -t {session_name}`")
    raise typer.Exit(wait_for_trainer(srv, session_name, run_dir))


@app.command("plot")
def plot(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (has metrics.jsonl).")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="PNG path \\[default: RUN_DIR/curves.png].")] = None,
) -> None:
    """Write PNG curves (reward and eval reward, loss, mismatch KL, step time) of a run."""
    if not (run_dir / "metrics.jsonl").is_file():
        fail(f"{run_dir}: no metrics.jsonl here; pass a run directory such as outputs/quickstart")
    from vfrl.launcher.plot import plot_run

    for path in plot_run(run_dir, out):
        typer.echo(f"wrote {path}")


def wait_for_trainer(srv, session_name: str, run_dir: Path) -> int:
    """Stream the trainer log until it exits; then make sure inference is down and close the session."""
    log = run_dir / "logs" / "trainer.log"
    exit_file = run_dir / "trainer.exitcode"
    pos = 0
    try:
        while True:
            if log.exists():
                with open(log, "rb") as f:
                    f.seek(pos)
                    chunk = f.read()
                    pos += len(chunk)
                if chunk:
                    sys.stdout.write(chunk.decode(errors="replace"))
                    sys.stdout.flush()
            if exit_file.exists():
                code = int(exit_file.read_text().strip() or 1)
                break
            if not srv.has_session(session_name):
                typer.secho("vf-rl: the tmux session was closed before the trainer finished", err=True)
                return 1
            time.sleep(0.5)
    except KeyboardInterrupt:
        typer.echo("vf-rl: interrupted; stopping the run")
        code = 130
    stop_inference(run_dir)
    if srv.has_session(session_name):
        srv.kill_session(session_name)
    return code


def stop_inference(run_dir: Path, timeout: float = 60) -> None:
    import signal

    pid_file = run_dir / "inference.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
        deadline = time.time() + timeout
        while Path(f"/proc/{pid}").exists():
            if time.time() > deadline:
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
    except ProcessLookupError:
        pass


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["@"]:  # `vf-rl @ file.toml [options]`
        argv = ["run", *argv[1:]]
    app(args=argv, prog_name="vf-rl")
