"""The launch plan: which devices each pane gets, and the command and environment each pane runs.

Functions of (config, run dir, machine) that start nothing: unit-testable without GPUs, tmux or vLLM. They read
the model's config.json (memory.py) and, for trainer.nodes > 1 in a Slurm job, its hosts (machine.py); what the
machine has is found out in machine.py, the scripts and the dry run are written in render.py.

    8 GPUs, inference.gpus = 6, trainer.gpus = 2, tensor_parallel_size = 2
      Inference  CUDA_VISIBLE_DEVICES=0,1,2,3,4,5   vLLM: 3 data-parallel replicas x 2-way tensor parallel
      Trainer    CUDA_VISIBLE_DEVICES=6,7           accelerate launch --num-processes 2 --config-file ddp.yaml
    1 GPU, inference.gpus = 1, trainer.gpus = 1 (inference.share_gpus = "auto")
      Inference  CUDA_VISIBLE_DEVICES=0             vLLM --gpu-memory-utilization 0.33 (derived: Qwen2.5-0.5B, 80 GB)
      Trainer    CUDA_VISIBLE_DEVICES=0             the rest of the GPU
    no GPU: vLLM's threads bound to the first half of the cores, the trainer gets the rest
    trainer.nodes = 2: this machine runs vLLM and trainer node rank 0; the user starts node rank 1 elsewhere with
      the command vf-rl prints (accelerate launch --num-machines 2 --machine-rank 1 --main-process-ip ...)
    inference.base_url (a server vf-rl did not start): no inference pane; the trainer gets every core, or
      the first trainer.gpus GPUs

GPUs are named as the user's CUDA_VISIBLE_DEVICES names them: started with CUDA_VISIBLE_DEVICES=2,3,
vLLM gets "2" and the trainer "3".
"""

from __future__ import annotations

import math
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from vfrl.bundle import bundled
from vfrl.config import ACCELERATE_CONFIGS, SHARED_UTILIZATION_UNKNOWN_SIZE, RLConfig
from vfrl.cpu_cores import TRAINER_CORES_ENV
from vfrl.gpu_share import TRAINER_LOADS_AFTER_VLLM_ENV
from vfrl.launcher.memory import (
    CUDA_CONTEXT, SHARDED_CONFIGS, Need, find_model_config, gib, model_shape, trainer_need, vllm_need,
)
from vfrl.launcher.machine import Machine, slurm_hosts
from vfrl.run_dir import RunDir


class PlanError(Exception):
    """A config that is valid on paper but cannot run on this machine: (dotted key, value, what is allowed)."""

    def __init__(self, key: str, value, allowed: str):
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"{key} = {value} is invalid: {allowed}")


@dataclass
class PanePlan:
    title: str
    script: Path
    env: dict[str, str] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)
    log: Path | None = None


@dataclass
class SharedMemory:
    """How GPUs that vLLM and the trainer share are split: vLLM takes `utilization` of each."""

    gpu_bytes: float | None  # None: not checked (unknown model size or GPU memory)
    utilization: float
    derived: bool  # vf-rl chose `utilization` (written into the resolved inference.args)
    vllm: Need | None = None
    trainer: Need | None = None


@dataclass
class Plan:
    run_dir: Path
    session: str
    device: str  # "cuda" or "cpu"
    inference_devices: list[str]
    trainer_devices: list[str]
    inference: PanePlan | None  # None: the server is remote (inference.base_url), vf-rl starts none
    trainer: PanePlan
    metrics: PanePlan  # `vf-rl watch RUN_DIR` under the trainer: one line per step
    config: RLConfig  # the resolved config the panes read (vf-rl writes it to run_dir/config.toml)
    tensor_parallel: int = 1
    data_parallel: int = 1
    trainer_processes: int = 1
    memory: SharedMemory | None = None  # set when vLLM and the trainer share GPUs
    notes: list[str] = field(default_factory=list)  # one line each: what vf-rl decided for the user, or could not check
    # vLLM on another node than the trainer (a Slurm job's node 0, launcher/slurm.py): where, in words; its
    # pid means nothing on the trainer's node, so the trainer's epilogue leaves it to the job script
    inference_elsewhere: str | None = None
    # trainer nodes started by a Slurm job step (launcher/slurm.py): each node's rank and the main address come
    # from the job at run time, so the trainer's pane script reads them from the shell; only node rank 0 records
    # the run's end
    job_node_rank: str | None = None
    # a run of a sweep (launcher/sweep.py): the run directory of the vf-vllm it shares with the other runs; it has
    # no inference pane, and its trainer's epilogue leaves that server to them
    server_dir: Path | None = None

    @property
    def shared_devices(self) -> list[str]:
        if self.inference_elsewhere:
            return []
        return [d for d in self.inference_devices if d in self.trainer_devices]


