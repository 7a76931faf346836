"""A fake of the vLLM OpenAI-compatible server for environment unit tests.

It renders chat messages with a Jinja chat template and a character-level tokenizer, answers with
scripted replies, and returns what vLLM returns with `return_token_ids` / `logprobs`: the prompt
ids, the sampled ids (ending with <|im_end|> unless cut by max_tokens) and one logprob per sampled
token. It also serves `/tokenize` (chat messages or a text) and `/v1/completions` with a text or a
token-id prompt, like vLLM; the policy then sees the prompt text as is.

`PlainOpenAI` is an OpenAI-compatible server that is not vLLM: its replies carry no token ids, and
with `strict=True` it refuses request fields it does not know, as api.openai.com does.
"""

from __future__ import annotations

import asyncio
import json
import re
from types import SimpleNamespace
from typing import Callable

import httpx
import jinja2
import openai

from vfrl.envs.sampling import OPENAI_SAMPLING_KEYS, plain

IM_START, IM_END = 1, 2
SPECIALS = {"<|im_start|>": IM_START, "<|im_end|>": IM_END}

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Like Qwen3: past assistant turns are rendered without their <think> block, and an assistant
# message that ends the conversation gets an empty one.
STRIPS_PAST_THINK = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' %}{% if loop.last %}<think>\n\n</think>\n\n{% endif %}"
    "{{ m['content'].split('</think>')[-1].lstrip() }}"
    "{% else %}{{ m['content'] }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def encode(text: str) -> list[int]:
    ids = []
    for piece in re.split(r"(<\|im_start\|>|<\|im_end\|>)", text):
        ids += [SPECIALS[piece]] if piece in SPECIALS else [100 + ord(c) for c in piece]
    return ids


def decode(ids: list[int]) -> str:
    names = {v: k for k, v in SPECIALS.items()}
    return "".join(names.get(i) or chr(i - 100) for i in ids)


def logprob_at(position: int) -> float:
    """A distinct, checkable logprob for the token sampled at absolute sequence position."""
    return -1.0 - position / 1000


