"""CPU seconds a vf-rl run's two process trees spend, sampled while it runs: vLLM's (vf-vllm with vLLM's API
server, engine core and workers, from inference.pid) and the trainer's (vf-train, from trainer.pid).
Used by quickstart_ab.py, side_by_side.py and verifiers_v1_overhead.py.

    with RunCpu(run_dir) as cpu:
        ...  # the run
    cpu.at(t)  # (vLLM's, the trainer's) CPU seconds by process name at the sample nearest before time t

CPU time counts busy-waiting: vLLM's engine core and API server spin on their queues for a while after each
message, so vLLM's figure is the core it holds, not only the work it does.
"""
from __future__ import annotations

import bisect
import contextlib
import threading
import time
from pathlib import Path

import psutil  # a vLLM dependency

PERIOD_S = 0.25


def cpu_by_name(processes) -> dict[str, float]:
    """CPU seconds (user + system) of `processes` so far, by process name (one that has ended counts 0)."""
    by_name: dict[str, float] = {}
    for p in processes:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            by_name[p.name()] = by_name.get(p.name(), 0.0) + t.user + t.system
    return by_name


def tree_cpu(pid_file: Path) -> dict[str, float]:
    """CPU seconds (user + system) of the process tree rooted at pid_file's process, by process name."""
    try:
        root = psutil.Process(int(pid_file.read_text()))
        return cpu_by_name([root, *root.children(recursive=True)])
    except (OSError, ValueError, psutil.Error):
        return {}


class RunCpu:
    """Samples the run directory's two trees every PERIOD_S seconds in a thread, from when both pid files exist."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.samples: list[tuple[float, dict[str, float], dict[str, float]]] = []  # (time, vLLM's, trainer's)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> RunCpu:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._done.set()
        self._thread.join()

    def _sample(self) -> None:
        inference, trainer = self.run_dir / "inference.pid", self.run_dir / "trainer.pid"
        while not self._done.wait(PERIOD_S):
            if inference.exists() and trainer.exists():
                self.samples.append((time.time(), tree_cpu(inference), tree_cpu(trainer)))

    def at(self, t: float) -> tuple[dict[str, float], dict[str, float]]:
        """The last sample taken at or before time t (the first one if none is)."""
        times = [s[0] for s in self.samples]
        _, vllm, trainer = self.samples[max(bisect.bisect_right(times, t) - 1, 0)]
        return vllm, trainer


def spent(first: dict[str, float], last: dict[str, float]) -> dict[str, float]:
    """CPU seconds by process name between two samples of one tree."""
    return {name: last[name] - first.get(name, 0.0) for name in last}
