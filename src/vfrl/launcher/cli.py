"""vf-rl: validate a run config, plan devices, and start vLLM + trainer in a tmux session.

With inference.base_url (a vLLM server vf-rl did not start) it checks that server and starts only the trainer.

    vf-rl @ CONFIG [--trainer.args.max_steps 10 ...]   start a run (attaches when run in a terminal)
    vf-rl @ CONFIG --dry-run                           print the resolved config and the plan; start nothing
    vf-rl @ CONFIG --sweep KEY=V1,V2                   the runs of a sweep against one vLLM (launcher/sweep.py)
    vf-rl status | logs [-f] | stop [SESSION]          runs in tmux, for people not attached

Imports no torch or vLLM: the launcher stays fast and its errors come before anything starts.
"""

from __future__ import annotations

import difflib
import os
import secrets
import shlex
import socket
import sys
import subprocess
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import tomli_w
import typer

from vfrl.config import RLConfig, write_config
from vfrl.inference.endpoints import client_host
from vfrl.launcher import lifecycle, tmux
from vfrl.launcher.config_errors import ConfigError, load_user_config
from vfrl.launcher.machine import Machine, detect_machine
from vfrl.launcher.overrides import parse_overrides
from vfrl.launcher.pane_env import write_environment
from vfrl.launcher.plan import PlanError, make_plan, network_notice
from vfrl.launcher.preflight import environment_problem, liger_problem, model_problem
from vfrl.launcher.render import pane_scripts, render_plan
from vfrl.run_dir import RunDir
from vfrl.trainer.failure import RESUME_COMMAND_ENV

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__.split("\n\n")[0],
                  context_settings={"help_option_names": ["-h", "--help"]})

SocketOption = Annotated[Optional[str], typer.Option("--tmux-socket", envvar="VFRL_TMUX_SOCKET",
                                                     help="tmux socket name (tmux -L).")]


