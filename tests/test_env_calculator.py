"""calculator with a fake vLLM: the tool runs safely, right answers earn 1.0, wrong ones 0."""

import asyncio
import json

import pytest
from fake_openai import FakeOpenAI

import vfrl

calculator = pytest.importorskip("calculator")


def call(expression: str) -> str:
    return "<tool_call>" + json.dumps({"name": "calculate", "arguments": {"expression": expression}}) + "</tool_call>"


def play(env, replies):
    return asyncio.run(env.run_group(FakeOpenAI(replies), "m", 0, 1, {"max_tokens": 300}, asyncio.Semaphore(1)))[0]


@pytest.fixture(scope="module")
def env():
    return vfrl.load_environment("calculator", num_train_examples=10, num_eval_examples=2)


@pytest.mark.parametrize("expression,value", [("(3 + 4) * 12", "84"), ("7 / 2", "3.5"), ("2 ** 10 - 1", "1023"),
                                              ("-5 // 2", "-3")])
def test_calculate(expression, value):
    assert calculator.calculate(expression) == value


@pytest.mark.parametrize("expression,error", [
    ("__import__('os').system('true')", "unsupported syntax"), ("9 ** 9 ** 9", "exponent"),
    ("10 ** 20 * 10 ** 20", "out of range"), ("1 +", "not an arithmetic expression"), ("x" * 201, "longer than"),
])
def test_calculate_refuses_what_is_not_bounded_arithmetic(expression, error):
    with pytest.raises(ValueError, match=error):
        calculator.calculate(expression)


def test_tool_then_right_boxed_answer_scores_one(env):
    row = env.dataset[0]
    expression = row["prompt"][-1]["content"].removeprefix("What is ").removesuffix("?")
    r = play(env, [call(expression), f"So it is \\boxed{{{row['answer']}}}."])
    assert r.completion[1] == {"role": "tool", "tool_call_id": r.completion[1]["tool_call_id"],
                               "content": row["answer"]}
    assert r.reward == 1.0 and r.metrics["tool_calls"] == 1.0 and r.metrics["tool_errors"] == 0.0


def test_wrong_answer_scores_zero_and_tool_errors_are_logged(env):
    r = play(env, [call("import os"), "\\boxed{0}"])
    assert r.completion[1]["content"].startswith("Error: ValueError: not an arithmetic expression")
    assert r.reward == 0.0 and r.metrics["tool_errors"] == 1.0
    unboxed = play(env, [env.dataset[0]["answer"]])  # right number but no \boxed{}: no credit
    assert unboxed.reward == 0.0 and unboxed.metrics["tool_calls"] == 0.0
