"""The launch plan as text: each pane's bash script (its command, then its epilogue) and what `--dry-run` prints."""

from __future__ import annotations

import shlex
from pathlib import Path

from vfrl.launcher.machine import Machine
from vfrl.launcher.memory import CUDA_CONTEXT, gib
from vfrl.launcher.pane_env import source_line
from vfrl.launcher.plan import PanePlan, Plan, ShellWord
from vfrl.launcher.procs import MARKER
from vfrl.run_dir import RunDir
from vfrl.stop_signals import SLURM_STOP


def shell_join(words: list[str]) -> str:
    return " ".join(w if isinstance(w, ShellWord) else shlex.quote(w) for w in words)


def pane_script(pane: PanePlan, run_dir: Path, workdir: Path, after: list[str] = ()) -> str:
    """A readable bash script: environment, the command teed to its log, what to do after.

    Ctrl-C in the pane reaches the whole pipeline: the command stops, `tee -i` keeps copying its last
    words to the log, and the INT trap lets the script go on to the lines after it (the trainer's
    epilogue stops the inference server). SIGUSR2 is ignored by all but vf-train, which takes it as its
    Ctrl-C: `vf-rl stop` of a Slurm job sends it to every process of the job.
    """
    lines = ["#!/usr/bin/env bash", f"# vf-rl {pane.title.lower()} pane", "set -o pipefail",
             "trap : INT TERM",
             f"trap '' {SLURM_STOP}  # `vf-rl stop` of a Slurm job: the trainer's signal alone "
             "(stop_signals.py)",
             f"cd {shlex.quote(str(workdir))}", source_line(run_dir),
             f"export {MARKER}={shlex.quote(str(run_dir))}  # vf-rl stop finds the run's processes by it"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in pane.env.items()]
    lines.append(f'export VFRL_API_KEY="$(cat {shlex.quote(str(RunDir(run_dir).api_key))})"')
    # tee ignores SIGTERM too: a Slurm job's scancel sends it to every process, and the log must keep the
    # command's last words (a SIGTERM stops vf-train like Ctrl-C)
    lines.append(f"{shell_join(pane.command)} 2>&1 | (trap '' TERM; exec tee -i -a {shlex.quote(str(pane.log))}); "
                 f"code=${{PIPESTATUS[0]}}")
    lines += list(after)
    lines.append("exit $code")
    return "\n".join(lines) + "\n"


def record_exit_code(run_dir: Path, role: str) -> str:
    """The pane's command's exit code into RunDir.exit_code, atomically: tmux may report a pane dead a
    moment before it knows the exit status, so `vf-rl status` reads this record first."""
    final = RunDir(run_dir).exit_code(role)
    tmp, final = shlex.quote(f"{final}.tmp"), shlex.quote(str(final))
    return f"echo $code > {tmp} && mv {tmp} {final}"


def inference_epilogue(run_dir: Path) -> list[str]:
    return [record_exit_code(run_dir, "inference")]


def trainer_epilogue(run_dir: Path, grace_s: int = 30, remote: str | None = None, elsewhere: str | None = None,
                     node_rank: str | None = None, shared: Path | None = None) -> list[str]:
    """After the trainer: record its exit code (atomically), then stop vf-rl's inference server and wait for it.

    vLLM shuts its engine and workers down on SIGTERM; if it has not within `grace_s` (seen on a loaded
    machine), the server and every process under it get SIGKILL together: killing only the server left
    its VLLM::Worker orphaned (clean-clone CI), holding the inference pane open.
    A `remote` server (inference.base_url) is not vf-rl's: it is left running. A server `elsewhere` (another
    node of a Slurm job) is stopped by whoever started it there: its pid means nothing on this node.
    With `node_rank` (a Slurm job step's trainer nodes), the other node ranks just leave: node rank 0 records.
    A server `shared` with the other runs of a sweep (its run directory) stops itself once every run's trainer is
    gone (vf-vllm --trainer-pid).
    """
    paths = RunDir(run_dir)
    q = lambda p: shlex.quote(str(p))  # noqa: E731
    others = ([f'[ {node_rank} = 0 ] || exit $code  # trainer node ranks > 0: node rank 0 records the end']
              if node_rank else [])
    done = others + [
        record_exit_code(run_dir, "trainer"),
        f"rm -f {q(paths.api_key)} {q(paths.environment)}  # both panes read them at start",
    ]
    if remote:
        return done + [f"printf 'vf-rl: trainer exited with code %s; the inference server at %s was not started by "
                       f"vf-rl and is left running.\\n' \"$code\" {q(remote)}"]
    if shared:
        return done + [f"printf 'vf-rl: trainer exited with code %s; the inference server of the sweep (%s) goes on "
                       f"for its other runs and stops after the last.\\n' \"$code\" {q(shared)}"]
    if elsewhere:
        return done + [f"printf 'vf-rl: trainer exited with code %s; the inference server (%s) is stopped by the "
                       f"job script.\\n' \"$code\" {q(elsewhere)}"]
    return done + [
        'tree() { echo "$1"; for c in $(pgrep -P "$1" 2>/dev/null); do tree "$c"; done; }',
        f"pid=$(cat {q(paths.inference_pid)} 2>/dev/null)",
        'if [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; then',
        f'  for _ in $(seq {grace_s * 2}); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done',
        '  kill -0 "$pid" 2>/dev/null && kill -KILL $(tree "$pid") 2>/dev/null',
        "fi",
        'echo "vf-rl: trainer exited with code $code; inference server stopped."',
    ]


