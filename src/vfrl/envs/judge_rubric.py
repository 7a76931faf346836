"""JudgeRubric: a model behind an OpenAI-compatible endpoint grades the reply.

`judge(prompt, completion, answer, state)` asks the judge once per rollout (the verdict is kept in
`state`); the built-in `judge_reward_func` turns the verdict into a score: `yes` -> 1.0, `no` -> 0.0,
else the first number divided by `max_score` and clipped to [0, 1]. It scores only a rubric that
has no reward functions of its own: add your own (`funcs=` or `add_reward_func`) that
`await judge(...)` (reward functions may name `judge`, as in verifiers) to read the verdict
differently, and they alone score.
"""

from __future__ import annotations

import re
from typing import Any

from vfrl.envs.messages import content_text, message_field
from vfrl.envs.parsers import Parser, assistant_texts
from vfrl.envs.rubric import Rubric

DEFAULT_JUDGE_PROMPT = """Given a question, a reference answer and a response, say whether the response is correct.

Question: {question}

Reference answer: {answer}

Response: {response}

Reply with "yes" or "no" only."""


def parse_judgement(text: str, max_score: float = 1.0) -> float:
    """`yes`/`no` (first word) -> 1/0; else the first number / max_score, clipped to [0, 1]; else 0."""
    words = re.findall(r"[a-z]+", text.lower())
    if words and words[0] in ("yes", "no"):
        return 1.0 if words[0] == "yes" else 0.0
    if number := re.search(r"-?\d+(?:\.\d+)?", text):
        return min(max(float(number.group()) / max_score, 0.0), 1.0)
    return 0.0


class JudgeRubric(Rubric):
    def __init__(self, judge_client=None, judge_model: str = "gpt-4.1-nano", judge_prompt: str = DEFAULT_JUDGE_PROMPT,
                 judge_sampling_args: dict[str, Any] | None = None, max_score: float = 1.0,
                 funcs: list | None = None, weights: list[float] | None = None, parser: Parser | None = None):
        super().__init__(funcs, weights, parser=parser or Parser())
        self._judge_client = judge_client
        self.judge_model = judge_model
        self.judge_prompt = judge_prompt
        self.judge_sampling_args = dict(judge_sampling_args or {})
        self.max_score = max_score
        self.class_objects.update(judge=self.judge, judge_model=judge_model, judge_prompt=judge_prompt,
                                  judge_sampling_args=self.judge_sampling_args)
        if judge_client is not None:  # not made here: building the env must not need an API key
            self.class_objects["judge_client"] = judge_client

    def scored_funcs(self):
        # decided when scoring, not when built: verifiers packages add their functions after building
        # the rubric, and the judge's own reward on top of theirs would be scored twice
        return (self.funcs, self.weights) if self.funcs else ([self.judge_reward_func], [1.0])

    @property
    def judge_client(self):
        if self._judge_client is None:  # made on first use, so building the env needs no API key
            from openai import AsyncOpenAI

            self._judge_client = AsyncOpenAI()
        return self._judge_client

    async def judge(self, prompt: Any, completion: Any, answer: Any, state: dict[str, Any]) -> str:
        cache = state.setdefault("judge_responses", {})
        question = prompt if isinstance(prompt, str) else next(
            (content_text(message_field(m, "content")) for m in reversed(prompt)
             if message_field(m, "role") == "user"), "")
        response = self.parser.parse_answer(completion)
        if response is None:
            texts = assistant_texts(completion)
            response = texts[-1] if texts else ""
        text = self.judge_prompt.format(question=question, answer=answer, response=response)
        if text not in cache:
            reply = await self.judge_client.chat.completions.create(
                model=self.judge_model, messages=[{"role": "user", "content": text}], **self.judge_sampling_args)
            cache[text] = reply.choices[0].message.content or ""
        return cache[text]

    async def judge_reward_func(self, prompt, completion, answer, state) -> float:
        return parse_judgement(await self.judge(prompt, completion, answer, state), self.max_score)