def fail(msg: str, code: int = 2) -> None:
    typer.secho(f"vf-rl: error: {msg}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((client_host(host), port)) == 0


def new_run_dir(base: Path) -> Path:
    """Never reuse a run directory that has content: outputs/name, then outputs/name-2, -3, ..."""
    if not base.exists() or not any(base.iterdir()):
        return base
    n = 2
    while (candidate := base.with_name(f"{base.name}-{n}")).exists():
        n += 1
    return candidate


def tmux_hint(socket_name: str | None) -> str:
    return f"tmux -L {socket_name}" if socket_name else "tmux"


@app.callback()
def _root() -> None:
    """vf-rl: RL training runs in tmux (vLLM + trainer)."""


# `vf-rl run --help`. A string, not the docstring: typer shows a line break inside a paragraph after the first as it is
# written, so each paragraph is one line of the help and several lines here.
RUN_HELP = (
    "Start a run: `vf-rl @ CONFIG` (same as `vf-rl run CONFIG`).\n\n"
    "With inference.base_url (in CONFIG or --inference.base_url http://host:8000/v1) it trains against a vLLM server "
    "vf-rl did not start: the server is checked first, only the trainer starts, and the server is never stopped "
    "(docs/scaling.md).\n\n"
    "Override config keys after CONFIG by their dotted names; overrides are validated like the file and written into "
    "the run's resolved config.toml:\n\n"
    "vf-rl @ cfg.toml --trainer.args.max_steps 10 --inference.port=0 --model Qwen/Qwen2.5-0.5B-Instruct\n\n"
    'Values are TOML literals (10, 3e-4, true, "text", ["q_proj", "v_proj"]); anything else is a string; '
    "a flag alone means true.")


@app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}, help=RUN_HELP)
def run(
    ctx: typer.Context,
    config_path: Annotated[Path, typer.Argument(metavar="CONFIG", help="The run's TOML file.")],
    session: Annotated[Optional[str], typer.Option(
        "--session", "-s", help="tmux session name \\[default: run_name].")] = None,
    tmux_socket: SocketOption = None,
    attach: Annotated[Optional[bool], typer.Option(
        "--attach/--no-attach",
        help="Attach to the session \\[default: when stdout is a terminal]; without it vf-rl waits for the trainer, "
             "streams its log and exits with its code.")] = None,
    detach: Annotated[bool, typer.Option(
        "--detach", "-d", help="Start the session and return at once (follow with `vf-rl logs -f`).")] = False,
    replace: Annotated[bool, typer.Option(
        "--replace",
        help="If the session already exists, stop it cleanly (as `vf-rl stop` does), then start.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run",
        help="Print the resolved config and the plan (devices, each pane's exact script and environment, "
             "run directory); start nothing.")] = False,
    slurm: Annotated[bool, typer.Option(
        "--slurm",
        help="Write the run as an sbatch script (RUN_DIR/job.sbatch; [slurm] table) instead of starting tmux; "
             "with --dry-run only print it (docs/scaling.md).")] = False,
    submit: Annotated[bool, typer.Option(
        "--submit",
        help="With --slurm: submit the script (sbatch) and print the job id; follow with `vf-rl logs -f RUN_DIR`, "
             "stop with `vf-rl stop RUN_DIR`.")] = False,
    resume: Annotated[Optional[str], typer.Option(
        "--resume", metavar="[STEP|PATH]",
        help="Continue from a checkpoint in the same run dir: alone, the newest one of the newest run dir of this "
             "run_name; or a step number; or a checkpoint/run dir path.")] = None,
    sweep: Annotated[Optional[list[str]], typer.Option(
        "--sweep", metavar="KEY=V1,V2",
        help="Run every combination of the values given (repeat it for more keys) as the runs of one sweep, each "
             "with its own directory and session, all against one vLLM that serves each run's adapter: "
             "--sweep trainer.args.learning_rate=1e-3,3e-3 --sweep trainer.args.seed=0,1.")] = None,
) -> None:
    cfg = validated_config(ctx, config_path, dry_run)
    if submit and not slurm:
        fail("--submit submits the sbatch script of --slurm: add --slurm")
    if sweep:
        if slurm or resume is not None:
            fail(f"--sweep runs in tmux on this machine, from the start; leave out "
                 f"{'--slurm' if slurm else '--resume'}")
        raise typer.Exit(run_sweep(ctx, cfg, config_path, sweep, session, tmux_socket, attach, detach, replace,
                                   dry_run))
    if slurm:
        raise typer.Exit(run_as_slurm_job(ctx, cfg, config_path, resume, dry_run, submit))
    srv = tmux.server(tmux_socket)
    session_name = session or cfg.args.run_name
    exists = tmux.session_exists(srv, session_name)
    if exists and not dry_run:
        refuse_unless_replaceable(srv, session_name, tmux_socket, replace)
    run_dir = run_dir_for(cfg, config_path, resume, dry_run)
    machine = detect_machine()
    workdir = Path.cwd()
    try:
        plan = make_plan(cfg, run_dir, session_name, machine, workdir)
    except PlanError as e:
        fail(f"{config_path}: {e}")
    # a trainer that has to stop on a failure prints the command that continues the run
    plan.trainer.env[RESUME_COMMAND_ENV] = shlex.join(
        ["vf-rl", "@", str(config_path), *ctx.args, *(["--session", session] if session else []),
         *(["--tmux-socket", tmux_socket] if tmux_socket else [])])
    remote = plan.config.inference.base_url
    if not remote and (notice := network_notice(plan.config.inference.host)):
        typer.echo(f"vf-rl: note: {notice}", err=True)
    if dry_run:
        print_dry_run(plan, config_path, run_dir, workdir, machine, tmux_socket,
                      exists=("--replace would stop it first" if replace else "without --replace vf-rl would refuse")
                      if exists else None)
        raise typer.Exit(0)
    for note in plan.notes:
        typer.secho(f"vf-rl: note: {note}", err=True, fg=typer.colors.YELLOW)
    if remote:
        check_remote_server(plan.config)
    if exists:
        lifecycle.stop_run(srv, session_name, echo=typer.echo)
    launch(srv, plan, config_path, run_dir, workdir)
    typer.echo(f"vf-rl: run directory {run_dir}")
    inference = plan.config.inference
    typer.echo(f"vf-rl: tmux session '{session_name}' started " + (
        f"(the trainer only, on {plan.device}; vLLM at {remote}, not started by vf-rl)" if remote else
        f"(inference on {plan.device}, vLLM at " + (f"http://{inference.host}:{inference.port}/v1)" if inference.port
                                                     else f"a free port it binds, written to "
                                                          f"{RunDir(run_dir).inference_port})")))
    if detach:
        typer.echo(f"vf-rl: follow with `vf-rl logs -f{' --tmux-socket ' + tmux_socket if tmux_socket else ''}` or "
                   f"`{tmux_hint(tmux_socket)} attach -t {session_name}`; stop with `vf-rl stop {session_name}`")
        raise typer.Exit(0)
    if attach is None:
        attach = sys.stdout.isatty()
    if attach:
        attach_to(session_name, tmux_socket)
    typer.echo(f"vf-rl: watch with `{tmux_hint(tmux_socket)} attach -t {session_name}`; stop with "
               f"`vf-rl stop {session_name}` or Ctrl-C here")
    raise typer.Exit(wait_for_trainer(srv, session_name, run_dir))