def split_gpus(inference_gpus: int, trainer_gpus: int, ids: Sequence[str],
               share: str = "auto") -> tuple[list[str], list[str]]:
    """Separate GPUs, inference first: 6 + 2 of 8 -> 0..5, 6..7. Shared (inference.share_gpus "always", or
    "auto" when there are too few for both): both panes from the first ones, 1 + 1 of 1 -> [0], [0]."""
    i, t, present = inference_gpus, trainer_gpus, len(ids)
    have = f"this machine has {present} GPU{'s' * (present != 1)}"
    if i + t <= present and share != "always":
        return list(ids[:i]), list(ids[i : i + t])
    if share == "never":
        raise PlanError("inference.gpus + trainer.gpus", i + t,
                        f'{have}; lower inference.gpus ({i}) or trainer.gpus ({t}), or let vLLM and the trainer '
                        f'share GPUs (inference.share_gpus = "auto")')
    if max(i, t) > present:
        raise PlanError("inference.gpus + trainer.gpus", i + t,
                        f"{have}; lower inference.gpus ({i}) or trainer.gpus ({t})")
    return list(ids[:i]), list(ids[:t])


def _ceil2(x: float) -> float:
    return math.ceil(round(x * 100, 6)) / 100


def _floor2(x: float) -> float:
    return math.floor(round(x * 100, 6)) / 100


def split_memory(cfg: RLConfig, gpu_mib: int | None, workdir: Path, processes: int) -> tuple[SharedMemory, list[str]]:
    """vLLM's share of GPUs it shares with the trainer: inference.args.gpu_memory_utilization if the config
    says, else each side gets its estimated need and half of what is left. Refuses a split that cannot hold
    what is certain (weights, gradients, optimizer states); notes what may not fit or was not checked."""
    given = cfg.inference.args.get("gpu_memory_utilization")
    config_json = find_model_config(cfg.model, workdir)
    shape = model_shape(config_json) if config_json else None
    if shape is None or gpu_mib is None:
        util = given if given is not None else SHARED_UTILIZATION_UNKNOWN_SIZE
        why = ("the GPU's total memory is unknown (nvidia-smi did not list it)" if shape is not None else
               f'the size of model "{cfg.model}" cannot be read offline (no config.json in a local folder or '
               f"the Hugging Face cache)")
        return (SharedMemory(None, util, given is None),
                [f"memory not checked: {why}; vLLM takes {util} of each shared GPU"])
    total = gpu_mib * 2**20
    vllm = vllm_need(shape, cfg.inference.args, reloads_weights=not cfg.serves_adapters)
    trainer = trainer_need(shape, cfg, processes)
    room = total - 2 * CUDA_CONTEXT  # both processes' CUDA contexts sit outside vLLM's budget
    least, most = _ceil2(vllm.total / total), _floor2((room - trainer.static_total) / total)
    if given is None:
        spare = room - vllm.total - trainer.total
        util = max(least, _floor2((vllm.total + spare / 2) / total))
    else:
        util = float(given)
    key = "inference.args.gpu_memory_utilization"
    gpu = f"the {gib(total)} GiB GPU it shares with the trainer"
    if least > most:
        what = "full fine-tuning" if not cfg.args.use_lora else "LoRA training"
        allowed = (f"{what} of {cfg.model} ({shape.params / 1e9:.2f}B parameters) needs {gib(trainer.static_total)} "
                   f"GiB before activations ({trainer.describe(only_static=True)}) and vLLM {gib(vllm.total)} GiB "
                   f"({vllm.describe()}); with two CUDA contexts ({gib(2 * CUDA_CONTEXT)} GiB) that is more than one "
                   f"{gib(total)} GiB GPU holds; ")
        if not cfg.args.use_lora:
            raise PlanError("trainer.args.use_lora", "false", allowed + "use LoRA (trainer.args.use_lora = true) or "
                            "give the trainer GPUs of its own")
        raise PlanError("model", f'"{cfg.model}"', allowed + "use a smaller model or give the trainer GPUs of its own")
    if util < least:
        raise PlanError(key, util, f"must be at least {least} on {gpu}: vLLM needs {gib(vllm.total)} GiB "
                                   f"({vllm.describe()})")
    if util > most:
        raise PlanError(key, util, f"must be at most {most} on {gpu}: the trainer needs {gib(trainer.static_total)} "
                                   f"GiB before activations ({trainer.describe(only_static=True)}), plus "
                                   f"{gib(2 * CUDA_CONTEXT)} GiB for two CUDA contexts")
    notes = []
    left = room - util * total
    if left < trainer.total:
        notes.append(f"the trainer may run out of GPU memory: its estimated peak, {gib(trainer.total)} GiB, is more "
                     f"than the {gib(left)} GiB vLLM leaves it; set trainer.args.gradient_checkpointing = true or a "
                     f"smaller trainer.args.micro_batch_size"
                     + (f", or a smaller {key} (at least {least})" if given is not None and util > least else ""))
    return SharedMemory(total, util, given is None, vllm, trainer), notes


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


