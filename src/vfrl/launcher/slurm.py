"""`vf-rl @ cfg.toml --slurm`: the run as one Slurm batch job, the same pane scripts without tmux.

    one node (inference.gpus + trainer.gpus fit on slurm.gpus_per_node, or the CPU)
      node 0   bash inference.sh &  ;  bash trainer.sh      the split of a vf-rl run on one machine
    two nodes (they do not fit: 2 x 8 GPUs for 8 + 8)
      node 0   srun -w node0 bash inference.sh &            vLLM on all of node 0, listening on the network
      node 1   srun -w node1 bash trainer.sh                the trainer, VFRL_INFERENCE_URL = http://node0:port/v1
    1 + N nodes (trainer.nodes = N > 1)
      node 0       srun -w node0 bash inference.sh &        vLLM, as above
      nodes 1..N   srun --nodes=N --relative=1 bash trainer.sh   one task per node: node rank = SLURM_PROCID,
                                                            rendezvous at node 1 (VFRL_TRAINER_MAIN_ADDRESS)
    inference.base_url (a server vf-rl did not start): the trainer's node(s) alone

The job's id goes to <run_dir>/slurm.jobid; `vf-rl status/stop/logs RUN_DIR` read it (squeue, scancel).
The logs are the panes' own (<run_dir>/logs/) plus Slurm's output of the batch script (logs/slurm-<id>.out).
Pure functions of the config and the plan but for submit / job_state / cancel, which call Slurm.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from vfrl.config import RLConfig
from vfrl.launcher import procs
from vfrl.launcher.machine import Machine
from vfrl.launcher.plan import JOB_MAIN_ADDRESS_ENV, Plan, PlanError, network_notice
from vfrl.run_dir import RunDir
from vfrl.stop_signals import SLURM_STOP

INFERENCE_URL_ENV = "VFRL_INFERENCE_URL"  # vf-train's --base-url: a server on another node of the job
JOB_ID_FILE = "slurm.jobid"


@dataclass
class Layout:
    nodes: int
    gpus_per_node: int
    inference_node: bool  # vLLM has a node of its own (node 0); else it shares node 0 with the trainer, or is remote
    trainer_nodes: int = 1  # the trainer's nodes (trainer.nodes), after vLLM's


def layout(cfg: RLConfig, here: Machine) -> Layout:
    """Which node runs what; PlanError for a config the job cannot hold (checked before anything is written).
    slurm.gpus_per_node left out: as many as this machine has (none on a login node: a CPU job, with a note)."""
    s, inf, tr = cfg.slurm, cfg.inference, cfg.trainer
    remote = inf.base_url is not None
    need = tr.gpus + (0 if remote else inf.gpus)
    per_node = here.gpus if s.gpus_per_node is None else s.gpus_per_node
    if tr.nodes == 1 and (per_node == 0 or remote or need <= per_node):
        return Layout(nodes=1, gpus_per_node=per_node, inference_node=False)
    for key, gpus in (("inference.gpus", 0 if remote else inf.gpus), ("trainer.gpus", tr.gpus)):
        if per_node and gpus > per_node:
            raise PlanError(key, gpus, f"more than slurm.gpus_per_node = {per_node}: vLLM and each trainer node get "
                            f"one node of the job at most; lower {key} or raise slurm.gpus_per_node")
    if not remote and inf.share_gpus == "always":
        why = (f"trainer.nodes = {tr.nodes}: vLLM gets a node of its own" if tr.nodes > 1 else
               f"inference.gpus + trainer.gpus = {need} do not fit on one node of slurm.gpus_per_node = {per_node}")
        raise PlanError("inference.share_gpus", '"always"', f"{why}; raise gpus_per_node or lower the GPU counts, or "
                        f"set inference.share_gpus = \"auto\"")
    return Layout(nodes=tr.nodes + (not remote), gpus_per_node=per_node, inference_node=not remote,
                  trainer_nodes=tr.nodes)


def node_machine(cfg: RLConfig, lay: Layout, here: Machine) -> Machine:
    """The node the plan is made for: the job's GPUs (0..n-1 inside the job, as Slurm's device binding shows
    them), the cores of slurm.cpus_per_node or of this machine; both panes' GPUs when they get a node each."""
    gpus = cfg.inference.gpus + cfg.trainer.gpus if lay.inference_node else lay.gpus_per_node
    cpus = cfg.slurm.cpus_per_node or here.cpus
    memory = here.gpu_memory_mib if here.gpus else None
    return Machine(gpus=gpus, cpus=cpus, gpu_memory_mib=memory)


