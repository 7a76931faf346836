"""This machine as the launch plan sees it, found out without torch: its GPUs (CUDA_VISIBLE_DEVICES and
nvidia-smi), its cores, and a Slurm job's hosts (scontrol)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Machine:
    gpus: int
    cpus: int
    gpu_ids: tuple[str, ...] = ()  # as CUDA_VISIBLE_DEVICES names them ("2", "GPU-8f3c..."); () means 0..gpus-1
    gpu_memory_mib: int | None = None  # the smallest total memory among them; None: unknown

    @property
    def ids(self) -> tuple[str, ...]:
        return self.gpu_ids or tuple(str(i) for i in range(self.gpus))


def nvidia_smi(*args: str) -> str:
    """nvidia-smi's output; empty when it is missing or fails (no GPU, no driver). No torch: the launcher stays
    light."""
    if not shutil.which("nvidia-smi"):
        return ""
    try:
        return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def visible_gpu_ids(visible: str | None, smi_list: str) -> tuple[str, ...]:
    """The GPUs this process may use, named as CUDA_VISIBLE_DEVICES names them, so that the panes'
    CUDA_VISIBLE_DEVICES pick the same physical GPUs; without it, nvidia-smi -L's 0..n-1. CUDA ignores
    everything from the first invalid entry on (so "-1" hides every GPU)."""
    if visible is None:
        return tuple(str(i) for i in range(sum(1 for line in smi_list.splitlines() if line.startswith("GPU "))))
    ids = []
    for entry in (e.strip() for e in visible.split(",")):
        if not entry or entry.startswith("-"):
            break
        ids.append(entry)
    return tuple(ids)


def gpu_memory_mib(ids: Sequence[str], smi_query: str) -> int | None:
    """The smallest total memory (MiB) among `ids`, from `nvidia-smi --query-gpu=index,uuid,memory.total
    --format=csv,noheader,nounits`; None when one is not listed (a MIG slice) or nvidia-smi said nothing."""
    rows = [[c.strip() for c in line.split(",")] for line in smi_query.splitlines() if line.count(",") == 2]
    sizes: list[str] = []
    for gid in ids:
        if gid.isdigit():
            # nvidia-smi numbers GPUs in PCI order, CUDA (by default) fastest first: on a machine of mixed
            # models an index may name another GPU, so an index counts as the smallest of them all
            found = [r[2] for r in rows] if int(gid) < len(rows) else []
        else:  # a UUID (or its prefix), as CUDA_VISIBLE_DEVICES accepts
            found = [r[2] for r in rows if r[1].startswith(gid)]
        if not found or not all(x.isdigit() for x in found):
            return None
        sizes += found
    return min(map(int, sizes)) if sizes else None


def detect_machine() -> Machine:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = visible_gpu_ids(visible, nvidia_smi("-L") if visible is None else "")
    memory = gpu_memory_mib(ids, nvidia_smi("--query-gpu=index,uuid,memory.total", "--format=csv,noheader,nounits"))
    return Machine(gpus=len(ids), cpus=len(os.sched_getaffinity(0)), gpu_ids=ids, gpu_memory_mib=memory)



def slurm_hosts(nodelist: str) -> list[str]:
    """A Slurm node list expanded by `scontrol show hostnames` (node[01-04] -> node01 .. node04); [] when it fails."""
    try:
        shown = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return shown.stdout.split() if shown.returncode == 0 else []