class ShellWord(str):
    """A word of a pane's command the script leaves to the shell (`"$SLURM_PROCID"`): known only where it runs."""


# trainer.nodes > 1 under --slurm: one srun task per trainer node (slurm.py), which learns its node rank from
# Slurm and the address of node rank 0 from the job script
JOB_NODE_RANK = ShellWord('"$SLURM_PROCID"')
JOB_MAIN_ADDRESS_ENV = "VFRL_TRAINER_MAIN_ADDRESS"


def make_plan(cfg: RLConfig, run_dir: Path, session: str, machine: Machine, workdir: Path | None = None,
              environ: Mapping[str, str] | None = None, nodes_from_job: bool = False) -> Plan:
    """`environ`: where a Slurm job's node list is read from (default: this process's environment).
    `nodes_from_job`: the trainer's nodes are a Slurm job step's tasks (--slurm with trainer.nodes > 1)."""
    workdir = workdir or Path.cwd()
    run_dir = run_dir.resolve()
    paths = RunDir(run_dir)
    cfg = cfg.model_copy(deep=True)
    config_file = paths.config
    inf_env: dict[str, str] = {}
    tr_env: dict[str, str] = {}
    remote = cfg.inference.base_url is not None
    use_gpu = machine.gpus > 0 and (cfg.trainer.gpus if remote else cfg.inference.gpus) > 0
    tp = dp = 1
    memory, notes = None, []
    if remote:
        notes += remote_notes(cfg)
    if remote and use_gpu:
        if cfg.trainer.gpus > machine.gpus:
            raise PlanError("trainer.gpus", cfg.trainer.gpus, f"this machine has {machine.gpus} GPU"
                            f"{'s' * (machine.gpus != 1)}, all of them the trainer's (inference.base_url)")
        inf_dev, tr_dev = [], list(machine.ids[:cfg.trainer.gpus])
        tr_env["CUDA_VISIBLE_DEVICES"] = ",".join(tr_dev)
    elif use_gpu:
        if cfg.serves_adapters and str(cfg.inference.args.get("dtype", "auto")) in ("float32", "float"):
            # vLLM's Triton LoRA kernels assert float16/bfloat16: the engine dies in its first profile run (H200)
            raise PlanError("inference.args.dtype", f'"{cfg.inference.args["dtype"]}"',
                            "vLLM serves runtime LoRA adapters on a GPU in float16 or bfloat16 only; use "
                            '"bfloat16", or trainer.args.lora_sync = "merged" (the adapter merged into the weights, '
                            "any dtype)")
        inf_dev, tr_dev = split_gpus(cfg.inference.gpus, cfg.trainer.gpus, machine.ids, cfg.inference.share_gpus)
        inf_env["CUDA_VISIBLE_DEVICES"] = ",".join(inf_dev)
        tr_env["CUDA_VISIBLE_DEVICES"] = ",".join(tr_dev)
        tp = int(cfg.inference.args.get("tensor_parallel_size", 1))
        dp = len(inf_dev) // tp  # RLConfig checked that tp divides inference.gpus
        if dp > 1:
            cfg.inference.args["data_parallel_size"] = dp
        shared = [d for d in inf_dev if d in tr_dev]
        if shared:
            if cfg.inference.share_gpus == "auto":
                notes.append(f"this machine has {machine.gpus} GPU{'s' * (machine.gpus != 1)}, fewer than "
                             f"inference.gpus + trainer.gpus = {cfg.inference.gpus + cfg.trainer.gpus}: vLLM and the "
                             f"trainer share GPU {','.join(shared)} (inference.share_gpus = \"never\" refuses instead)")
            tr_env[TRAINER_LOADS_AFTER_VLLM_ENV] = "1"
            # zero3/fsdp shard over every trainer process, on every node
            memory, memory_notes = split_memory(cfg, machine.gpu_memory_mib, workdir, len(tr_dev) * cfg.trainer.nodes)
            notes += memory_notes
            cfg.inference.args["gpu_memory_utilization"] = memory.utilization  # what vf-vllm passes to vLLM
    else:
        inf_dev, tr_dev = [], []
        cores, trainer_threads = split_cpus(machine.cpus)
        inf_env["CUDA_VISIBLE_DEVICES"] = ""
        inf_env["VLLM_CPU_OMP_THREADS_BIND"] = f"{cores[0]}-{cores[-1]}" if len(cores) > 1 else str(cores[0])
        tr_env["CUDA_VISIBLE_DEVICES"] = ""
        tr_env["OMP_NUM_THREADS"] = str(machine.cpus if remote else trainer_threads)
        if not remote and cfg.trainer.share_cpus:  # every core, unpinned; idle threads must not spin on vLLM's
            tr_env["OMP_NUM_THREADS"] = str(machine.cpus)
            tr_env["OMP_WAIT_POLICY"] = "PASSIVE"
        elif not remote and machine.cpus > 1:  # the cores vLLM does not use (cpu_cores.py)
            rest = range(len(cores), machine.cpus)
            tr_env[TRAINER_CORES_ENV] = f"{rest[0]}-{rest[-1]}" if len(rest) > 1 else str(rest[0])
        if not remote and cfg.serves_adapters and "lora_sync" not in cfg.args.model_fields_set:
            notes.append(CPU_ADAPTER_NOTE)
    if cfg.trainer.args.use_liger_kernel and not tr_dev:
        raise PlanError("trainer.args.use_liger_kernel", "true", "Liger's kernels run on a GPU, and this trainer runs "
                        "on the CPU (" + ("trainer.gpus = 0" if machine.gpus else "this machine has no GPU")
                        + "); remove it")
    inf_cmd = [console_script("vf-vllm"), "@", str(config_file), "--pid-file", str(paths.inference_pid)]
    processes = len(tr_dev) or cfg.trainer.processes or 1  # trainer GPUs, else trainer.processes CPU processes
    from_job = nodes_from_job and cfg.trainer.nodes > 1
    if cfg.trainer.nodes > 1 and cfg.trainer.main_address is None and not from_job:
        cfg.trainer.main_address = main_address(os.environ if environ is None else environ)
    if from_job:
        address = (ShellWord(f'"${JOB_MAIN_ADDRESS_ENV}"') if cfg.trainer.main_address is None
                   else cfg.trainer.main_address)
        tr_cmd = trainer_command(cfg, processes, bool(tr_dev), tr_env, machine, workdir, config_file,
                                 node_rank=JOB_NODE_RANK, address=address)
    else:
        tr_cmd = trainer_command(cfg, processes, bool(tr_dev), tr_env, machine, workdir, config_file)
        notes += node_notes(cfg, processes, bool(tr_dev), machine, workdir, config_file)
    return Plan(
        run_dir=run_dir, session=session, device="cuda" if use_gpu else "cpu",
        inference_devices=inf_dev, trainer_devices=tr_dev,
        inference=None if remote else
        PanePlan("Inference", paths.pane_script("inference"), inf_env, inf_cmd, paths.log("inference")),
        trainer=PanePlan("Trainer", paths.pane_script("trainer"), tr_env, tr_cmd, paths.log("trainer")),
        metrics=PanePlan("Metrics", paths.pane_script("trainer"), {}, [console_script("vf-rl"), "watch", str(run_dir)]),
        config=cfg, tensor_parallel=tp, data_parallel=dp, trainer_processes=processes, memory=memory, notes=notes,
        job_node_rank=JOB_NODE_RANK if from_job else None,
    )


