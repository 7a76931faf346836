"""num_batches_ahead = k: RLTrainer._train keeps k batches in flight, each sampled by the newest policy served when
it starts, so a batch trains at most k policies after the one that sampled it (never k + 1), k = 0 generates then
trains, and a checkpoint keeps the batches older policies sampled so a resumed run trains on the very same ones.

The loop runs for real here (RLTrainer._train, its Pipeline interface, the torch thread); the learner, vLLM and
the environment are stand-ins: a pipeline whose batches take random times, so pushes land while batches are in
flight. The real stack with k = 2 is test_checkpoint_resume.py's.
"""

import asyncio
import random
from types import SimpleNamespace

import pytest

from vfrl.config import TrainerArgs
from vfrl.rollout_types import Batch
from vfrl.torch_thread import TorchThread
from vfrl.trainer.trainer import RLTrainer


class FakePipeline:
    """Pipeline's interface: a push is served after a random delay; a batch samples from the newest policy served
    when its generation starts (as the orchestrator's requests name the newest adapter), in a random time."""

    def __init__(self, torch_thread, seed: int):
        self.torch_thread, self.rng = torch_thread, random.Random(seed)
        self.loading, self.served, self.pushed, self.started = None, None, [], []

    async def push(self, model, version, after=None):
        self.pushed.append(version)

        async def load():
            if after is not None:
                await asyncio.wait([after])
            await asyncio.sleep(self.rng.random() * 0.01)
            self.served = version
            return f"policy-{version}", 0.0

        self.loading = asyncio.ensure_future(load())
        return self.loading, 0.0

    def generate(self, step, version):
        loading = self.loading

        async def sample():
            await loading  # vLLM serves policy `version` (or a newer one loads meanwhile: still `version` is asked)
            self.started.append((step, version))
            await asyncio.sleep(self.rng.random() * 0.02)
            return Batch(step=step, policy_version=version, rollouts=[], example_ids=[step])

        return asyncio.create_task(sample())

    async def generate_ahead(self, step, version, waited):
        return self.generate(step, version)

    def start_eval(self, version):
        raise AssertionError("eval is off")


def loop(k: int, max_steps: int, seed: int = 0, save_steps: int | None = None, pending=(), pipeline=None, lines=None):
    """Run RLTrainer._train with stand-ins; returns (trainer, pipeline, trained batches, checkpoints saved). The
    metrics lines written go to `lines` as (step, record)."""
    args = TrainerArgs(num_batches_ahead=k, max_steps=max_steps, batch_size=4, rollouts_per_example=2,
                       **({"save_strategy": "steps", "save_steps": save_steps} if save_steps else {}))
    trainer = RLTrainer.__new__(RLTrainer)
    trained, saved = [], []
    learner = SimpleNamespace(policy=object(), train_step=lambda b: trained.append(b) or {"loss": 0.0})
    trainer.cfg, trainer.args, trainer.learner = SimpleNamespace(args=args), args, learner
    trainer.ranks = SimpleNamespace(active=False)
    trainer.start_step = pending[0].step if pending else 0
    trainer.pending_batches, trainer.restart_note = list(pending), {}
    trainer.sync = SimpleNamespace(drain_before_push=False, name_of=lambda v: f"policy-{v}")
    trainer.run_log = SimpleNamespace(step=lambda step, record, batch: (lines if lines is not None else []).append(
        (step, record)), tracker=SimpleNamespace(finish=lambda: None))
    trainer.record = lambda step, batch, stats, model_name, times: {"step": step + 1, **stats,
                                                                  "adapter_loaded": model_name, **times}
    trainer.save = lambda step, batches: saved.append((step, [(b.step, b.policy_version) for b in batches])) or 0.0
    torch_thread = TorchThread()
    pipe = (pipeline or FakePipeline)(torch_thread, seed)
    try:
        asyncio.run(trainer._train(pipe, trainer.start_step, trainer.pending_batches))
    finally:
        torch_thread.join()
    return trainer, pipe, trained, saved


@pytest.mark.parametrize("k", [0, 1, 2, 4])
@pytest.mark.parametrize("seed", range(3))
def test_a_batch_trains_at_most_k_policies_after_the_one_that_sampled_it(k, seed):
    _, pipe, trained, _ = loop(k, max_steps=12, seed=seed)
    assert [b.step for b in trained] == list(range(12))
    staleness = [b.step - b.policy_version for b in trained]
    assert max(staleness) == k and min(staleness) >= 0  # bounded at k, and k is used once the loop is warm
    assert staleness[k:] == [k] * (12 - k)  # every batch after the first k: sampled k policies back
    assert pipe.pushed == list(range(13))  # policy 0, then one per step


def test_k_0_generates_each_batch_only_once_its_policy_is_pushed():
    _, pipe, trained, _ = loop(0, max_steps=5)
    assert [(b.step, b.policy_version) for b in trained] == [(s, s) for s in range(5)]
    assert pipe.started == [(s, s) for s in range(5)]


