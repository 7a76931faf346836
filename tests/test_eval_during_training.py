"""Eval during training: which rows, when (the real run that logs eval reward is in test_e2e_run.py)."""

from types import SimpleNamespace

import pytest

from vfrl.config import TrainerArgs
from vfrl.envs.environment import Environment
from vfrl.rollouts.evaluation import eval_example_ids, held_out_size, is_eval_step, summarize
from vfrl.rollouts.orchestrator import Orchestrator


def rows(n):
    return [{"question": f"q{i}", "answer": str(i)} for i in range(n)]


def test_eval_steps_baseline_every_n_and_end():
    args = TrainerArgs(eval_strategy="steps", eval_steps=4, max_steps=10, batch_size=8, rollouts_per_example=4)
    assert [s for s in range(11) if is_eval_step(args.evaluation, s)] == [0, 4, 8, 10]
    assert not any(is_eval_step(TrainerArgs(max_steps=10).evaluation, s) for s in range(11))


def test_eval_split_preferred_else_a_held_out_slice_training_never_sees():
    args = TrainerArgs(eval_strategy="steps", num_eval_examples=5, batch_size=8, rollouts_per_example=4)
    with_split = Environment(dataset=rows(20), eval_dataset=rows(3))
    assert (eval_example_ids(with_split, args.evaluation) == ([0, 1, 2], True)
            and held_out_size(with_split, args.evaluation) == 0)

    no_split = Environment(dataset=rows(20))
    assert eval_example_ids(no_split, args.evaluation) == ([15, 16, 17, 18, 19], False)
    orch = Orchestrator(no_split, client=None, gen=args.generation)
    seen = {i for step in range(40) for i in orch.example_ids(step)}  # 16 epochs of the train part
    assert seen == set(range(15))

    # eval off: all rows train
    assert held_out_size(no_split, TrainerArgs(batch_size=8, rollouts_per_example=4).evaluation) == 0
    tiny = Environment(dataset=rows(6))
    assert eval_example_ids(tiny, args.evaluation)[0] == [3, 4, 5]  # never more than half the data


def test_summarize():
    rs = [SimpleNamespace(example_id=i, reward=r, completion_ids=[1] * n, truncated=t, metrics={"lcs": r})
          for i, (r, n, t) in enumerate(((1.0, 4, False), (0.0, 8, True)))]
    s = summarize(rs)
    assert s == {"eval/reward_mean": 0.5, "eval/reward_std": 0.5, "eval/completion_len": 6,
                 "eval/truncated_fraction": 0.5, "eval/num_rollouts": 2.0, "eval/lcs": 0.5}


def test_several_rollouts_of_an_example_give_avg_and_pass_at_k():
    """eval_rollouts_per_example = 3: example 0 solved once in 3, example 1 never, example 2 always; a faulty
    rollout dropped from example 2 leaves k at 3."""
    rewards = {0: [0.0, 1.0, 0.0], 1: [0.0, 0.0, 0.0], 2: [1.0, 1.0]}
    rs = [SimpleNamespace(example_id=i, reward=r, completion_ids=[1], truncated=False, metrics={})
          for i, values in rewards.items() for r in values]
    s = summarize(rs)
    assert s["eval/avg@3"] == pytest.approx((1 / 3 + 0 + 1) / 3) and s["eval/pass@3"] == pytest.approx(2 / 3)
    assert s["eval/reward_mean"] == pytest.approx(3 / 8)  # per rollout, as before


def test_request_seeds_are_per_step_example_and_stream():
    orch = Orchestrator(Environment(dataset=rows(8)), client=None,
                        gen=TrainerArgs(batch_size=8, rollouts_per_example=4).generation)
    seeds = {orch.request_seed(stream, step, ex)
             for stream in ("train", "eval") for step in range(5) for ex in range(8)}
    assert len(seeds) == 80 and all(0 <= s < 2**31 for s in seeds)
    again = Orchestrator(Environment(dataset=rows(8)), client=None,
                         gen=TrainerArgs(batch_size=8, rollouts_per_example=4).generation)
    assert again.request_seed("train", 3, 5) == orch.request_seed("train", 3, 5)


# The real run with eval (eval reward logged at steps 0, 2 and 4, wandb offline, from a tmux server
# started without WANDB_MODE) is test_e2e_run.py's: one vf-rl run serves both files.
