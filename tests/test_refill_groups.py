"""refill_zero_std_groups: a group whose rollouts all got one reward is sampled again from new prompts, up to N rounds
(Orchestrator.generate, DAPO's dynamic sampling). The fake server answers prompts starting with "f" right every time
(a flat group, reward 1 for all) and alternates right and wrong on each of the others (a group with a spread)."""

import asyncio
from collections import Counter

import pytest
from fake_openai import FakeOpenAI

import vfrl
from vfrl.config import TrainerArgs
from vfrl.envs.rubric import Rubric
from vfrl.rollouts.orchestrator import Orchestrator


def question(prompt: str) -> str:
    return prompt.split("user\n")[-1].split("<|im_end|>")[0]


def right(completion, answer) -> float:
    return float(completion[-1]["content"] == answer)


def orchestrator(questions: list[str], refill: int, **args) -> Orchestrator:
    calls = Counter()

    def reply(prompt: str) -> str:
        q = question(prompt)
        calls[q] += 1
        return q[::-1] if q.startswith("f") or calls[q] % 2 else "wrong"

    env = vfrl.SingleTurnEnv(dataset=[{"question": q, "answer": q[::-1]} for q in questions], rubric=Rubric([right]))
    a = TrainerArgs(rollouts_per_example=2, batch_size=8, micro_batch_size=4, max_tokens=20, max_seq_len=200,
                    refill_zero_std_groups=refill, **args)
    return Orchestrator(env, FakeOpenAI(reply), a.generation)


def flat(group) -> bool:
    return len({r.reward for r in group}) == 1


@pytest.mark.parametrize("seed", range(3))
def test_flat_groups_are_replaced_by_new_prompts_groups_and_counted(seed):
    questions = [f"f{i}" for i in range(10)] + [f"s{i}" for i in range(10)]  # half the prompts give flat groups
    orch = orchestrator(questions, refill=8, seed=seed)
    batch = asyncio.run(orch.generate(0, "m", 0))
    groups = [batch.rollouts[i:i + 2] for i in range(0, 8, 2)]
    first = orch.example_ids(0)
    assert len(batch.example_ids) == 4 and batch.sizes() == [2] * 4
    # each example's own prompt is in its group, and only the flat ones were replaced
    assert all(r.prompt[-1]["content"] == questions[i] for i, g in zip(batch.example_ids, groups) for r in g)
    kept = [i for i in first if questions[i].startswith("s")]
    assert [i for i in batch.example_ids if i in first and questions[i].startswith("s")] == kept
    assert not any(flat(g) for g in groups)  # 8 rounds at 1/2 a round: all replaced (seeds 0-2)
    assert batch.metrics["refilled_groups"] >= 4 - len(kept)


def test_refilling_is_deterministic_and_off_by_default():
    questions = [f"f{i}" for i in range(10)] + [f"s{i}" for i in range(10)]
    a = asyncio.run(orchestrator(questions, refill=2, seed=1).generate(3, "m", 0))
    b = asyncio.run(orchestrator(questions, refill=2, seed=1).generate(3, "m", 0))
    assert a.example_ids == b.example_ids and a.metrics["refilled_groups"] == b.metrics["refilled_groups"]
    off = asyncio.run(orchestrator(questions, refill=0, seed=1).generate(3, "m", 0))
    assert off.example_ids == orchestrator(questions, refill=0, seed=1).example_ids(3)
    assert "refilled_groups" not in off.metrics


def test_a_group_still_flat_after_the_last_round_stays():
    orch = orchestrator([f"f{i}" for i in range(6)], refill=2)  # every prompt gives a flat group
    batch = asyncio.run(orch.generate(0, "m", 0))
    # 4 flat groups; each round replaces as many as there are examples outside the batch (2)
    assert len(batch.rollouts) == 8 and batch.metrics["refilled_groups"] == 4 and len(set(batch.example_ids)) == 4
