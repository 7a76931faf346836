"""The orchestrator: picks examples, runs environment rollouts against vLLM, returns scored batches.

Runs on the trainer's rank 0 inside the trainer's event loop, so generation of batch n+1 goes on
while batch n trains in a worker thread.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time

from vfrl.envs.environment import Environment
from vfrl.rollout_types import Batch, Rollout
from vfrl.envs.faults import RolloutFaults
from vfrl.sections import GenerationSection
from vfrl.rollouts.evaluation import evaluate, held_out_size
from vfrl.rollouts.step_faults import BatchTimedOut, check_step


class NoTrainingRows(ValueError):
    """The environment gives no rows to train on; the message is one line."""

    worded_for_users = True


class Orchestrator:
    def __init__(self, env: Environment, client, gen: GenerationSection):
        self.env = env
        self.client = client
        self.gen = gen
        self.examples_per_step = gen.batch_size // gen.rollouts_per_example
        self.semaphore = asyncio.Semaphore(gen.max_concurrent)
        self._order: list[int] = []
        self._rng = random.Random(gen.seed)
        # the rows run_group samples (Environment.rows: the dataset, else the eval split), less the eval slice
        self.num_train = len(env.rows()) - held_out_size(env, gen.evaluation)
        if self.num_train <= 0:  # example_ids would never fill a step
            raise NoTrainingRows(f"environment '{env.env_id}' has no rows to train on ({len(env.rows())} rows, "
                                 f"{held_out_size(env, gen.evaluation)} of them held out for eval); give it a dataset "
                                 "or lower trainer.args.num_eval_examples")

    def request_seed(self, stream: str, step: int, example_id: int) -> int:
        """vLLM sampling seed of a group, a function of (seed, stream, step, example); sample j adds j.

        Seeded sampling makes rollouts replayable: a resumed run regenerates the same completions.
        """
        key = f"{self.gen.seed}:{stream}:{step}:{example_id}".encode()
        return int.from_bytes(hashlib.sha256(key).digest()[:4], "little") >> 1  # < 2**31

    def example_ids(self, step: int) -> list[int]:
        """Deterministic data order: a fresh shuffle of the dataset each epoch, a function of (seed, step)."""
        n = self.num_train
        needed = (step + 1) * self.examples_per_step
        while len(self._order) < needed:
            epoch = list(range(n))
            self._rng.shuffle(epoch)
            self._order += epoch
        return self._order[step * self.examples_per_step : needed]

    def refill_ids(self, step: int, round_: int, n: int, taken: list[int]) -> list[int]:
        """Up to `n` examples not `taken` to sample in place of flat groups, a function of (seed, step, round)."""
        free = sorted(set(range(self.num_train)) - set(taken))
        return random.Random(f"{self.gen.seed}:refill:{step}:{round_}").sample(free, min(n, len(free)))

    async def generate(self, step: int, model: str, policy_version: int) -> Batch:
        """Batch `step`; rollouts lost to their own faults are left out and counted (step_faults.py); groups with
        one reward for all replaced by new prompts' for up to refill_zero_std_groups rounds."""
        a = self.gen
        ids = self.example_ids(step)
        t0 = time.time()
        faults = RolloutFaults(timeout=a.rollout_timeout)

        def groups_of(examples: list[int], stream: str):
            return asyncio.gather(*(
                self.env.run_group(self.client, model, i, a.rollouts_per_example,
                                   {**a.sampling.request(), "seed": self.request_seed(stream, step, i)},
                                   self.semaphore, faults=faults)
                for i in examples))

        async def sample() -> tuple[list, int]:
            groups, refilled = list(await groups_of(ids, "train")), 0
            for round_ in range(1, a.refill_zero_std_groups + 1):
                if not (flat := [j for j, g in enumerate(groups) if len({r.reward for r in g}) == 1]):
                    break
                new_ids = self.refill_ids(step, round_, len(flat), ids)
                for j, i, g in zip(flat, new_ids, await groups_of(new_ids, f"refill{round_}")):
                    ids[j], groups[j] = i, g
                refilled += len(new_ids)
            return groups, refilled

        try:
            groups, refilled = await asyncio.wait_for(sample(), timeout=a.generation_timeout)
        except TimeoutError:
            raise BatchTimedOut(f"step {step + 1}: the batch's rollouts did not finish within generation_timeout = "
                                f"{a.generation_timeout:g}s; raise it, or lower rollout_timeout, max_tokens or "
                                f"batch_size") from None
        rollouts = [r for g in groups for r in g]
        metrics, warning = check_step(step + 1, rollouts, faults, len(ids) * a.rollouts_per_example,
                                      a.max_reward_error_fraction)
        if a.refill_zero_std_groups:
            metrics["refilled_groups"] = refilled
        return Batch(step=step, policy_version=policy_version, rollouts=rollouts, example_ids=ids,
                     gen_start=t0, gen_end=time.time(), metrics=metrics, group_sizes=[len(g) for g in groups],
                     warning=warning)

    async def evaluate(self, model: str, examples: tuple[list[int], bool] | None = None
                       ) -> tuple[dict[str, float], list[Rollout]]:
        """Eval split with `model`; the same seeds at every eval (common random numbers across steps)."""
        return await evaluate(self.env, self.client, model, self.gen, self.semaphore,
                              lambda i: self.request_seed("eval", 0, i), examples)
