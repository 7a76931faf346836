"""HybridMathRubric (verifiers' `verifiers.rubrics.experimental.hybrid_math_rubric`): the math check first, and
with `use_judge_fallback` a judge model for the answers it rejects.

Three functions, as verifiers names them: `math_verify_score` (weight 0: the reply's answer equals the reference,
exactly, numerically or symbolically, as MathRubric checks), `judge_score` (weight 0: the math score when it is 1
or no judge is used, else the judge's verdict, `\\boxed{A}` meaning correct) and `correct_answer` (weight 1: either
said yes). The judge is asked only for answers the math check rejects.
"""

from __future__ import annotations

from typing import Any

from vfrl.envs.judge_rubric import JudgeRubric
from vfrl.envs.math_rubric import MathRubric, _boxed_or_empty, extract_boxed_answer
from vfrl.envs.parsers import MaybeThinkParser, Parser

JUDGE_PROMPT = """You grade a candidate's final answer to a question against the reference answer, which is correct.
Compare only the final answers: ignore the reasoning and the formatting; equivalent expressions and values equal
after sensible rounding match; a question with several parts matches only when every part does.

Question:
{question}

Reference answer:
{answer}

Candidate's answer:
{response}

Reply with one verdict: \\boxed{{A}} if the candidate's answer matches, \\boxed{{B}} if it does not, \\boxed{{C}} if it
is cut off, repeats itself in a loop or refuses to answer."""


class HybridMathRubric(JudgeRubric):
    DEFAULT_JUDGE_MODEL = "gpt-5-nano"
    DEFAULT_JUDGE_PROMPT = JUDGE_PROMPT

    def __init__(self, parser: Parser | None = None, use_judge_fallback: bool = False, judge_client=None,
                 judge_model: str = DEFAULT_JUDGE_MODEL, judge_prompt: str = JUDGE_PROMPT,
                 judge_sampling_args: dict[str, Any] | None = None, timeout_seconds: float = 5, max_workers: int = 50,
                 **kwargs: Any):
        super().__init__(judge_client=judge_client, judge_model=judge_model, judge_prompt=judge_prompt,
                         judge_sampling_args=judge_sampling_args,
                         parser=parser if parser is not None else MaybeThinkParser(_boxed_or_empty), **kwargs)
        self.use_judge_fallback = use_judge_fallback
        self.timeout_seconds, self.max_workers = timeout_seconds, max_workers  # kept; vfrl's check needs neither
        self.add_reward_func(self.math_verify_score, weight=0)
        self.add_reward_func(self.judge_score, weight=0)
        self.add_reward_func(self.correct_answer, weight=1)

    async def math_verify_score(self, completion: Any, answer: Any, state: dict[str, Any]) -> float:
        state["math_verify_score"] = score = MathRubric.correct_answer_reward_func(completion, answer, self.parser)
        return score

    async def judge_score(self, prompt: Any, completion: Any, answer: Any, state: dict[str, Any]) -> float:
        math_score = state.get("math_verify_score", 0.0)
        if math_score == 1 or not self.use_judge_fallback:
            return math_score
        verdict = (await self.judge(prompt, completion, answer, state)).strip()
        state["judge_result"] = verdict if len(verdict) == 1 else extract_boxed_answer(verdict)
        state["judge_score"] = score = float(state["judge_result"] == "A")
        return score

    async def correct_answer(self, state: dict[str, Any]) -> float:
        return float(bool(state.get("math_verify_score") or state.get("judge_score")))