def notes(cfg: RLConfig, lay: Layout) -> list[str]:
    if lay.gpus_per_node == 0 and cfg.slurm.gpus_per_node is None and cfg.trainer.gpus + cfg.inference.gpus:
        return ["slurm.gpus_per_node is left out and this machine has no GPU: the job asks for none and runs on "
                "the CPU; set slurm.gpus_per_node to the GPUs of the cluster's nodes"]
    return []


def place(plan: Plan, lay: Layout) -> None:
    """With vLLM on a node of its own: it listens on the network, and the trainer's GPUs are its node's first."""
    if not lay.inference_node:
        return
    plan.config.inference.host = "0.0.0.0"
    plan.inference_elsewhere = "node 0 of the job"
    plan.notes.append(network_notice("0.0.0.0"))
    if plan.trainer.env.get("CUDA_VISIBLE_DEVICES"):
        plan.trainer.env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(plan.config.trainer.gpus))
        plan.trainer_devices = plan.trainer.env["CUDA_VISIBLE_DEVICES"].split(",")


def sbatch_script(plan: Plan, lay: Layout, workdir: Path) -> str:
    """The batch script: #SBATCH lines from [slurm], then the panes' scripts (written into the run directory)."""
    cfg, s = plan.config, plan.config.slurm
    paths = RunDir(plan.run_dir)
    q = lambda p: shlex.quote(str(p))  # noqa: E731
    head = ["#!/usr/bin/env bash",
            f"#SBATCH --job-name={s.job_name or 'vfrl-' + cfg.args.run_name}",
            f"#SBATCH --nodes={lay.nodes}",
            "#SBATCH --ntasks-per-node=1"]
    if lay.gpus_per_node:
        head.append(f"#SBATCH --gpus-per-node={lay.gpus_per_node}")
    if s.cpus_per_node:
        head.append(f"#SBATCH --cpus-per-task={s.cpus_per_node}")
    for option, value in (("partition", s.partition), ("account", s.account), ("time", s.time)):
        if value:
            head.append(f"#SBATCH --{option}={value}")
    head.append(f"#SBATCH --output={paths.logs}/slurm-%j.out")
    head += [f"#SBATCH {line}" for line in s.extra_sbatch]
    body = ["# vf-rl --slurm: the run's pane scripts (see them beside this file), no tmux; "
            "stop with `vf-rl stop RUN_DIR` (scancel)",
            "set -u",
            f"trap '' {SLURM_STOP}  # `vf-rl stop`'s signal is the trainer's alone: this script lives on to its end",
            f"cd {q(workdir)}",
            f'echo "$SLURM_JOB_ID" > {q(plan.run_dir / JOB_ID_FILE)}']
    trainer, inference = q(plan.trainer.script), plan.inference and q(plan.inference.script)
    if not lay.inference_node and lay.trainer_nodes == 1:
        if inference:
            body.append(f"bash {inference} &")
        body += [f"bash {trainer}", "code=$?", "wait  # the trainer's pane script stops the server", "exit $code"]
        return "\n".join(head + [""] + body) + "\n"
    body.append('nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))')
    first = 1 if lay.inference_node else 0  # the trainer's first node
    if lay.inference_node:
        body += [f'export {INFERENCE_URL_ENV}="http://${{nodes[0]}}:{cfg.inference.port}/v1"  # vf-train reads it as '
                 f'--base-url',
                 f'srun --nodes=1 --ntasks=1 -w "${{nodes[0]}}" bash {inference} &',
                 "inference=$!"]
    if lay.trainer_nodes > 1:
        n = lay.trainer_nodes
        body += [f'export {JOB_MAIN_ADDRESS_ENV}="${{nodes[{first}]}}"  '
                 "# trainer node rank 0: the others meet it there",
                 f"srun --nodes={n} --ntasks={n} --ntasks-per-node=1 --relative={first} bash {trainer}  "
                 f"# one task per node, SLURM_PROCID = its node rank"]
    else:
        body.append(f'srun --nodes=1 --ntasks=1 -w "${{nodes[{first}]}}" bash {trainer}')
    body.append("code=$?")
    if lay.inference_node:
        body.append('kill -TERM "$inference" 2>/dev/null  # srun hands it to vf-vllm on node 0')
    body += ["wait", "exit $code"]
    return "\n".join(head + [""] + body) + "\n"


