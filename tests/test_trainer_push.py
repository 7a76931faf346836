"""Pipeline.push: the loop waits for the torch side (save, then save_aside) and vLLM's load runs beside the next
step, one load at a time (weight_sync.py, pipeline.py).

The real push, into a real vf-vllm, is test_full_ft_parity.py's (MergedLoraSync: `adapters/policy-N` written
every step) and every vf-rl end-to-end test's; here a sync whose load waits on an event shows the push return
while the load is still in flight, and what happens when either side fails.
"""

import asyncio
import threading
from pathlib import Path

import pytest

from vfrl.rollouts.pipeline import Pipeline
from vfrl.torch_thread import TorchThread


class Sync:
    """Records which thread did what; load blocks until `release` is set (up to 10 s)."""

    def __init__(self, load_error: Exception | None = None, aside_error: Exception | None = None):
        self.release = threading.Event()
        self.threads: dict[str, str] = {}
        self.order: list[str] = []
        self.staged: list[int] = []  # in the thread that loads, beside the torch side: not in `order`
        self.load_error, self.aside_error = load_error, aside_error

    def save(self, model, version):
        self.threads["save"] = threading.current_thread().name
        self.order.append(f"save {version}")
        return Path(f"weights/step-{version}")

    def save_aside(self, model, version):
        self.threads["aside"] = threading.current_thread().name
        self.order.append(f"aside {version}")
        if self.aside_error:
            raise self.aside_error

    def stage(self, path, version):
        self.threads["stage"] = threading.current_thread().name
        self.staged.append(version)

    def load(self, path, version):
        self.threads["load"] = threading.current_thread().name
        self.release.wait(10)
        self.order.append(f"load {version}")
        if self.load_error:
            raise self.load_error
        return f"policy-{version}"


def trainer_with(sync: Sync) -> Pipeline:
    return Pipeline(sync, TorchThread())


def run(trainer: Pipeline, coro):
    try:
        return asyncio.run(coro)
    finally:
        trainer.torch_thread.join()


def test_push_returns_once_written_and_the_load_runs_beside_the_next_step():
    sync = Sync()
    trainer = trainer_with(sync)

    async def scenario():
        loading, held = await trainer.push(object(), 3)
        assert not loading.done() and trainer.served is None  # vLLM has not loaded it yet: the loop goes on
        assert sync.order == ["save 3", "aside 3"]
        sync.release.set()
        name, load_s = await loading
        return name, held, load_s

    name, held, load_s = run(trainer, scenario())
    assert name == trainer.served == "policy-3" and held < 10 and load_s >= 0
    assert sync.threads["aside"] == sync.threads["save"] != sync.threads["load"]  # torch side in the torch thread


def test_the_next_push_waits_for_the_previous_load():
    sync = Sync()
    trainer = trainer_with(sync)

    async def scenario():
        await trainer.push(object(), 3)
        second = asyncio.ensure_future(trainer.push(object(), 4))
        await asyncio.sleep(0.2)
        assert not second.done() and sync.order == ["save 3", "aside 3"]  # nothing of version 4 before 3 is served
        sync.release.set()
        loading, _ = await second
        return await loading

    assert run(trainer, scenario())[0] == "policy-4"
    assert sync.order[:4] == ["save 3", "aside 3", "load 3", "save 4"]  # then aside 4 and load 4, side by side
    assert sorted(sync.order[4:]) == ["aside 4", "load 4"]


def test_a_failed_load_stops_the_run_at_the_next_push_and_at_what_samples_from_it():
    sync = Sync(load_error=RuntimeError("vLLM refused adapter policy-3"))
    sync.release.set()
    trainer = trainer_with(sync)

    async def scenario():
        loading, _ = await trainer.push(object(), 3)
        with pytest.raises(RuntimeError, match="vLLM refused"):
            await loading  # the next batch's generation, eval
        with pytest.raises(RuntimeError, match="vLLM refused"):
            await trainer.push(object(), 4)

    run(trainer, scenario())
    assert "save 4" not in sync.order


def test_a_failed_write_aside_fails_the_push():
    sync = Sync(aside_error=OSError("disk full"))
    sync.release.set()
    trainer = trainer_with(sync)
    with pytest.raises(OSError, match="disk full"):
        run(trainer, trainer.push(object(), 3))


def test_a_draining_sync_loads_after_the_batch_in_flight_but_saves_before_it_ends():
    """Full weights (and merged LoRA) reload in place under one name: the batch in flight must end on the policy it
    started on. The save does not touch vLLM, so it runs while that batch is still generating, and vLLM is asked
    to stage the policy then too (staged_weights.py); the swap waits for the batch."""
    sync = Sync()
    sync.release.set()
    trainer = trainer_with(sync)

    async def scenario():
        in_flight = asyncio.get_running_loop().create_future()
        loading, _ = await trainer.push(object(), 3, after=in_flight)
        await asyncio.sleep(0.2)
        assert sync.order == ["save 3", "aside 3"] and not loading.done()  # written, not loaded
        assert sync.staged == [3] and sync.threads["stage"] != sync.threads["save"]  # staged, off the torch thread
        in_flight.set_exception(RuntimeError("a generation error"))  # the loop reads it from the batch
        return await loading

    assert run(trainer, scenario())[0] == "policy-3" and sync.order[-1] == "load 3"
