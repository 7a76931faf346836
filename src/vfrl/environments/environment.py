"""Environments: a dataset, the rollout logic that talks to an OpenAI-compatible server, and a rubric.

A rollout keeps the token ids and sampling logprobs vLLM returned (`return_token_ids`, `logprobs`),
so training sequences are built from exactly the tokens the policy sampled, never re-tokenized text.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Sequence

from vfrl.environments.rubric import Rubric

Messages = list[dict[str, Any]]


@dataclass
class Rollout:
    example_id: int
    prompt: Messages
    completion: Messages
    answer: str
    prompt_ids: list[int]
    completion_ids: list[int]
    completion_logprobs: list[float]  # sampling logprobs, one per completion token
    completion_mask: list[int]  # 1 = policy token (gets loss), 0 = environment token
    policy: str  # the served model / adapter name that sampled it
    truncated: bool = False
    reward: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    task: str = "default"
    info: dict[str, Any] = field(default_factory=dict)


class Environment:
    """Base class. Subclasses implement `rollout`; scoring goes through the rubric."""

    def __init__(
        self,
        dataset: Sequence[dict[str, Any]],
        eval_dataset: Sequence[dict[str, Any]] | None = None,
        system_prompt: str | None = None,
        rubric: Rubric | None = None,
        parser=None,
    ):
        self.dataset = list(dataset)
        self.eval_dataset = list(eval_dataset) if eval_dataset is not None else None
        self.system_prompt = system_prompt
        self.parser = parser
        self.rubric = rubric or Rubric(parser=parser)

    def prompt_of(self, row: dict[str, Any]) -> Messages:
        if "prompt" in row:
            return list(row["prompt"])
        messages: Messages = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": row["question"]})
        return messages

    async def rollout(self, client, model: str, row: dict[str, Any], example_id: int, sampling: dict[str, Any]) -> Rollout:
        raise NotImplementedError

    async def score(self, rollout: Rollout) -> Rollout:
        rollout.reward, rollout.metrics = await self.rubric.score(
            prompt=rollout.prompt, completion=rollout.completion, answer=rollout.answer,
            state={"truncated": rollout.truncated}, task=rollout.task, info=rollout.info,
        )
        return rollout

    async def run_group(self, client, model: str, example_id: int, n: int, sampling: dict[str, Any],
                        semaphore: asyncio.Semaphore, eval: bool = False) -> list[Rollout]:
        data = self.eval_dataset if eval and self.eval_dataset is not None else self.dataset
        row = data[example_id % len(data)]

        async def one() -> Rollout:
            async with semaphore:
                r = await self.rollout(client, model, row, example_id, sampling)
            return await self.score(r)

        return list(await asyncio.gather(*(one() for _ in range(n))))


def sampling_request(sampling: dict[str, Any]) -> dict[str, Any]:
    """Split our sampling dict into OpenAI keyword args and vLLM's extra_body."""
    openai_keys = {"temperature", "top_p", "max_tokens", "presence_penalty", "frequency_penalty", "seed"}
    kwargs = {k: v for k, v in sampling.items() if k in openai_keys}
    extra = {k: v for k, v in sampling.items() if k not in openai_keys}
    extra["return_token_ids"] = True
    return {**kwargs, "logprobs": True, "extra_body": extra}


class SingleTurnEnv(Environment):
    """One prompt, one model reply."""

    async def rollout(self, client, model, row, example_id, sampling) -> Rollout:
        prompt = self.prompt_of(row)
        resp = await client.chat.completions.create(model=model, messages=prompt, **sampling_request(sampling))
        choice = resp.choices[0]
        completion_ids = list(choice.token_ids)
        logprobs = [t.logprob for t in choice.logprobs.content]
        if len(logprobs) != len(completion_ids):
            raise RuntimeError(
                f"server returned {len(completion_ids)} token ids but {len(logprobs)} logprobs; "
                "is it vLLM with return_token_ids support?"
            )
        return Rollout(
            example_id=example_id,
            prompt=prompt,
            completion=[{"role": "assistant", "content": choice.message.content or ""}],
            answer=str(row.get("answer", "")),
            prompt_ids=list(resp.prompt_token_ids),
            completion_ids=completion_ids,
            completion_logprobs=logprobs,
            completion_mask=[1] * len(completion_ids),
            policy=model,
            truncated=choice.finish_reason == "length",
            task=row.get("task", "default"),
            info=dict(row.get("info", {})),
        )
