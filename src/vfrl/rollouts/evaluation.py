"""Evaluation during training: the environment's eval split, sampled by vLLM with the current policy.

Eval rows are `env.eval_dataset` when the environment has one; otherwise the last
`num_eval_examples` rows of `env.dataset`, which training then never sees (held out; at most half
of the dataset). Every eval uses the same examples and the same per-request seeds, so the eval
curve compares policies on common random numbers, not on fresh sampling noise.
"""

from __future__ import annotations

import asyncio
import time
from statistics import mean, pstdev

from vfrl.envs.at_k import at_k
from vfrl.envs.environment import Environment
from vfrl.rollout_types import Rollout
from vfrl.envs.faults import RolloutFaults
from vfrl.sections import EvalSection, GenerationSection


def held_out_size(env: Environment, ev: EvalSection) -> int:
    """Training rows reserved for eval: only when eval is on and the environment has no eval split."""
    if ev.eval_strategy == "no" or env.eval_dataset is not None:
        return 0
    return min(ev.num_eval_examples, len(env.dataset) // 2)


def eval_example_ids(env: Environment, ev: EvalSection) -> tuple[list[int], bool]:
    """(ids, uses_eval_split): ids index env.eval_dataset, or env.dataset for the held-out slice."""
    if env.eval_dataset is not None:
        return list(range(min(ev.num_eval_examples, len(env.eval_dataset)))), True
    n, k = len(env.dataset), held_out_size(env, ev)
    return list(range(n - k, n)), False


def examples_to_evaluate(env: Environment, ev: EvalSection) -> tuple[list[int], bool]:
    """eval_example_ids, or with eval off in training (nothing held out) the last num_eval_examples rows of the
    dataset, which training also samples: what an eval asked for outside training runs (GRPOTrainer.evaluate,
    vf-rl eval)."""
    ids, eval_split = eval_example_ids(env, ev)
    if not ids:
        n = len(env.dataset)
        ids = list(range(max(0, n - ev.num_eval_examples), n))
    return ids, eval_split


def is_eval_step(ev: EvalSection, step: int) -> bool:
    """Eval after optimizer step `step` (0 = the baseline before training)? Also always at the end."""
    if ev.eval_strategy == "no":
        return False
    return step == 0 or step % ev.eval_steps == 0 or step == ev.max_steps


def summarize(rollouts: list[Rollout], faults: RolloutFaults | None = None) -> dict[str, float]:
    dropped = {"eval/rollouts_dropped": float(faults.total)} if faults is not None else {}
    if not rollouts:  # every eval rollout was dropped: the counts tell why, training goes on
        return {"eval/num_rollouts": 0.0, **dropped}
    rewards = [r.reward for r in rollouts]
    out = {
        "eval/reward_mean": mean(rewards),
        "eval/reward_std": pstdev(rewards) if len(rewards) > 1 else 0.0,
        "eval/completion_len": mean(len(r.completion_ids) for r in rollouts),
        "eval/truncated_fraction": mean(float(r.truncated) for r in rollouts),
        "eval/num_rollouts": float(len(rollouts)),
        **dropped,
    }
    for name in rollouts[0].metrics:
        out[f"eval/{name}"] = mean(r.metrics.get(name, 0.0) for r in rollouts)
    return out | {f"eval/{name}": value for name, value in at_k(rollouts).items()}


async def evaluate(env: Environment, client, model: str, gen: GenerationSection, semaphore: asyncio.Semaphore,
                   seed_of, examples: tuple[list[int], bool] | None = None) -> tuple[dict[str, float], list[Rollout]]:
    """Run the eval split with `model`, sampled as training samples; `seed_of(example_id)` gives each group's
    request seed. `examples`: (ids, ids index the eval split) instead of `eval_example_ids`."""
    ids, eval_split = examples or eval_example_ids(env, gen.evaluation)
    t0 = time.time()
    faults = RolloutFaults(timeout=gen.rollout_timeout)  # eval rollouts are dropped for the same faults
    n = gen.evaluation.eval_rollouts_per_example
    groups = await asyncio.wait_for(
        asyncio.gather(*(
            env.run_group(client, model, i, n, {**gen.sampling.request(), "seed": seed_of(i)},
                          semaphore, eval=eval_split, faults=faults)
            for i in ids
        )),
        timeout=gen.generation_timeout,
    )
    rollouts = [r for g in groups for r in g]
    stats = summarize(rollouts, faults)
    stats["eval/time_s"] = time.time() - t0
    return stats, rollouts
