"""The pipeline: policies out to vLLM, batches back, one step ahead of the learner.

    push(policy v)      save it in the torch thread (the loop waits), then vLLM loads it beside the next step
    generate(step, v)   the batch for `step`, sampled once vLLM serves policy v (the load in flight)
    start_eval(v)       eval of policy v in the background, on the same load

It runs in rank 0's event loop and talks to vLLM only: over HTTP through the orchestrator (orchestrator.py:
examples, rollouts, scores) and the weight sync (weight_sync.py: files and reload routes). What trains is
the learner's (learner.py); the loop that joins the two is trainer.py's.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from vfrl.rollouts.orchestrator import Orchestrator
from vfrl.rollout_types import Batch
from vfrl.rollouts.sent_requests import SentRequests
from vfrl.torch_thread import TorchThread
from vfrl.rollouts.weight_sync import WeightSync
from vfrl.daemon_pool import DaemonPool

# Calls that wait on the vLLM server (HTTP only): in threads the loop can stop waiting for once the run is
# stopping, so a hung server never holds up a Ctrl-C (the torch thread, torch_thread.py, is joined at exit).
SERVER_CALLS = DaemonPool("vllm-call", size=2)


class Pipeline:
    def __init__(self, sync: WeightSync, torch_thread: TorchThread, orchestrator: Orchestrator | None = None,
                 sent: SentRequests | None = None):
        self.sync, self.torch_thread, self.orchestrator = sync, torch_thread, orchestrator
        self.sent = sent or SentRequests()
        self.loading: asyncio.Future | None = None  # vLLM's load of the newest policy pushed
        self.served: str | None = None  # the newest policy vLLM serves (GRPOTrainer.evaluate samples from it)
        self.tasks: set[asyncio.Task] = set()  # the batches and evals in flight

    def abandon(self) -> None:
        """Stop every batch and eval in flight and the load (the server they talk to is gone)."""
        for task in [*self.tasks, *([self.loading] if self.loading is not None else [])]:
            task.cancel()

    def _track(self, task: asyncio.Task) -> asyncio.Task:
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def push(self, model, version: int, after: asyncio.Future | None = None) -> tuple[asyncio.Future, float]:
        """Make vLLM serve policy `version`. Returns its load, in flight (its result: the model name to request
        and the load's seconds), and the seconds the loop was held. The loop waits for the torch side only: the
        save (what vLLM reads) and save_aside (what it does not), in the torch thread, before the next step
        changes the weights; a thread left inside torch at interpreter exit aborts the process. vLLM's load
        (HTTP) then runs beside the next training step, in a thread the loop can abandon to a hung server,
        once `after` (the batch in flight, for a sync that drains) is done; what samples from the new policy
        (the next batch, eval) awaits it. One load at a time, in version order: the previous one ran beside
        the step just trained, and its error stops the run here."""
        t0 = time.perf_counter()
        if self.loading is not None:
            await self.loading
        path = await self.torch_thread.run(self.sync.save, model, version)
        self.loading = loading = asyncio.ensure_future(self._load(path, version, after))
        # its error reaches whatever awaits it (the next batch, eval, the next push); when nothing will, because
        # the run already stopped on another error (the write's below, a lost server), it is read and dropped
        # here, not left to be reported at interpreter exit
        loading.add_done_callback(lambda f: f.cancelled() or f.exception())
        await self.torch_thread.run(self.sync.save_aside, model, version)
        return loading, time.perf_counter() - t0

    async def _load(self, path: Path, version: int, after: asyncio.Future | None) -> tuple[str, float]:
        # vLLM loads what it can of the policy while the batch in flight is still sampled (staged_weights.py)
        await SERVER_CALLS.run(lambda: self.sync.stage(path, version))
        if after is not None:
            await asyncio.wait([after])  # its errors are the loop's to read, when it awaits the batch
        t0 = time.perf_counter()
        name = await SERVER_CALLS.run(lambda: self.sync.load(path, version))
        self.served = name
        return name, time.perf_counter() - t0

    def generate(self, step: int, version: int) -> asyncio.Task:
        """Batch `step`, sampled from policy `version` once vLLM serves it (the newest push)."""
        return self._track(asyncio.create_task(self._generate(self.loading, step, version)))

    async def _generate(self, loading: asyncio.Future, step: int, version: int) -> Batch:
        name, load_s = await loading
        batch = await self.orchestrator.generate(step, name, version)
        batch.load_s = load_s
        return batch

    async def generate_ahead(self, step: int, version: int, waited: float) -> asyncio.Task:
        """Batch `step` while the learner trains on the one before. When generation bounded the step just begun
        (the loop `waited` for its batch), the next batch's requests go out before training starts, for up to
        that long (sent_requests.py): a group's first request (n samples), or more."""
        requests_out = self.sent.reach(self.orchestrator.examples_per_step)
        batch = self.generate(step, version)
        await self.sent.wait(requests_out, batch, limit=waited)
        return batch

    def start_eval(self, version: int) -> tuple[int, asyncio.Task]:
        """Eval of policy `version` (the newest push), in the background: stats and rollouts (evaluation.py)."""
        async def evaluate(loading):
            name, _ = await loading
            return await self.orchestrator.evaluate(name)
        return version, self._track(asyncio.create_task(evaluate(self.loading)))