def attach_to(session_name: str, tmux_socket: str | None) -> None:
    """This terminal becomes a tmux client of the session (never returns)."""
    sock = ["-L", tmux_socket] if tmux_socket else []
    # inside tmux already (same server): switch this client over rather than nest a second one
    verb = "switch-client" if os.environ.get("TMUX") and not tmux_socket else "attach"
    os.execvp("tmux", ["tmux", *sock, verb, "-t", session_name])


def run_sweep(ctx: typer.Context, cfg: RLConfig, config_path: Path, specs: list[str], session: str | None,
              tmux_socket: str | None, attach: bool | None, detach: bool, replace: bool, dry_run: bool) -> int:
    """--sweep: the runs of launcher/sweep.py in tmux (launcher/sweep_session.py); returns the worst exit code."""
    from vfrl.launcher import sweep_session
    from vfrl.launcher.sweep import SweepError, expand, parse_axis

    overrides = parse_overrides(ctx.args)
    name = session or cfg.args.run_name
    directory = new_run_dir(Path(cfg.args.output_dir) / cfg.args.run_name).resolve()
    machine, workdir = detect_machine(), Path.cwd()
    try:
        sweep = expand(lambda extra: load_user_config(config_path, overrides + extra),
                       [parse_axis(spec) for spec in specs], directory, name, machine, workdir)
    except (SweepError, PlanError) as e:
        fail(f"{config_path}: {e}")
    except ConfigError as e:
        fail(str(e))
    srv = tmux.server(tmux_socket)
    sessions = [sweep.server.session] + [run.plan.session for run in sweep.runs]
    if dry_run:
        typer.echo(f"# vf-rl dry run of a sweep of {config_path}: nothing was started\n")
        typer.echo(sweep_session.render(sweep, workdir, machine, tmux_socket))
        return 0
    if taken := [s for s in sessions if tmux.session_exists(srv, s)]:
        if not replace:
            fail(f"tmux session(s) {', '.join(taken)} already running; stop them (vf-rl stop {taken[0]}), name the "
                 f"sweep's session with --session, or add --replace")
        for name_taken in taken:
            lifecycle.stop_run(srv, name_taken, echo=typer.echo)
    server = sweep.server.config.inference
    if server.port and port_in_use(server.host, server.port):
        fail(f"{config_path}: inference.port = {server.port} is already in use on {server.host}; choose another "
             "port, or set inference.port = 0 to let vLLM bind a free one")
    for note in sweep.notes:
        typer.secho(f"vf-rl: note: {note}", err=True, fg=typer.colors.YELLOW)
    sweep_session.launch(srv, sweep, workdir)
    typer.echo(f"vf-rl: sweep directory {directory} ({len(sweep.runs)} runs against one vLLM)")
    for run in sweep.runs:
        typer.echo(f"vf-rl:   {run.plan.session}: {run.name}")
    typer.echo(f"vf-rl: tmux session '{sweep.server.session}' holds vLLM and the metrics of every run; each run has "
               f"its own session; stop one with `vf-rl stop {sweep.runs[0].plan.session}`, all with "
               f"`vf-rl stop {sweep.server.session}`")
    if detach:
        return 0
    if attach is None:
        attach = sys.stdout.isatty()
    if attach:
        attach_to(sweep.server.session, tmux_socket)
    try:
        codes = sweep_session.follow(srv, sweep, lambda line: typer.echo(line))
    except KeyboardInterrupt:
        typer.echo("vf-rl: interrupted; the sweep is stopped")
        return 130
    return max(codes, key=lambda code: (code != 0, code))


