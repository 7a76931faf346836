"""wordle with a fake vLLM: feedback marks, solving early earns more, partial credit for close guesses."""

import asyncio

import pytest
from fake_openai import FakeOpenAI

import vfrl

wordle = pytest.importorskip("wordle")


def play(env, replies):
    return asyncio.run(env.run_group(FakeOpenAI(replies), "m", 0, 1, {"max_tokens": 50}, asyncio.Semaphore(1)))[0]


@pytest.fixture(scope="module")
def env():
    return vfrl.load_environment("wordle", num_train_examples=5, num_eval_examples=2)


@pytest.mark.parametrize("guess,secret,expected", [
    ("crane", "crane", "GGGGG"), ("speed", "abide", "--Y-Y"), ("lolly", "hello", "-YGG-"), ("xxxxx", "apple", "-----"),
])
def test_marks(guess, secret, expected):
    assert wordle.marks(guess, secret) == expected


def test_first_guess_right_scores_full_and_ends_the_game(env):
    secret = env.dataset[0]["answer"]
    r = play(env, [f"My guess: {secret.upper()}"])
    assert len(r.turn_spans) == 1 and r.reward == pytest.approx(1.0 + 0.5 + 0.2)


def test_feedback_turns_and_a_later_solve(env):
    secret = env.dataset[0]["answer"]
    wrong = "zzzzz" if "z" not in secret else "qqqqq"
    r = play(env, [wrong, "hmm", secret])
    assert [m["content"] for m in r.completion if m["role"] == "user"] == [
        f"{wrong} ----- 5 left.", "Reply with a 5-letter word. 4 left."]
    assert r.reward == pytest.approx(1.0 + 0.5 * 4 / 6 + 0.2)


def test_never_solved_gets_only_partial_credit(env):
    secret = env.dataset[0]["answer"]
    close = secret[:4] + ("a" if secret[4] != "a" else "b")  # four greens
    r = play(env, [close] * 6)
    assert len(r.turn_spans) == 6 and r.metrics["solved"] == 0.0
    assert r.reward == pytest.approx(0.2 * 4 / 5)
