"""alphabet-sort with a fake vLLM: correct sorts earn 1.0, wrong ones less, turns follow the rounds."""

import asyncio

import pytest
from fake_openai import FakeOpenAI

import vfrl


def play(env, row, policy):
    return asyncio.run(env.run_group(FakeOpenAI(policy), "m", row, 1, {"max_tokens": 200}, asyncio.Semaphore(1)))[0]


def names_so_far(prompt_text: str) -> list[str]:
    """Every name the conversation has shown (lines between the user turns' first line and 'Sort all')."""
    names = []
    for turn in prompt_text.split("<|im_start|>user\n")[1:]:
        body = turn.split("<|im_end|>")[0].splitlines()[1:]
        names += [n for n in body if n != "Sort all again."]
    return names


@pytest.fixture(scope="module")
def env():
    return vfrl.load_environment("alphabet-sort", num_train_examples=20, num_eval_examples=5, num_turns=3)


def test_rounds_are_disjoint_and_prompts_follow_them(env):
    row = env.dataset[0]
    rounds = row["info"]["rounds"]
    assert len(rounds) == 3 and len({n for r in rounds for n in r}) == sum(map(len, rounds))
    assert row["prompt"][-1]["content"] == "Sort:\n" + "\n".join(rounds[0])
    assert row["answer"] == "\n".join(sorted(n for r in rounds for n in r))


def test_correct_sorting_every_turn_scores_one(env):
    r = play(env, 0, lambda prompt: "\n".join(sorted(names_so_far(prompt))))
    rounds = env.dataset[0]["info"]["rounds"]
    assert len(r.turn_spans) == 3
    assert r.completion[1]["content"] == "Add:\n" + "\n".join(rounds[1]) + "\nSort all again."
    assert r.reward == 1.0 and r.metrics["exact_turns"] == 1.0


def test_unsorted_or_missing_turns_score_less(env):
    shuffled = play(env, 0, lambda prompt: "\n".join(sorted(names_so_far(prompt), reverse=True)))
    assert 0.0 < shuffled.reward < 1.0 and shuffled.metrics["exact_turns"] == 0.0
    first_only = play(env, 0, lambda prompt: ("\n".join(sorted(names_so_far(prompt)))
                                              if prompt.count("user") == 1 else ""))
    assert first_only.reward == pytest.approx(1 / 3) and first_only.metrics["exact_turns"] == pytest.approx(1 / 3)
    bullets = play(env, 0, lambda prompt: "\n".join(f"{i}. {n}" for i, n in enumerate(sorted(names_so_far(prompt)))))
    assert bullets.reward == 1.0  # numbering and bullets are not held against the model
