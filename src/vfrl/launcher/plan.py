"""The launch plan: which devices each pane gets and the exact script each pane runs.

Pure functions of (config, run dir, machine): unit-testable without GPUs, tmux or vLLM.

    8 GPUs, inference.gpus = 6, trainer.gpus = 2, tensor_parallel_size = 2
      Inference  CUDA_VISIBLE_DEVICES=0,1,2,3,4,5   vLLM: 3 data-parallel replicas x 2-way tensor parallel
      Trainer    CUDA_VISIBLE_DEVICES=6,7           accelerate launch --num-processes 2 --config-file ddp.yaml
    no GPU: vLLM's threads bound to the first half of the cores, the trainer gets the rest
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from vfrl.bundle import bundled
from vfrl.config import ACCELERATE_CONFIGS, RLConfig
from vfrl.launcher.pane_env import environment_file, source_line
from vfrl.launcher.procs import MARKER


class PlanError(Exception):
    """A config that is valid on paper but cannot run on this machine: (dotted key, value, what is allowed)."""

    def __init__(self, key: str, value, allowed: str):
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"{key} = {value} is invalid: {allowed}")


@dataclass(frozen=True)
class Machine:
    gpus: int
    cpus: int


@dataclass
class PanePlan:
    title: str
    script: Path
    env: dict[str, str] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)
    log: Path | None = None


@dataclass
class Plan:
    run_dir: Path
    session: str
    device: str  # "cuda" or "cpu"
    inference_devices: list[int]
    trainer_devices: list[int]
    inference: PanePlan
    trainer: PanePlan
    metrics: PanePlan  # `vf-rl watch RUN_DIR` under the trainer: one line per step
    config: RLConfig  # the resolved config the panes read (vf-rl writes it to run_dir/config.toml)
    tensor_parallel: int = 1
    data_parallel: int = 1
    trainer_processes: int = 1


def count_gpus() -> int:
    """GPUs visible to this process, without importing torch (nvidia-smi; CUDA_VISIBLE_DEVICES narrows)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() not in ("", "-1")])
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def detect_machine() -> Machine:
    return Machine(gpus=count_gpus(), cpus=len(os.sched_getaffinity(0)))


def split_gpus(inference_gpus: int, trainer_gpus: int, present: int) -> tuple[list[int], list[int]]:
    """Contiguous split, inference first: 6 + 2 of 8 -> [0..5], [6, 7]."""
    if inference_gpus + trainer_gpus > present:
        raise PlanError(
            "inference.gpus + trainer.gpus", inference_gpus + trainer_gpus,
            f"this machine has {present} GPU{'s' * (present != 1)}; lower inference.gpus ({inference_gpus}) "
            f"or trainer.gpus ({trainer_gpus})",
        )
    return list(range(inference_gpus)), list(range(inference_gpus, inference_gpus + trainer_gpus))