def trainer_command(cfg: RLConfig, processes: int, on_gpus: bool, tr_env: dict[str, str], machine: Machine,
                    workdir: Path, config_file: Path, node_rank: int | ShellWord = 0,
                    address: str | None = None) -> list[str]:
    """vf-train alone, or under accelerate launch for several processes (GPUs, or CPU ranks: sets their env).

    `processes`: on each node; with trainer.nodes > 1 this is the command of node `node_rank` (0: vf-rl's own),
    meeting the others at `address` (default trainer.main_address)."""
    total = processes * cfg.trainer.nodes
    if total > 1 and on_gpus and cfg.trainer.accelerate_config in SHARDED_CONFIGS:
        # docs/gpu.md, section 1: every step rank 0 alone writes the policy vLLM loads, from its own copy of the
        # weights; sharded, that copy is partitioned (ZeRO-3) or DTensor shards (FSDP2): an empty adapter or a hang
        raise PlanError("trainer.accelerate_config", f'"{cfg.trainer.accelerate_config}"',
                        f"shards the weights over the {total} trainer processes, and vf-train cannot push sharded "
                        f"weights to vLLM yet; use \"ddp\" (every process holds the whole model)")
    if total > 1 and on_gpus:
        # the vf-train console script is a Python file: accelerate runs it in each process
        return [console_script("accelerate"), "launch", "--config-file",
                str(accelerate_config_file(cfg.trainer.accelerate_config, workdir)), "--num-processes", str(total),
                *(rendezvous_flags(cfg, node_rank, address) if cfg.trainer.nodes > 1 else []),
                console_script("vf-train"), "@", str(config_file)]
    if total > 1:
        # CPU processes (trainer.processes): accelerate's torchrun launcher (its --cpu flag would need mpirun);
        # ACCELERATE_USE_CPU makes each process a CPU rank on gloo
        tr_env["ACCELERATE_USE_CPU"] = "true"
        tr_env["OMP_NUM_THREADS"] = str(max(1, int(tr_env.get("OMP_NUM_THREADS", machine.cpus)) // processes))
        return [console_script("accelerate"), "launch", "--multi-gpu", "--num-processes", str(total),
                "--mixed-precision", "no", "--dynamo-backend", "no", *rendezvous_flags(cfg, node_rank, address),
                console_script("vf-train"), "@", str(config_file)]
    return [console_script("vf-train"), "@", str(config_file)]


def rendezvous_flags(cfg: RLConfig, node_rank: int | ShellWord, address: str | None = None) -> list[str]:
    """accelerate launch's flags that gather the trainer processes. One node: a free port (runs side by side).
    Several: node `node_rank` meets the others at trainer.main_address:main_port; accelerate turns these into
    torchrun's --nnodes, --node-rank and rendezvous endpoint, with --num-processes (all nodes together) divided
    by the nodes. Global rank 0, the one that talks to vLLM, is node 0's first process."""
    t = cfg.trainer
    if t.nodes == 1:
        return ["--num-machines", "1", "--main-process-port", "0"]
    address = address or t.main_address
    if address is None:
        raise ValueError("trainer.main_address is not resolved yet (make_plan sets it with main_address())")
    if isinstance(node_rank, int) and not 0 <= node_rank < t.nodes:
        raise ValueError(f"node rank {node_rank} is not one of trainer.nodes = {t.nodes} (0..{t.nodes - 1})")
    rank = node_rank if isinstance(node_rank, ShellWord) else str(node_rank)
    return ["--num-machines", str(t.nodes), "--machine-rank", rank, "--main-process-ip", address,
            "--main-process-port", str(t.main_port)]


def main_address(environ: Mapping[str, str]) -> str:
    """Where the trainer nodes meet when trainer.main_address is left out: the Slurm job's first host
    (`scontrol show hostnames` expands a node list such as node[01-04]), else 127.0.0.1 (nodes on this machine)."""
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not nodelist:
        return "127.0.0.1"
    if hosts := slurm_hosts(nodelist):
        return hosts[0]
    if not any(c in nodelist for c in "[,"):  # one plain host name needs no expanding
        return nodelist
    raise PlanError("trainer.main_address", "(left out)",
                    f"the Slurm job's first host cannot be read: `scontrol show hostnames {nodelist}` failed; set "
                    f"trainer.main_address to node rank 0's address")


def node_notes(cfg: RLConfig, processes: int, on_gpus: bool, machine: Machine, workdir: Path,
               config_file: Path) -> list[str]:
    """trainer.nodes > 1: vf-rl starts node rank 0 here; one line per other node rank with the command to run there."""
    t = cfg.trainer
    if t.nodes == 1:
        return []
    notes = [f"trainer.nodes = {t.nodes}: vf-rl starts trainer node rank 0 here ({processes} process"
             f"{'es' * (processes > 1)}, global rank 0 talks to vLLM); start each other node rank on its own machine "
             f"with the line below, the run directory and {workdir} at the same paths there (shared storage); the "
             f"nodes meet at {t.main_address}:{t.main_port}"]
    if loopback(t.main_address):
        notes.append(f"trainer.main_address = {t.main_address} (no Slurm job): only trainer nodes on this machine can "
                     f"join; set trainer.main_address to this machine's address for others")
    for rank in range(1, t.nodes):
        # another machine: the trainer takes every core there, or its first trainer.gpus GPUs
        env = {} if on_gpus else {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": str(machine.cpus)}
        cmd = trainer_command(cfg, processes, on_gpus, env, machine, workdir, config_file, node_rank=rank)
        line = shlex.join(["env", *(f"{k}={v}" for k, v in env.items()), *cmd]) if env else shlex.join(cmd)
        notes.append(f"trainer node rank {rank}: cd {shlex.quote(str(workdir))} && {line}")
    return notes


# [inference] keys that describe the server vf-rl starts; with inference.base_url it starts none
SERVER_KEYS = ("gpus", "share_gpus", "host", "port", "args")


# vLLM on the CPU with LoRA served as an adapter, lora_sync left at its default (docs/benchmarks.md, lever 7)
CPU_ADAPTER_NOTE = ('vLLM\'s CPU build runs a LoRA adapter with unfused ops: trainer.args.lora_sync = "merged" serves '
                    "it merged into the weights (held twice then) and generated ~2x faster on 2 cores "
                    "(docs/benchmarks.md, lever 7); setting lora_sync ends this note")


def remote_notes(cfg: RLConfig) -> list[str]:
    """What vf-rl tells the user about a remote server's run: the [inference] keys of theirs it does not use."""
    unused = [f"inference.{key}" for key in SERVER_KEYS if key in cfg.inference.model_fields_set]
    if not unused:
        return []
    listed = " and ".join(filter(None, [", ".join(unused[:-1]), unused[-1]]))
    return [f"inference.base_url: vf-rl starts no vLLM server, so {listed} (for a server it starts) "
            f"{'is' if len(unused) == 1 else 'are'} not used"]


def loopback(host: str) -> bool:
    """Is `host` this machine only? A host name other than localhost is taken to reach beyond it."""
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def network_notice(host: str) -> str | None:
    """The line vf-rl prints when vLLM will listen beyond this machine (inference.host not loopback)."""
    if loopback(host):
        return None
    return (f'inference.host = "{host}": vLLM will be reachable from the network; the per-run API key '
            f"protects every endpoint but /health")