def run_as_slurm_job(ctx: typer.Context, cfg: RLConfig, config_path: Path, resume: str | None, dry_run: bool,
                     submit: bool) -> int:
    """--slurm: the same plan and pane scripts, run by a batch job instead of tmux (launcher/slurm.py)."""
    from vfrl.launcher import slurm

    here = detect_machine()
    try:
        lay = slurm.layout(cfg, here)
    except PlanError as e:
        fail(f"{config_path}: {e}")
    if submit and not dry_run and (missing := slurm.missing_tools()):
        fail(f"--submit: {', '.join(missing)} not found on PATH; run this on a Slurm login node, or leave out "
             f"--submit and submit the script with sbatch there")
    run_dir = run_dir_for(cfg, config_path, resume, dry_run)
    workdir, machine = Path.cwd(), slurm.node_machine(cfg, lay, here)
    try:
        plan = make_plan(cfg, run_dir, cfg.args.run_name, machine, workdir, nodes_from_job=lay.trainer_nodes > 1)
    except PlanError as e:
        fail(f"{config_path}: {e}")
    slurm.place(plan, lay)
    plan.notes += slurm.notes(cfg, lay)
    plan.trainer.env[RESUME_COMMAND_ENV] = shlex.join(["vf-rl", "@", str(config_path), *ctx.args,
                                                       "--slurm", "--submit"])
    script = slurm.sbatch_script(plan, lay, workdir)
    if dry_run:
        per_node = Machine(gpus=lay.gpus_per_node, cpus=machine.cpus, gpu_memory_mib=machine.gpu_memory_mib)
        print_dry_run(plan, config_path, run_dir, workdir, per_node, None, exists=None,
                      job=f"{lay.nodes} node(s), the sbatch script below")
        typer.echo(f"\n# sbatch script (written to {run_dir / 'job.sbatch'} by --slurm)\n{script}", nl=False)
        return 0
    for note in plan.notes:
        typer.secho(f"vf-rl: note: {note}", err=True, fg=typer.colors.YELLOW)
    if plan.config.inference.base_url:
        check_remote_server(plan.config)
    launch(None, plan, config_path, run_dir, workdir)
    path = run_dir / "job.sbatch"
    path.write_text(script)
    typer.echo(f"vf-rl: run directory {run_dir}")
    if not submit:
        typer.echo(f"vf-rl: wrote {path}; submit it with `sbatch {path}` (or run vf-rl with --slurm --submit)")
        return 0
    try:
        job = slurm.submit(path)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        fail(f"sbatch refused {path}: {e}")
    (run_dir / slurm.JOB_ID_FILE).write_text(job + "\n")
    typer.echo(f"vf-rl: submitted batch job {job}; follow with `vf-rl logs -f {run_dir}`, "
               f"see it with `vf-rl status {run_dir}`, stop it with `vf-rl stop {run_dir}`")
    return 0


def validated_config(ctx: typer.Context, config_path: Path, dry_run: bool) -> RLConfig:
    """The file plus the command line's overrides, validated; a model or environment that vLLM or vf-train
    would fail on only after start-up is refused now (a dry run only warns)."""
    try:
        overrides = parse_overrides(ctx.args)
    except ValueError as e:
        fail(str(e))
    for o in overrides:  # a mistyped option (`--dry-rnu`) is not a config key either
        if "." not in o.key and o.key not in RLConfig.model_fields:
            options = [opt for p in ctx.command.params for opt in p.opts if opt.startswith("--")]
            close = difflib.get_close_matches(o.flag, options, n=1)
            fail(f"no such option {o.flag}" + (f"; did you mean {close[0]}?" if close else "")
                 + " (config keys are dotted: --trainer.args.max_steps 10)")
    try:
        cfg = load_user_config(config_path, overrides)
    except ConfigError as e:
        fail(str(e))
    for problem in (model_problem(cfg.model, Path.cwd()),
                    environment_problem(cfg.env.id, cfg.env.renderer, cfg.env.workers, cfg.env.args),
                    liger_problem(cfg)):
        if problem and not dry_run:
            fail(f"{config_path}: {problem}")
        if problem:
            typer.secho(f"vf-rl: warning: {config_path}: {problem}", err=True, fg=typer.colors.YELLOW)
    return cfg