def split_cpus(ncpu: int) -> tuple[list[int], int]:
    """No GPU: vLLM's threads get the first half of the cores (at least one), the trainer the rest."""
    n_inf = max(1, ncpu // 2)
    return list(range(n_inf)), max(1, ncpu - n_inf)


def console_script(name: str) -> str:
    """The console script next to this Python, so panes work without an activated venv."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else name


def accelerate_config_file(name_or_path: str, workdir: Path) -> Path:
    if name_or_path in ACCELERATE_CONFIGS:
        return bundled("configs", "accelerate", f"{name_or_path}.yaml")
    path = (workdir / name_or_path).resolve()
    if not path.is_file():
        raise PlanError("trainer.accelerate_config", f'"{name_or_path}"',
                        f"no such file (from {workdir}); use one of {', '.join(ACCELERATE_CONFIGS)} or a path "
                        f"to an accelerate YAML")
    return path


def environment_problem(env_id: str) -> str | None:
    """Is `env.id` loadable the way vf-train will load it (entry point, else module)? Without importing it."""
    from importlib.metadata import entry_points
    from importlib.util import find_spec

    names = sorted(ep.name for ep in entry_points(group="vfrl.environments"))
    module = env_id.replace("-", "_").split("/")[-1]
    if env_id in names or env_id.replace("_", "-") in names or find_spec(module) is not None:
        return None
    return (f'env.id = "{env_id}" is invalid: no such environment is installed (installed: '
            f'{", ".join(names) or "none"}); install it with `vf-install {env_id}` or `pip install -e environments/{module}`')


def model_problem(model: str, workdir: Path) -> str | None:
    """Is `model` a local model directory that is missing? A hub id (`Qwen/Qwen2.5-0.5B-Instruct`) is left to vLLM.

    A path is local when it is written as one (`./`, `../`, `/`, `~`) or its first folder exists here.
    """
    path = Path(model).expanduser()
    path = path if path.is_absolute() else workdir / path
    if path.is_dir():
        if (path / "config.json").is_file():
            return None
        return f'model = "{model}" is invalid: {path} has no config.json; point it at a Hugging Face model folder'
    first = Path(model).parts[0] if Path(model).parts else ""
    local = model.startswith(("./", "../", "/", "~")) or (workdir / first).is_dir()
    if not local:
        return None
    hint = (f"; make the embedded tiny model with `vf-install reverse-text && python -m vfrl.make_tiny_model "
            f"--out {model}`" if Path(model).name == "tiny-reverse" else "")
    return f'model = "{model}" is invalid: no such folder (from {workdir}){hint}'


def make_plan(cfg: RLConfig, run_dir: Path, session: str, machine: Machine, workdir: Path | None = None) -> Plan:
    workdir = workdir or Path.cwd()
    run_dir = run_dir.resolve()
    cfg = cfg.model_copy(deep=True)
    config_file = run_dir / "config.toml"
    inf_env: dict[str, str] = {}
    tr_env: dict[str, str] = {}
    use_gpu = machine.gpus > 0 and cfg.inference.gpus > 0
    tp = dp = 1
    if use_gpu:
        inf_dev, tr_dev = split_gpus(cfg.inference.gpus, cfg.trainer.gpus, machine.gpus)
        inf_env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, inf_dev))
        tr_env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, tr_dev))
        tp = int(cfg.inference.args.get("tensor_parallel_size", 1))
        dp = len(inf_dev) // tp  # RLConfig checked that tp divides inference.gpus
        if dp > 1:
            cfg.inference.args["data_parallel_size"] = dp
    else:
        inf_dev, tr_dev = [], []
        cores, trainer_threads = split_cpus(machine.cpus)
        inf_env["CUDA_VISIBLE_DEVICES"] = ""
        inf_env["VLLM_CPU_OMP_THREADS_BIND"] = f"{cores[0]}-{cores[-1]}" if len(cores) > 1 else str(cores[0])
        tr_env["CUDA_VISIBLE_DEVICES"] = ""
        tr_env["OMP_NUM_THREADS"] = str(trainer_threads)
    inf_cmd = [console_script("vf-vllm"), "@", str(config_file), "--pid-file", str(run_dir / "inference.pid")]
    processes = len(tr_dev) or cfg.trainer.processes or 1  # trainer GPUs, else trainer.processes CPU processes
    if processes > 1 and tr_dev:
        # the vf-train console script is a Python file: accelerate runs it in each process
        tr_cmd = [console_script("accelerate"), "launch", "--config-file",
                  str(accelerate_config_file(cfg.trainer.accelerate_config, workdir)),
                  "--num-processes", str(processes), console_script("vf-train"), "@", str(config_file)]
    elif processes > 1:
        # CPU processes (trainer.processes): accelerate's torchrun launcher (its --cpu flag would need mpirun);
        # ACCELERATE_USE_CPU makes each process a CPU rank on gloo; port 0: a free rendezvous port
        tr_env["ACCELERATE_USE_CPU"] = "true"
        tr_env["OMP_NUM_THREADS"] = str(max(1, int(tr_env.get("OMP_NUM_THREADS", machine.cpus)) // processes))
        tr_cmd = [console_script("accelerate"), "launch", "--multi-gpu", "--num-processes", str(processes),
                  "--num-machines", "1", "--mixed-precision", "no", "--dynamo-backend", "no",
                  "--main-process-port", "0", console_script("vf-train"), "@", str(config_file)]
    else:
        tr_cmd = [console_script("vf-train"), "@", str(config_file)]
    logs = run_dir / "logs"
    return Plan(
        run_dir=run_dir, session=session, device="cuda" if use_gpu else "cpu",
        inference_devices=inf_dev, trainer_devices=tr_dev,
        inference=PanePlan("Inference", run_dir / "inference.sh", inf_env, inf_cmd, logs / "inference.log"),
        trainer=PanePlan("Trainer", run_dir / "trainer.sh", tr_env, tr_cmd, logs / "trainer.log"),
        metrics=PanePlan("Metrics", run_dir / "trainer.sh", {}, [console_script("vf-rl"), "watch", str(run_dir)]),
        config=cfg, tensor_parallel=tp, data_parallel=dp, trainer_processes=processes,
    )


def network_notice(host: str) -> str | None:
    """The line vf-rl prints when vLLM will listen beyond this machine (inference.host not loopback)."""
    import ipaddress

    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: only localhost is known to stay on this machine
        loopback = host == "localhost"
    if loopback:
        return None
    return (f'inference.host = "{host}": vLLM will be reachable from the network; the per-run API key '
            f"protects every endpoint but /health")


def pane_script(pane: PanePlan, run_dir: Path, workdir: Path, after: list[str] = ()) -> str:
    """A readable bash script: environment, the command teed to its log, what to do after.

    Ctrl-C in the pane reaches the whole pipeline: the command stops, `tee -i` keeps copying its last
    words to the log, and the INT trap lets the script go on to the lines after it (the trainer's
    epilogue stops the inference server).
    """
    lines = ["#!/usr/bin/env bash", f"# vf-rl {pane.title.lower()} pane", "set -o pipefail",
             "trap : INT TERM", f"cd {shlex.quote(str(workdir))}", source_line(run_dir),
             f"export {MARKER}={shlex.quote(str(run_dir))}  # vf-rl stop finds the run's processes by it"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in pane.env.items()]
    lines.append(f'export VFRL_API_KEY="$(cat {shlex.quote(str(run_dir / ".api_key"))})"')
    lines.append(f"{shlex.join(pane.command)} 2>&1 | tee -i -a {shlex.quote(str(pane.log))}; code=${{PIPESTATUS[0]}}")
    lines += list(after)
    lines.append("exit $code")
    return "\n".join(lines) + "\n"


def exit_code_file(run_dir: Path, role: str) -> Path:
    """Where the `role` pane ("trainer", "inference") records its command's exit code."""
    return run_dir / f"{role}.exitcode"


def record_exit_code(run_dir: Path, role: str) -> str:
    """The pane's command's exit code into exit_code_file, atomically: tmux may report a pane dead a
    moment before it knows the exit status, so `vf-rl status` reads this record first."""
    final = exit_code_file(run_dir, role)
    tmp, final = shlex.quote(f"{final}.tmp"), shlex.quote(str(final))
    return f"echo $code > {tmp} && mv {tmp} {final}"


def inference_epilogue(run_dir: Path) -> list[str]:
    return [record_exit_code(run_dir, "inference")]


def trainer_epilogue(run_dir: Path, grace_s: int = 30) -> list[str]:
    """After the trainer: record its exit code (atomically), then stop the inference server and wait for it.

    vLLM shuts its engine and workers down on SIGTERM; if it has not within `grace_s` (seen on a loaded
    machine), the server and every process under it get SIGKILL together: killing only the server left
    its VLLM::Worker orphaned (clean-clone CI), holding the inference pane open.
    """
    q = lambda p: shlex.quote(str(run_dir / p))  # noqa: E731
    return [
        record_exit_code(run_dir, "trainer"),
        f"rm -f {q('.api_key')} {q(environment_file(run_dir).name)}  # both panes read them at start",
        'tree() { echo "$1"; for c in $(pgrep -P "$1" 2>/dev/null); do tree "$c"; done; }',
        f"pid=$(cat {q('inference.pid')} 2>/dev/null)",
        'if [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; then',
        f'  for _ in $(seq {grace_s * 2}); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done',
        '  kill -0 "$pid" 2>/dev/null && kill -KILL $(tree "$pid") 2>/dev/null',
        "fi",
        'echo "vf-rl: trainer exited with code $code; inference server stopped."',
    ]


def render_plan(plan: Plan, workdir: Path, machine: Machine, socket_name: str | None) -> str:
    """What `--dry-run` prints: the machine, the split, the run directory, and each pane's exact script."""
    if plan.device == "cuda":
        devices = (f"inference GPUs {','.join(map(str, plan.inference_devices))} (vLLM: {plan.data_parallel} "
                   f"data-parallel x {plan.tensor_parallel} tensor-parallel); trainer GPUs "
                   f"{','.join(map(str, plan.trainer_devices)) or 'none'} ({plan.trainer_processes} process"
                   f"{'es' * (plan.trainer_processes > 1)})")
    else:
        devices = (f"no GPU in use: inference on cores {plan.inference.env['VLLM_CPU_OMP_THREADS_BIND']}, "
                   f"trainer with {plan.trainer.env['OMP_NUM_THREADS']} thread(s)"
                   + (f" x {plan.trainer_processes} processes" if plan.trainer_processes > 1 else ""))
    out = [
        f"machine:        {machine.gpus} GPU(s), {machine.cpus} CPU core(s)",
        f"devices:        {devices}",
        f"run directory:  {plan.run_dir}",
        f"tmux session:   {plan.session}" + (f" (socket -L {socket_name})" if socket_name else ""),
        f"vLLM endpoint:  http://{plan.config.inference.host}:{plan.config.inference.port}/v1"
        + (" (port 0: a free port is picked at launch)" if plan.config.inference.port == 0 else ""),
    ]
    for pane, after in ((plan.inference, inference_epilogue(plan.run_dir)), (plan.trainer, trainer_epilogue(plan.run_dir))):
        out += ["", f"--- pane {pane.title}: {pane.script} ---", pane_script(pane, plan.run_dir, workdir, after).rstrip()]
    out += ["", f"--- pane {plan.metrics.title} (under the trainer): {shlex.join(plan.metrics.command)}"]
    return "\n".join(out)
