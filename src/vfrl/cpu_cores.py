"""No GPU: vLLM and the trainer each keep to their own cores.

The launch plan splits the cores (plan.split_cpus): vLLM's worker threads are bound to the first half by
vLLM itself (VLLM_CPU_OMP_THREADS_BIND), but its API server and the rest of its engine core (which runs the
worker: inference/server.py) are not; the trainer's threads float over every core. So each side pins its
whole process tree: vf-vllm to the cores in VLLM_CPU_OMP_THREADS_BIND, vf-train to those in
VFRL_TRAINER_CORES (the rest). Cores this process may not use are left out; none left: no pinning.
"""

from __future__ import annotations

import os

TRAINER_CORES_ENV = "VFRL_TRAINER_CORES"


def parse(spec: str) -> set[int]:
    """"0-3,6" -> {0, 1, 2, 3, 6}."""
    cores: set[int] = set()
    for part in filter(None, (p.strip() for p in spec.split(","))):
        first, _, last = part.partition("-")
        cores.update(range(int(first), int(last or first) + 1))
    return cores


def pin(spec: str | None) -> set[int] | None:
    """This process (and what it starts later) onto the cores of `spec`; the cores used, or None."""
    if not spec or not hasattr(os, "sched_setaffinity"):
        return None
    try:
        cores = parse(spec) & os.sched_getaffinity(0)
    except ValueError:  # not a core list (vLLM also takes "auto" or "nobind"): leave it to vLLM
        return None
    if not cores:
        return None
    os.sched_setaffinity(0, cores)
    return cores
