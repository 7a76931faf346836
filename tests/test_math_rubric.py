"""extract_boxed_answer and MathRubric: boxed answers, exact, numeric and symbolic equivalence."""

import asyncio
import time

import pytest

import vfrl
from vfrl.envs.math_rubric import answers_equal, boxed_content, extract_boxed_answer


@pytest.mark.parametrize("text, expected", [
    (r"so \boxed{42}.", "42"),
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),  # nested braces kept
    (r"first \boxed{1}, then \boxed{2}", "2"),  # the last box counts
    (r"\fbox{7}", "7"),
    (r"\boxed{}", ""),
    ("no box here", "no box here"),  # as verifiers: nothing boxed -> the text itself
    (r"\boxed{unclosed", r"\boxed{unclosed"),
])
def test_extract_boxed_answer(text, expected):
    assert extract_boxed_answer(text) == expected


def test_boxed_content_is_none_without_a_closed_box():
    assert boxed_content("42") is None and boxed_content(r"\boxed{4") is None and boxed_content(r"\boxed{4}") == "4"


@pytest.mark.parametrize("given, expected", [
    ("42", "42"), ("42.0", "42"), (" 42 ", "42"), ("$42$", "42"), (r"\text{42}", "42"), ("1,000", "1000"),
    (r"\frac{1}{2}", "0.5"), ("1/2", r"\dfrac{1}{2}"), ("-3", "- 3"), ("2^{-1}", "0.5"),
    (r"2\sqrt{2}", r"\sqrt{8}"), ("x+1", "1+x"), ("x^2", "x*x"), ("(1,2)", "(1, 2)"),
])
def test_equal_answers(given, expected):
    assert answers_equal(given, expected)


@pytest.mark.parametrize("given, expected", [
    ("41", "42"), ("0.51", "0.5"), ("x+2", "x+1"), ("", "1"), ("1,2", "12"), ("abc", "abd"),
])
def test_different_answers(given, expected):
    assert not answers_equal(given, expected)


@pytest.mark.parametrize("hostile", [
    "__import__('os').system('true')", "10^(9999*9999)", "9^9^9^9", "2**99999999", "x.__class__",
])
def test_hostile_replies_are_refused_quickly_not_evaluated(hostile):
    t0 = time.time()
    assert not answers_equal(hostile, "1")
    assert time.time() - t0 < 2


def score(rubric, reply, answer):
    return asyncio.run(rubric.score(prompt=[], completion=[{"role": "assistant", "content": reply}], answer=answer))


def test_math_rubric_rewards_the_boxed_answer_only():
    rubric = vfrl.MathRubric()
    assert score(rubric, r"3 + 4 = \boxed{7}", "7") == (1.0, {"correct_answer_reward_func": 1.0, "reward_errors": 0.0})
    assert score(rubric, r"\boxed{7.0}", "7")[0] == 1.0
    assert score(rubric, r"\boxed{8}", "7")[0] == 0.0
    assert score(rubric, "7", "7")[0] == 0.0  # not boxed: no credit
    assert score(rubric, r"\boxed{7", "7")[0] == 0.0


def test_math_rubric_with_a_parser_and_extra_functions():
    rubric = vfrl.MathRubric(parser=vfrl.XMLParser(["answer"]), funcs=[lambda completion: 0.5], weights=[2.0])
    reward, metrics = score(rubric, "<answer>1/4</answer>", "0.25")
    assert metrics["correct_answer_reward_func"] == 1.0 and reward == 2.0