def refuse_unless_replaceable(srv, session_name: str, tmux_socket: str | None, replace: bool) -> None:
    """The session name is taken: go on only with --replace, and only over a vf-rl session."""
    if not replace:
        fail(f"a tmux session named '{session_name}' is already running. Attach with "
             f"`{tmux_hint(tmux_socket)} attach -t {session_name}`, stop it with `vf-rl stop {session_name}`, "
             f"start this run with --replace to stop that one first, or pick another name with --session.")
    if session_name not in tmux.run_sessions(srv):
        fail(f"the tmux session '{session_name}' was not started by vf-rl; --replace only stops vf-rl "
             f"sessions. Pick another name with --session.")


def run_dir_for(cfg: RLConfig, config_path: Path, resume: str | None, dry_run: bool) -> Path:
    """A new run directory, or with --resume the checkpoint's own (the trainer loads it: resume_from)."""
    if resume is None:
        return new_run_dir(Path(cfg.args.output_dir) / cfg.args.run_name).resolve()
    from vfrl.launcher.resume import ResumeError, find_checkpoint, prepare_run_dir

    try:
        run_dir, checkpoint = find_checkpoint(Path(cfg.args.output_dir) / cfg.args.run_name, resume)
    except ResumeError as e:
        fail(f"{config_path}: {e}")
    cfg.args.resume_from = str(checkpoint.resolve())
    if not dry_run:
        prepare_run_dir(run_dir.resolve())
    typer.echo(f"vf-rl: resuming from {checkpoint}")
    return run_dir.resolve()


def print_dry_run(plan, config_path: Path, run_dir: Path, workdir: Path, machine, tmux_socket: str | None,
                  exists: str | None, job: str | None = None) -> None:
    typer.echo(f"# vf-rl dry run of {config_path}: nothing was started\n\n"
               f"# resolved config (written to {RunDir(run_dir).config} at launch)")
    typer.echo(tomli_w.dumps(plan.config.model_dump(mode="json", exclude_none=True)))
    typer.echo("# plan")
    typer.echo(render_plan(plan, workdir, machine, tmux_socket, job))
    if exists:
        typer.echo(f"\n# the tmux session '{plan.session}' exists: {exists}")


def check_remote_server(cfg: RLConfig) -> None:
    """inference.base_url: the server must offer what the run needs before the trainer starts; one line per lack."""
    from vfrl.inference.remote import server_problems

    typer.echo(f"vf-rl: checking the vLLM server at {cfg.inference.base_url}")
    if problems := server_problems(cfg):
        for problem in problems[:-1]:
            typer.secho(f"vf-rl: error: {problem}", err=True, fg=typer.colors.RED)
        fail(problems[-1])


def launch(srv, plan, config_path: Path, run_dir: Path, workdir: Path) -> None:
    """Pick the port, write the run directory (resolved config, environment, API key, pane scripts), start tmux
    (srv None: a Slurm job runs the scripts).
    A remote server's key (inference.api_key_var) reaches the trainer the way the key of vf-rl's own does."""
    inference = plan.config.inference
    if inference.base_url:
        from vfrl.inference.remote import api_key

        key = api_key(plan.config)
    else:
        key = secrets.token_urlsafe(24)
        # port 0 stays 0 in a run of this machine: vLLM binds a free port itself, vf-vllm writes it to the run
        # directory (inference/served_port.py). A Slurm job's trainer may dial another node: it gets one here.
        if inference.port == 0 and srv is None:
            inference.port = free_port(inference.host)
        elif inference.port and port_in_use(inference.host, inference.port):
            fail(f"{config_path}: inference.port = {inference.port} is already in use on {inference.host}; "
                 f"choose another port, or set inference.port = 0 to pick a free one.")
    paths = RunDir(run_dir)
    paths.logs.mkdir(parents=True, exist_ok=True)
    paths.inference_port.unlink(missing_ok=True)  # the last server's, in a resumed run's directory
    write_config(plan.config, paths.config)
    write_environment(run_dir, os.environ)
    paths.api_key.touch(mode=0o600)
    paths.api_key.write_text(key)
    for pane, script in pane_scripts(plan, workdir):
        pane.script.write_text(script)
    if srv is not None:
        tmux.start_session(srv, plan, workdir)