def test_a_checkpoint_keeps_the_batches_older_policies_sampled_and_a_resume_trains_on_them():
    """k = 3, a checkpoint before step 4: batch 4 and batches 5 and 6 (sampled by policies 2 and 3) are kept;
    batch 7 starts at step 4 from policy 4, as a resumed run also starts it."""
    _, _, trained, saved = loop(3, max_steps=8, save_steps=4)
    assert saved[0] == (4, [(4, 1), (5, 2), (6, 3)]) and saved[-1] == (8, [])
    kept = [b for b in trained if b.step in (4, 5, 6)]
    _, pipe, resumed, _ = loop(3, max_steps=8, pending=kept)
    assert [(b.step, b.policy_version) for b in resumed] == [(4, 1), (5, 2), (6, 3), (7, 4)]
    assert [(b.step, b.policy_version) for b in trained[4:]] == [(b.step, b.policy_version) for b in resumed]
    assert pipe.started == [(7, 4)]  # only what the checkpoint could not hold is sampled again


def test_a_resumed_run_with_a_smaller_k_regenerates_what_is_too_stale_for_it():
    """A checkpoint of a k = 2 run resumed with k = 1: batch 4 (policy 3) trains; batch 5 (policy 3, 2 back at
    step 5) is sampled again, from policy 4."""
    from pathlib import Path

    trainer = RLTrainer.__new__(RLTrainer)
    trainer.args = TrainerArgs(num_batches_ahead=1)
    kept = [Batch(step=4, policy_version=3, rollouts=[], example_ids=[4]),
            Batch(step=5, policy_version=3, rollouts=[], example_ids=[5])]
    trainer.learner = SimpleNamespace(load=lambda path: (SimpleNamespace(step=4, seed=0, examples_per_step=2,
                                                                       dataset_size=8), list(kept)))
    trainer.ranks = SimpleNamespace(is_main=False)
    assert trainer.resume(Path("ckpt")) == (4, [])  # ranks > 0 keep none
    trainer.ranks = SimpleNamespace(is_main=True)
    trainer.env = SimpleNamespace(dataset=[0] * 8)
    trainer.training_state = lambda step: SimpleNamespace(seed=0, examples_per_step=2, dataset_size=8)
    trainer.paths = SimpleNamespace(metrics=Path("/nonexistent/metrics.jsonl"))
    trainer.console = SimpleNamespace(info=lambda line: None, warn=lambda line: None)
    step, pending = trainer.resume(Path("ckpt"))
    assert step == 4 and [b.step for b in pending] == [4]


class PushFailsAtPolicy2(FakePipeline):
    async def push(self, model, version, after=None):
        if version == 2:
            raise ConnectionError("the vLLM server is gone")
        return await super().push(model, version, after)


def test_a_step_trained_before_its_push_failed_gets_its_metrics_line():
    """The loop writes a step's line after pushing the policy it trained; when that push is what failed, the
    step is in the emergency checkpoint and its line is written too (no sync time, no adapter loaded)."""
    lines = []
    with pytest.raises(ConnectionError):
        loop(1, max_steps=4, pipeline=PushFailsAtPolicy2, lines=lines)
    assert [step for step, _ in lines] == [1, 2]
    (_, pushed), (_, failed) = lines
    assert pushed["adapter_loaded"] == "policy-1" and "sync_s" in pushed
    assert failed["step"] == 2 and failed["loss"] == 0.0 and failed["adapter_loaded"] is None
    assert "sync_s" not in failed and failed["train_end"] >= failed["train_start"]


@pytest.mark.parametrize("cancel", ["the loop", "every task"])
def test_a_step_in_flight_when_the_loop_is_cancelled_ends_and_gets_its_line(cancel):
    """The server lost mid-step cancels the loop; a Ctrl-C or a hang-up closes the event loop, which cancels every
    task (asyncio.Runner.close): the step in the torch thread still ends (the emergency checkpoint holds it), and
    its line is written before the cancellation goes on."""
    import threading

    args = TrainerArgs(num_batches_ahead=1, max_steps=4, batch_size=4, rollouts_per_example=2)
    trainer, lines, in_step, release = RLTrainer.__new__(RLTrainer), [], threading.Event(), threading.Event()

    def train_step(batch):
        in_step.set()
        release.wait(10)
        return {"loss": 1.0}

    trainer.cfg, trainer.args = SimpleNamespace(args=args), args
    trainer.learner = SimpleNamespace(policy=object(), train_step=train_step)
    trainer.ranks, trainer.start_step, trainer.restart_note = SimpleNamespace(active=False), 0, {}
    trainer.sync = SimpleNamespace(drain_before_push=False, name_of=lambda v: f"policy-{v}")
    trainer.run_log = SimpleNamespace(step=lambda step, record, batch: lines.append((step, record)))
    trainer.record = lambda step, batch, stats, model_name, times: {**stats, "adapter_loaded": model_name, **times}
    torch_thread = TorchThread()

    async def cancel_mid_step():
        task = asyncio.create_task(trainer._train(FakePipeline(torch_thread, 0), 0, []))
        await asyncio.get_running_loop().run_in_executor(None, in_step.wait, 10)
        for other in [task] if cancel == "the loop" else asyncio.all_tasks() - {asyncio.current_task()}:
            other.cancel()
        await asyncio.sleep(0.05)
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(cancel_mid_step())
    finally:
        torch_thread.join()
    [(step, record)] = lines
    assert step == 1 and record["loss"] == 1.0 and record["adapter_loaded"] is None and "train_end" in record