def pane_scripts(plan: Plan, workdir: Path) -> list[tuple[PanePlan, str]]:
    """Each pane vf-rl starts (inference first; none for a remote server) with its script, epilogue included."""
    after_trainer = trainer_epilogue(plan.run_dir, remote=plan.config.inference.base_url,
                                     elsewhere=plan.inference_elsewhere, node_rank=plan.job_node_rank,
                                     shared=plan.server_dir)
    panes = [(plan.trainer, after_trainer)]
    if plan.inference is not None:
        panes.insert(0, (plan.inference, inference_epilogue(plan.run_dir)))
    return [(pane, pane_script(pane, plan.run_dir, workdir, after)) for pane, after in panes]


def render_plan(plan: Plan, workdir: Path, machine: Machine, socket_name: str | None, job: str | None = None,
                scripts: bool = True) -> str:
    """What `--dry-run` prints: the machine, the split, the run directory, and (`scripts`) each pane's exact script."""
    inference = plan.config.inference
    if plan.inference is None:
        devices = ((f"trainer GPUs {','.join(plan.trainer_devices)}" if plan.device == "cuda" else
                    f"no GPU in use: trainer with {plan.trainer.env['OMP_NUM_THREADS']} thread(s)")
                   + (f" x {plan.trainer_processes} processes" if plan.trainer_processes > 1 else "")
                   + "; inference is remote")
    elif plan.device == "cuda":
        devices = (f"inference GPUs {','.join(plan.inference_devices)} (vLLM: {plan.data_parallel} "
                   f"data-parallel x {plan.tensor_parallel} tensor-parallel); trainer GPUs "
                   f"{','.join(plan.trainer_devices) or 'none'} ({plan.trainer_processes} process"
                   f"{'es' * (plan.trainer_processes > 1)})")
        if plan.shared_devices:
            devices += f"; shared by both: {','.join(plan.shared_devices)}"
        if plan.inference_elsewhere:
            devices += f"; vLLM on {plan.inference_elsewhere}, the trainer on " + (
                "nodes of its own" if plan.config.trainer.nodes > 1 else "a node of its own")
    else:
        devices = (f"no GPU in use: inference on cores {plan.inference.env['VLLM_CPU_OMP_THREADS_BIND']}, "
                   f"trainer with {plan.trainer.env['OMP_NUM_THREADS']} thread(s)"
                   + (" on every core, vLLM's too (trainer.share_cpus)" if plan.config.trainer.share_cpus else "")
                   + (f" x {plan.trainer_processes} processes" if plan.trainer_processes > 1 else ""))
    if (nodes := plan.config.trainer.nodes) > 1:
        devices += (f"; {nodes} trainer nodes, each this plan's trainer, a task of one srun step" if plan.job_node_rank
                    else f"; this machine is trainer node rank 0 of {nodes}")
    gpus = f"{machine.gpus} GPU(s)"
    if machine.gpu_ids and machine.gpu_ids != tuple(str(i) for i in range(machine.gpus)):
        gpus += f" (CUDA_VISIBLE_DEVICES={','.join(machine.gpu_ids)})"
    if machine.gpu_memory_mib:
        gpus += f" of {machine.gpu_memory_mib / 1024:.1f} GiB"
    out = [f"{'each node' if job else 'machine'}:{' ' * (6 if job else 8)}{gpus}, {machine.cpus} CPU core(s)",
           f"devices:        {devices}"]
    if m := plan.memory:
        chosen = ("inference.args.gpu_memory_utilization" if not m.derived else
                  "derived" if m.gpu_bytes else "vf-rl's choice when it cannot check")
        if m.gpu_bytes is None:
            out.append(f"memory:         vLLM --gpu-memory-utilization {m.utilization} ({chosen}); not checked")
        else:
            left = m.gpu_bytes * (1 - m.utilization) - 2 * CUDA_CONTEXT
            out += [f"memory:         vLLM --gpu-memory-utilization {m.utilization} ({chosen}): "
                    f"{gib(m.gpu_bytes * m.utilization)} of each shared {gib(m.gpu_bytes)} GiB GPU",
                    f"                vLLM needs {gib(m.vllm.total)} GiB: {m.vllm.describe()}",
                    f"                the trainer gets the rest less 2 CUDA contexts, {gib(left)} GiB; estimated "
                    f"peak {gib(m.trainer.total)} GiB: {m.trainer.describe()}"]
    out += [f"note:           {note}" for note in plan.notes]
    out += [
        f"run directory:  {plan.run_dir}",
        f"slurm job:      {job}" if job else
        f"tmux session:   {plan.session}" + (f" (socket -L {socket_name})" if socket_name else ""),
        f"vLLM endpoint:  {inference.base_url} (inference.base_url: a server vf-rl neither starts nor stops; API "
        f"key from ${inference.api_key_var}; checked before the trainer starts)" if inference.base_url else
        f"vLLM endpoint:  http://{inference.host}:{inference.port}/v1"
        + (f" (port 0: a free port vLLM binds itself, written to {RunDir(plan.run_dir).inference_port} once it"
           " listens)" if inference.port == 0 and not job else
           " (port 0: a free port is picked at launch)" if inference.port == 0 else ""),
    ]
    if scripts:
        for pane, script in pane_scripts(plan, workdir):
            out += ["", f"--- pane {pane.title}: {pane.script} ---", script.rstrip()]
        out += ["", f"--- pane {plan.metrics.title} (under the trainer): {shlex.join(plan.metrics.command)}"]
    return "\n".join(out)