def missing_tools() -> list[str]:
    return [tool for tool in ("sbatch", "squeue", "scancel") if shutil.which(tool) is None]


def submit(script: Path) -> str:
    """sbatch the script; the job id. RuntimeError with sbatch's own words when it refuses."""
    done = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError((done.stderr or done.stdout).strip().splitlines()[-1] if (done.stderr or done.stdout)
                           else f"sbatch exited with {done.returncode}")
    return done.stdout.strip().split(";")[0]  # "id" or "id;cluster"


def job_id(run_dir: Path) -> str | None:
    path = run_dir / JOB_ID_FILE
    return path.read_text().strip() or None if path.is_file() else None


def job_state(job: str) -> str | None:
    """PENDING, RUNNING, COMPLETING, ... while squeue knows the job; None once it has left the queue."""
    done = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=60)
    state = done.stdout.strip()
    return state or None


def cancel(job: str, signal: str | None = None) -> None:
    """scancel the job (SIGTERM to every process, SIGKILL after KillWait), or send `signal` to every process of
    it, the batch script's included (--full)."""
    cmd = ["scancel", job] if signal is None else ["scancel", f"--signal={signal}", "--full", job]
    subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True)


def status_line(run_dir: Path) -> str:
    """`vf-rl status RUN_DIR` for a Slurm run: the job's state, each pane script's exit code, the last step."""
    from vfrl.launcher.lifecycle import last_metrics

    job = job_id(run_dir)
    state = job_state(job) or "ended" if job else "not submitted (no slurm.jobid)"
    paths = RunDir(run_dir)

    def pane(role: str) -> str:
        code = paths.exit_code(role)
        return f"exited {code.read_text().strip()}" if code.is_file() else ("running" if state == "RUNNING" else "-")

    m = last_metrics(run_dir)
    progress = f"step {m['step']}/{m['max_steps']}, reward {m['reward_mean']:.3f}" if m else "no step yet"
    return f"slurm job {job}: {state}, trainer {pane('trainer')}, inference {pane('inference')}, {progress} | {run_dir}"


def stop(run_dir: Path, trainer_grace: float = 60, timeout: float = 180, echo=print) -> str | None:
    """Stop the run's job as `vf-rl stop` stops a tmux run: SIGUSR2 to every process of the job, which all but
    vf-train ignore; vf-train stops as on Ctrl-C, then its pane script stops vLLM and the job ends. If it has
    not within `trainer_grace` (+ the epilogue's time), or vf-train is not listening yet (no trainer.pid), plain
    scancel: SIGTERM to every process at once (vf-train takes it as a stop too), SIGKILL after KillWait.
    Waits until the job has left the queue; the trainer's exit code, or None when it never recorded one."""
    from vfrl.launcher.lifecycle import poll

    run_dir = run_dir.resolve()  # as the pane scripts' VFRL_RUN_DIR names it
    job = job_id(run_dir)
    if job is None:
        raise RuntimeError(f"{run_dir} has no slurm.jobid: not a submitted vf-rl Slurm run")

    def ended(within: float) -> bool:
        # the job leaves the queue before its processes have finished stopping: wait for those seen from here
        # too (all of them on a one-node cluster; on a login node none, and Slurm has ended them with the job)
        return poll(lambda: job_state(job) is None and not procs.pane_processes([], run_dir), within, every=0.5)

    paths = RunDir(run_dir)
    if job_state(job) is None:
        echo(f"vf-rl: slurm job {job} has already ended")
    elif paths.trainer_pid.is_file() and not paths.exit_code("trainer").is_file():
        echo(f"vf-rl: stopping slurm job {job}: the trainer stops as on Ctrl-C (up to {trainer_grace:.0f}s for its "
             f"step), then its pane script stops vLLM")
        cancel(job, SLURM_STOP)
        if not ended(trainer_grace + 45):  # + the epilogue's 30 s for vLLM
            echo(f"vf-rl: slurm job {job} is still running; scancel (SIGTERM to every process)")
            cancel(job)
    else:
        echo(f"vf-rl: stopping slurm job {job} (scancel: SIGTERM to every process; the trainer stops as on Ctrl-C)")
        cancel(job)
    if not ended(timeout):
        raise RuntimeError(f"slurm job {job} or its processes are still there {timeout:.0f}s after scancel; "
                           f"see squeue")
    code = paths.exit_code("trainer")
    return code.read_text().strip() if code.is_file() else None