def pick_session(srv, session: str | None, socket_name: str | None) -> tuple[str, Path]:
    """The named vf-rl session, or the only one running; one clear line otherwise."""
    runs = tmux.run_sessions(srv)
    where = f" on tmux socket '{socket_name}'" if socket_name else ""
    if session is not None:
        if session not in runs:
            have = ", ".join(runs) or "none"
            fail(f"no vf-rl session named '{session}'{where} (running: {have})")
        return session, runs[session]
    if len(runs) == 1:
        return next(iter(runs.items()))
    if not runs:
        fail(f"no vf-rl session is running{where}")
    fail(f"{len(runs)} vf-rl sessions are running{where} ({', '.join(runs)}); name one")


@app.command("stop")
def stop(
    session: Annotated[Optional[str], typer.Argument(
        metavar="SESSION|RUN_DIR",
        help="Session name \\[default: the only vf-rl session], or the run directory of a --slurm run.")] = None,
    tmux_socket: SocketOption = None,
    timeout: Annotated[float, typer.Option(help="Seconds the trainer gets to finish its step after Ctrl-C.")] = 60,
) -> None:
    """Stop a run cleanly: Ctrl-C to the trainer, inference server stopped, no process left, session closed.
    A run directory of a --slurm run: the same order through scancel (SIGUSR2, which only the trainer takes),
    plain scancel if the job has not ended in time; waits until it has left the queue."""
    if session is not None and (Path(session) / "slurm.jobid").is_file():
        from vfrl.launcher import slurm

        try:
            code = slurm.stop(Path(session), trainer_grace=timeout, timeout=max(timeout, 90), echo=typer.echo)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            fail(str(e))
        typer.echo(f"vf-rl: stopped slurm job {slurm.job_id(Path(session))} (trainer exit code {code or '?'}); "
                   f"run directory {Path(session).resolve()}")
        return
    srv = tmux.server(tmux_socket)
    name, run_dir = pick_session(srv, session, tmux_socket)
    from vfrl.launcher.sweep import read_record

    if record := read_record(run_dir):  # a sweep's own session: every run of it, then its server
        from vfrl.launcher import sweep_session

        sweep_session.stop(srv, record, trainer_grace=timeout, echo=typer.echo)
        codes = ", ".join(f"{run['session']} {lifecycle.trainer_exit_code(Path(run['run_dir']))}"
                          for run in record["runs"])
        typer.echo(f"vf-rl: stopped the sweep '{name}' (trainer exit codes: {codes}); sweep directory {run_dir}")
        return
    killed = lifecycle.stop_run(srv, name, trainer_grace=timeout, echo=typer.echo)
    typer.echo(f"vf-rl: stopped '{name}' (trainer exit code {lifecycle.trainer_exit_code(run_dir)}"
               + (f"; {len(killed)} process(es) needed SIGKILL" if killed else "") + f"); run directory {run_dir}")


@app.command("status")
def status(
    run_dir: Annotated[Optional[Path], typer.Argument(
        metavar="[RUN_DIR]", help="The run directory of a --slurm run: its job's state.")] = None,
    tmux_socket: SocketOption = None,
) -> None:
    """One line per vf-rl session: trainer and inference state, last step and reward, run directory.
    With the run directory of a --slurm run: the same line for its job (squeue)."""
    if run_dir is not None:
        from vfrl.launcher import slurm

        if not (run_dir / slurm.JOB_ID_FILE).is_file():
            fail(f"{run_dir}: no slurm.jobid here (a tmux run is shown by `vf-rl status` alone)")
        try:
            typer.echo(slurm.status_line(run_dir.resolve()))
        except (OSError, subprocess.SubprocessError) as e:
            fail(f"squeue failed: {e}")
        return
    srv = tmux.server(tmux_socket)
    runs = tmux.run_sessions(srv)
    if not runs:
        typer.echo("no vf-rl session is running" + (f" on tmux socket '{tmux_socket}'" if tmux_socket else ""))
    for name, run_dir in runs.items():
        typer.echo(lifecycle.status_line(srv, name, run_dir))


