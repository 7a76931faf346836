"""No GPU: vLLM and the trainer each keep to their own cores, but for vLLM's API server.

The launch plan splits the cores (plan.split_cpus): vLLM's worker threads are bound to the first half by
vLLM itself (VLLM_CPU_OMP_THREADS_BIND), but its API server and the rest of its engine core (which runs the
worker: inference/server.py) are not; the trainer's threads float over every core. So each side pins its
whole process tree: vf-vllm to the cores in VLLM_CPU_OMP_THREADS_BIND, vf-train to those in
VFRL_TRAINER_CORES (the rest). Cores this process may not use are left out; none left: no pinning.

Once vLLM serves, its API server (HTTP, request and reply handling, detokenizing) is let out onto every core
vf-vllm was given (`free_api_server`); its engine core and workers, started by then, stay on vLLM's cores. On
2 cores the engine core and the API server would otherwise share one core while the trainer's idles part of
the step (docs/benchmarks.md, "The levers that hold"). The engine core stays pinned: it busy-waits on its
queues, and let out it would take the trainer's core.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.request
from typing import Callable

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


def free_api_server(server_pid: int, cores: set[int], health_url: Callable[[], str | None],
                    poll_s: float = 0.5) -> threading.Thread:
    """In a daemon thread: once `health_url()` answers (vLLM serves: its engine cores have started, pinned, and
    the API server starts no more processes; None: it has not listened yet), let every thread of process
    `server_pid`, the API server, run on `cores`. Threads it starts later inherit that from the thread that starts
    them. Gives up quietly when the server ends first."""

    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through an http_proxy

    def free() -> None:
        while os.path.exists(f"/proc/{server_pid}"):
            try:
                if (url := health_url()) is None:
                    raise OSError("not listening yet")
                with direct.open(url, timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            time.sleep(poll_s)
        else:
            return
        freed: set[str] = set()
        while True:  # again until no thread is new: one started meanwhile by a thread not yet let out
            try:
                tasks = set(os.listdir(f"/proc/{server_pid}/task")) - freed
            except OSError:  # the server ended meanwhile
                return
            if not tasks:
                return
            for task in tasks:
                try:
                    os.sched_setaffinity(int(task), cores)
                except OSError:  # a thread that ended meanwhile
                    pass
            freed |= tasks

    thread = threading.Thread(target=free, name="free-api-server", daemon=True)
    thread.start()
    return thread