class FakeOpenAI:
    """`policy(prompt_text) -> reply` or a list of replies returned in order."""

    def __init__(self, policy: Callable[[str], str] | list[str], template: str = CHATML,
                 tool_parser: bool = False, max_model_len: int = 100_000, delay: float = 0.0, eos: bool = True):
        if isinstance(policy, list):
            replies = list(policy)
            policy = lambda prompt: replies.pop(0)  # noqa: E731
        self.policy = policy
        self.template = jinja2.Environment().from_string(template)
        self.tool_parser = tool_parser  # as vLLM with --enable-auto-tool-choice --tool-call-parser hermes
        self.max_model_len = max_model_len
        self.delay = delay
        self.eos = eos  # False: replies end without <|im_end|>, as when a stop string ends them
        self.base_url = httpx.URL("http://fake-vllm:8000/v1/")
        self.calls: list[tuple[str, dict]] = []
        self.in_flight = self.max_in_flight = 0
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._chat))
        self.completions = SimpleNamespace(create=self._completions)
        self.models = SimpleNamespace(list=self._models)

    async def _models(self):
        yield SimpleNamespace(id="m")

    async def close(self) -> None:
        pass

    def render(self, messages, add_generation_prompt: bool) -> str:
        return self.template.render(messages=messages, add_generation_prompt=add_generation_prompt)

    def _bad_request(self, message: str) -> openai.BadRequestError:
        response = httpx.Response(400, request=httpx.Request("POST", str(self.base_url)))
        return openai.BadRequestError(message, response=response, body=None)

    async def _sample(self, prompt_ids: list[int], max_tokens: int | None):
        if len(prompt_ids) > self.max_model_len:
            raise self._bad_request(f"This model's maximum context length is {self.max_model_len} tokens")
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            text = self.policy(decode(prompt_ids))
        finally:
            self.in_flight -= 1
        ids = encode(text) + [IM_END] * self.eos
        finish = "stop"
        if max_tokens is not None and len(ids) > max_tokens:
            ids, finish = ids[:max_tokens], "length"
        logprobs = [logprob_at(len(prompt_ids) + i) for i in range(len(ids))]
        return decode([i for i in ids if i != IM_END]), ids, logprobs, finish

    def _stop_reason(self):
        return None if self.eos else "<stop string>"

    async def _chat(self, model, messages, logprobs=None, extra_body=None, tools=None, tool_choice=None,
                    max_tokens=None, **kwargs):
        self.calls.append(("chat", {"messages": messages, "tools": tools, "tool_choice": tool_choice, **kwargs}))
        assert logprobs is True and extra_body["return_token_ids"] is True
        await asyncio.sleep(0)  # a request is a suspension point, as over the network
        if tools and tool_choice is None and not self.tool_parser:
            raise self._bad_request('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser '
                                    'to be set')
        prompt_ids = encode(self.render(messages, add_generation_prompt=True))
        choices = []
        for index in range(kwargs.get("n") or 1):  # as vLLM: choice j of n samples with seed + j
            text, ids, lps, finish = await self._sample(prompt_ids, max_tokens)
            choices.append(SimpleNamespace(
                message=self._message(text, tools), token_ids=ids, finish_reason=finish, index=index,
                stop_reason=self._stop_reason(),
                logprobs=SimpleNamespace(content=[SimpleNamespace(logprob=x) for x in lps])))
        return SimpleNamespace(choices=choices, prompt_token_ids=prompt_ids)

    def _message(self, text: str, tools) -> SimpleNamespace:
        """The assistant message; with a tool parser, `<tool_call>` blocks become its tool_calls."""
        message = SimpleNamespace(content=text, tool_calls=None)
        if tools and self.tool_parser and "<tool_call>" in text:
            calls = [json.loads(b) for b in re.findall(r"<tool_call>(.*?)</tool_call>", text, re.S)]
            message.content = re.sub(r"<tool_call>.*?</tool_call>", "", text, flags=re.S).strip()
            message.tool_calls = [
                SimpleNamespace(model_dump=lambda c=c, i=i: {
                    "id": f"srv{i}", "type": "function",
                    "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}})
                for i, c in enumerate(calls)
            ]
        return message

    async def _completions(self, model, prompt, logprobs=None, extra_body=None, max_tokens=None, **kwargs):
        self.calls.append(("completions", {"prompt": prompt if isinstance(prompt, str) else list(prompt), **kwargs}))
        assert logprobs == 0 and extra_body["return_token_ids"] is True
        await asyncio.sleep(0)
        prompt_ids = encode(prompt) if isinstance(prompt, str) else list(prompt)
        choices = []
        for index in range(kwargs.get("n") or 1):
            text, ids, lps, finish = await self._sample(prompt_ids, max_tokens)
            choices.append(SimpleNamespace(text=text, token_ids=ids, finish_reason=finish, prompt_token_ids=prompt_ids,
                                           stop_reason=self._stop_reason(), index=index,
                                           logprobs=SimpleNamespace(token_logprobs=lps)))
        return SimpleNamespace(choices=choices)

    async def post(self, url, body, cast_to):
        if url in ("/chat/completions", "/completions"):  # vfrl's token-mode requests (sampling.post_plain)
            openai_keys = OPENAI_SAMPLING_KEYS | {"model", "messages", "prompt", "logprobs", "tools", "tool_choice"}
            kwargs = {k: v for k, v in body.items() if k in openai_keys}
            extra = {k: v for k, v in body.items() if k not in openai_keys}
            reply = await (self._chat if url == "/chat/completions" else self._completions)(**kwargs, extra_body=extra)
            return httpx.Response(200, json=plain(reply))
        assert str(url) == "http://fake-vllm:8000/tokenize", url
        self.calls.append(("tokenize", body))
        if "prompt" in body:  # a text, as vLLM's tokenizer reads it (this one adds no special tokens)
            tokens = encode(body["prompt"])
        else:
            tokens = encode(self.render(body["messages"], body["add_generation_prompt"]))
        return httpx.Response(200, json={"tokens": tokens, "count": len(tokens)})

    def count(self, kind: str) -> int:
        return sum(k == kind for k, _ in self.calls)


class PlainOpenAI(FakeOpenAI):
    """An OpenAI-compatible server that is not vLLM (api.openai.com, a proxy, another engine).

    Replies have no `token_ids`, `prompt_token_ids` or `stop_reason` attributes; logprobs come back
    only when asked for. `strict=True` answers 400 to any extra_body field (all are unknown to it);
    otherwise they are ignored. Tool calls are native (`tool_calls`). No `/tokenize`, and its
    `/v1/completions` takes text prompts only.
    """

    def __init__(self, policy, strict: bool = False, **kwargs):
        super().__init__(policy, tool_parser=True, **kwargs)
        self.strict = strict

    def _refuse_unknown_fields(self, extra_body) -> None:
        if self.strict and extra_body:
            raise self._bad_request("Error code: 400 - Unrecognized request argument supplied: "
                                    f"{', '.join(extra_body)}")

    async def _chat(self, model, messages, logprobs=None, extra_body=None, tools=None, tool_choice=None,
                    max_tokens=None, **kwargs):
        self.calls.append(("chat", {"messages": list(messages), "tools": tools, "tool_choice": tool_choice,
                                    "logprobs": logprobs, "extra_body": extra_body, "max_tokens": max_tokens,
                                    **kwargs}))
        await asyncio.sleep(0)
        self._refuse_unknown_fields(extra_body)
        text, _, lps, finish = await self._sample(encode(self.render(messages, add_generation_prompt=True)), max_tokens)
        content = [SimpleNamespace(logprob=x) for x in lps]
        choice = SimpleNamespace(message=self._message(text, tools), finish_reason=finish, index=0,
                                 logprobs=SimpleNamespace(content=content) if logprobs else None)
        return SimpleNamespace(choices=[choice])

    async def _completions(self, model, prompt, logprobs=None, extra_body=None, max_tokens=None, **kwargs):
        assert isinstance(prompt, str), "a plain OpenAI server has no token-id completions"
        self.calls.append(("completions", {"prompt": prompt, "logprobs": logprobs, "extra_body": extra_body,
                                           "max_tokens": max_tokens, **kwargs}))
        await asyncio.sleep(0)
        self._refuse_unknown_fields(extra_body)
        text, _, lps, finish = await self._sample(encode(prompt), max_tokens)
        choice = SimpleNamespace(text=text, finish_reason=finish, index=0,
                                 logprobs=SimpleNamespace(token_logprobs=lps) if logprobs is not None else None)
        return SimpleNamespace(choices=[choice])

    async def post(self, url, body, cast_to):
        if url in ("/chat/completions", "/completions"):
            return await super().post(url, body, cast_to)
        raise AssertionError(f"a plain OpenAI server has no {url}")