@app.command("watch")
def watch_cmd(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (has or will have metrics.jsonl), or a sweep's.")],
) -> None:
    """Print one line per training step as it is logged (reward, 10-step mean, loss, KL, step time, ETA); for a sweep,
    the lines of every run under its name."""
    from vfrl.launcher.sweep import read_record
    from vfrl.launcher.watch import watch, watch_runs

    try:
        if record := read_record(run_dir):
            watch_runs([Path(r["run_dir"]) for r in record["runs"]], live=sys.stdout.isatty())
        else:
            watch(run_dir)
    except KeyboardInterrupt:
        pass


@app.command("logs")
def logs(
    target: Annotated[Optional[str], typer.Argument(
        metavar="SESSION|RUN_DIR",
        help="A vf-rl session or a run directory \\[default: the only vf-rl session].")] = None,
    pane: Annotated[str, typer.Option("--pane", "-p", help="inference or trainer.")] = "trainer",
    lines: Annotated[int, typer.Option("--lines", "-n", help="Lines of the log to show first.")] = 40,
    follow: Annotated[bool, typer.Option(
        "--follow", "-f", help="Keep printing new lines until the run ends (or Ctrl-C).")] = False,
    tmux_socket: SocketOption = None,
) -> None:
    """Print a pane's log (logs/trainer.log or logs/inference.log of the run)."""
    if pane not in ("inference", "trainer"):
        fail(f"--pane {pane}: choose inference or trainer")
    if target is not None and RunDir(Path(target)).logs.is_dir():
        run_dir = Path(target)
    else:
        _, run_dir = pick_session(tmux.server(tmux_socket), target, tmux_socket)
    if pane == "inference" and (remote := lifecycle.remote_server(run_dir)):
        fail(f"{run_dir}: the inference server is remote ({remote}, inference.base_url); its log is where it runs")
    from vfrl.launcher.sweep import read_record

    if record := read_record(run_dir):  # a sweep's own directory: its server's
        if pane == "trainer":
            fail(f"{run_dir} is a sweep: its runs have the trainers ({', '.join(r['session'] for r in record['runs'])}"
                 f"); its server's log is --pane inference")
    elif pane == "inference" and read_record(run_dir.parent):  # a run of a sweep: the server it shares
        run_dir = run_dir.parent
    path = RunDir(run_dir).log(pane)
    text, end = lifecycle.tail(path, lines)
    sys.stdout.write(text)
    sys.stdout.flush()
    if follow:
        def write(chunk: str) -> None:
            sys.stdout.write(chunk)
            sys.stdout.flush()

        try:
            lifecycle.follow(path, end, lambda: lifecycle.run_ended(run_dir, pane), write)
        except KeyboardInterrupt:
            pass


@app.command("plot")
def plot(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (has metrics.jsonl), or a sweep's.")],
    out: Annotated[Optional[Path], typer.Option(
        "--out", "-o", help="PNG path \\[default: RUN_DIR/curves.png].")] = None,
) -> None:
    """Write PNG curves (reward and eval reward, loss, mismatch KL, step time) of a run; of a sweep, every run's
    reward and eval reward in one figure, and a table of their final numbers."""
    from vfrl.launcher.sweep import read_record

    if record := read_record(run_dir):
        from vfrl.launcher.plot import final_numbers, plot_runs

        runs = [Path(r["run_dir"]) for r in record["runs"]]
        for path in plot_runs(runs, out or RunDir(run_dir).curves):
            typer.echo(f"wrote {path}")
        width = max(len(r.name) for r in runs)
        typer.echo(f"{'run':<{width}}  {'steps':>5}  {'reward (last 5)':>15}  {'eval reward':>11}")
        fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
        for r in runs:
            n = final_numbers(r)
            typer.echo(f"{r.name:<{width}}  {n['steps']:>5}  {fmt(n['reward_last5']):>15}  {fmt(n['eval_reward']):>11}")
        return
    if not RunDir(run_dir).metrics.is_file():
        fail(f"{run_dir}: no metrics.jsonl here; pass a run directory such as outputs/quickstart")
    from vfrl.launcher.plot import plot_run

    for path in plot_run(run_dir, out):
        typer.echo(f"wrote {path}")


def policy_of(run_dir: Path, step: int | None, best: str | None = None):
    """The run's policy of `step` (None: the newest; `best` "eval": the one with the highest eval reward), or the
    one line saying what the run keeps."""
    from vfrl.launcher.run_policy import NoPolicy, best_evaluated_step, find_policy

    if step is not None and best is not None:
        fail("--step and --best each pick the policy: give one")
    try:
        return find_policy(run_dir, best_evaluated_step(run_dir) if best else step)
    except NoPolicy as e:
        fail(str(e))


