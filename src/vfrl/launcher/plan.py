"""The launch plan: which devices each pane gets and the exact script each pane runs.

Pure functions of (config, run dir, machine): unit-testable without GPUs, tmux or vLLM.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from vfrl.config import RLConfig


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


def split_gpus(inference_gpus: int, trainer_gpus: int, present: int) -> tuple[list[int], list[int]]:
    """Contiguous split, inference first: 6 + 2 of 8 -> [0..5], [6, 7]."""
    if inference_gpus + trainer_gpus > present:
        raise ValueError(
            f"inference.gpus ({inference_gpus}) + trainer.gpus ({trainer_gpus}) = "
            f"{inference_gpus + trainer_gpus} GPUs requested, {present} present"
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


def make_plan(cfg: RLConfig, run_dir: Path, session: str, gpus_present: int, ncpu: int) -> Plan:
    run_dir = run_dir.resolve()
    config_file = run_dir / "config.toml"
    inf_env: dict[str, str] = {}
    tr_env: dict[str, str] = {}
    use_gpu = gpus_present > 0 and cfg.inference.gpus > 0
    if use_gpu:
        inf_dev, tr_dev = split_gpus(cfg.inference.gpus, cfg.trainer.gpus, gpus_present)
        inf_env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, inf_dev))
        tr_env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, tr_dev))
    else:
        inf_dev, tr_dev = [], []
        cores, trainer_threads = split_cpus(ncpu)
        inf_env["CUDA_VISIBLE_DEVICES"] = ""
        inf_env["VLLM_CPU_OMP_THREADS_BIND"] = f"{cores[0]}-{cores[-1]}" if len(cores) > 1 else str(cores[0])
        tr_env["CUDA_VISIBLE_DEVICES"] = ""
        tr_env["OMP_NUM_THREADS"] = str(trainer_threads)
    inf_cmd = [console_script("vf-vllm"), "@", str(config_file), "--pid-file", str(run_dir / "inference.pid")]
    if len(tr_dev) > 1:
        tr_cmd = [console_script("accelerate"), "launch", "--num-processes", str(len(tr_dev)),
                  "--module", "vfrl.trainer.cli", "@", str(config_file)]
    else:
        tr_cmd = [console_script("vf-train"), "@", str(config_file)]
    logs = run_dir / "logs"
    return Plan(
        run_dir=run_dir, session=session, device="cuda" if use_gpu else "cpu",
        inference_devices=inf_dev, trainer_devices=tr_dev,
        inference=PanePlan("Inference", run_dir / "inference.sh", inf_env, inf_cmd, logs / "inference.log"),
        trainer=PanePlan("Trainer", run_dir / "trainer.sh", tr_env, tr_cmd, logs / "trainer.log"),
    )


def pane_script(pane: PanePlan, run_dir: Path, workdir: Path, after: list[str] = ()) -> str:
    """A readable bash script: environment, the command teed to its log, what to do after."""
    lines = ["#!/usr/bin/env bash", f"# vf-rl {pane.title.lower()} pane", "set -o pipefail",
             f"cd {shlex.quote(str(workdir))}"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in pane.env.items()]
    lines.append(f'export VFRL_API_KEY="$(cat {shlex.quote(str(run_dir / ".api_key"))})"')
    lines.append(f"{shlex.join(pane.command)} 2>&1 | tee -a {shlex.quote(str(pane.log))}")
    lines.append("code=${PIPESTATUS[0]}")
    lines += list(after)
    lines.append("exit $code")
    return "\n".join(lines) + "\n"


def trainer_epilogue(run_dir: Path) -> list[str]:
    """After the trainer: record its exit code (atomically), then stop the inference server."""
    q = lambda p: shlex.quote(str(run_dir / p))  # noqa: E731
    return [
        f"echo $code > {q('trainer.exitcode.tmp')} && mv {q('trainer.exitcode.tmp')} {q('trainer.exitcode')}",
        f"[ -f {q('inference.pid')} ] && kill -TERM \"$(cat {q('inference.pid')})\" 2>/dev/null",
        f"rm -f {q('.api_key')}",
        'echo "vf-rl: trainer exited with code $code; inference server stopped."',
    ]