StepOption = Annotated[Optional[int], typer.Option(
    "--step", help="The policy after this many steps \\[default: the newest the run keeps].")]


class Best(str, Enum):
    eval = "eval"


BestOption = Annotated[Optional[Best], typer.Option(
    "--best", help="eval: the kept policy with the highest eval reward the run logged, instead of --step.")]


@app.command("eval")
def eval_cmd(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (has config.toml).")],
    step: StepOption = None,
    best: BestOption = None,
) -> None:
    """Evaluate a run's policy on its eval split as training did (its environment, args, sampling and seeds), on a
    vf-vllm of its own; results in RUN_DIR/evals/step-N/."""
    from vfrl.launcher.evaluate import evaluate_policy

    policy = policy_of(run_dir, step, best)
    from vfrl.envs.loader import EnvironmentLoadError
    from vfrl.trainer.inference_watch import InferenceLost

    try:
        stats = evaluate_policy(run_dir, policy, say=typer.echo)
    except InferenceLost as e:
        fail(f"vf-rl eval: {e} (see {run_dir}/evals/step-{policy.step}/logs/inference.log)", 1)
    except EnvironmentLoadError as e:
        fail(f"vf-rl eval: {e}", 1)
    if "eval/reward_mean" not in stats:
        fail(f"vf-rl eval: no eval rollout finished (the server's side: {run_dir}/evals/step-{policy.step}/logs/"
             "inference.log)", 1)
    typer.echo(f"eval reward (step {policy.step})  {stats['eval/reward_mean']:.3f}  "
               f"({int(stats['eval/num_rollouts'])} rollouts; {run_dir}/evals/step-{policy.step}/results.json)")


@app.command("export")
def export_cmd(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (has config.toml).")],
    step: StepOption = None,
    best: BestOption = None,
    out: Annotated[Optional[Path], typer.Option(
        "--out", "-o", help="The folder to write \\[default: RUN_DIR/export/step-N].")] = None,
    adapter_only: Annotated[bool, typer.Option(
        "--adapter-only", help="Copy the LoRA adapter as it is instead of merging it into the base model.")] = False,
) -> None:
    """Write a run's policy as a Hugging Face model folder (the LoRA adapter merged into the base model), which
    transformers loads and vLLM serves as it is."""
    from vfrl.launcher.export import export_policy

    policy = policy_of(run_dir, step, best)
    out = out or run_dir / "export" / f"step-{policy.step}{'-adapter' if adapter_only and policy.adapter else ''}"
    try:
        export_policy(run_dir, policy, out, adapter_only)
    except OSError as e:  # the base model or the policy's files unreadable, the disk full: nothing half written
        fail(f"vf-rl export: {type(e).__name__}: {e}", 1)
    kind = "the LoRA adapter" if adapter_only and policy.adapter else "a Hugging Face model folder"
    typer.echo(f"wrote {out}: step {policy.step} as {kind}")


def wait_for_trainer(srv, session_name: str, run_dir: Path) -> int:
    """Stream the trainer log until it exits; then stop the run (the `vf-rl stop` path) and return its code."""
    paths = RunDir(run_dir)
    exit_file = paths.exit_code("trainer")
    code = 1
    console = lifecycle.ConsoleStream(sys.stdout.write)
    try:
        lifecycle.follow(paths.log("trainer"), 0,
                         lambda: exit_file.exists() or not tmux.session_exists(srv, session_name), console)
        console.close()
        if exit_file.exists():
            code = int(exit_file.read_text().strip() or 1)
        else:
            typer.secho("vf-rl: the tmux session was closed before the trainer finished", err=True)
    except KeyboardInterrupt:
        typer.echo("vf-rl: interrupted; stopping the run")
        code = 130
    lifecycle.stop_run(srv, session_name, echo=typer.echo)
    return code


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["@"]:  # `vf-rl @ file.toml [options]`
        argv = ["run", *argv[1:]]
    from vfrl.launcher.resume import with_resume_default

    app(args=with_resume_default(argv), prog_name="vf-rl")
