"""One model turn against vLLM, and the token sequence a multi-turn rollout trains on.

The training sequence is built only from token ids vLLM returned, never by re-tokenizing text:

- Turn 0 is a chat request; its `prompt_token_ids` become `prompt_ids`, the sampled ids (with their
  logprobs) open `completion_ids`.
- Turn k > 0 is again a chat request with the whole conversation. vLLM renders it with the chat
  template and returns the prompt ids it used. When they start with the sequence so far, the rest
  of them are the environment's tokens (mask 0) and the sample is kept: the model saw exactly our
  sequence. This holds for templates that render history verbatim (ChatML, Llama 3, ...).
- When they do not (the template rewrote an earlier turn, e.g. dropped a past `<think>` block, or
  a reply re-tokenizes differently), the chat sample is thrown away and the turn is sampled again
  through `/v1/completions` with `prompt` = our sequence + the new messages' tokens, as a list of
  ids. Those delta tokens come from vLLM's `/tokenize` with the chat template: the new messages are
  rendered after a fixed two-message anchor and cut after the anchor reply's end-of-turn token, so
  earlier turns are never re-rendered. The environment remembers the mismatch and sends later
  turns this way from the start (`sequence_mode = "tokens"`).

A `message_type="completion"` environment has no chat template: `CompletionSampler` sends its text
to `/v1/completions` (the first turn as text, later turns as token ids, `sequence_mode =
"completion"`; its docstring says why).

Text mode (`record_tokens=False`, what `vf-eval` uses against a server that is not vLLM): every
turn is a plain chat request (a completions request for a completion environment) with no logprobs
and no vLLM fields, replies are appended as text, and no token sequence is kept (`sequence_mode =
"text"`). Training never uses it.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import dataclass, field
from functools import partial
from types import SimpleNamespace
from typing import Any, Awaitable, Callable

import httpx
import openai

from vfrl.envs import text_tool_calls
from vfrl.envs.group_request import GroupMember
from vfrl.inference.endpoints import server_root

log = logging.getLogger(__name__)

Messages = list[dict[str, Any]]
OPENAI_SAMPLING_KEYS = {"temperature", "top_p", "max_tokens", "presence_penalty", "frequency_penalty", "seed", "stop",
                        "n"}
_ANCHOR: Messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]  # see _delta_ids


def sampling_request(sampling: dict[str, Any], record_tokens: bool = True) -> dict[str, Any]:
    """Split our sampling dict into OpenAI keyword args and extra_body (the keys OpenAI does not
    name, e.g. `top_k`, sent as given). With `record_tokens` ask vLLM for token ids and logprobs."""
    kwargs = {k: v for k, v in sampling.items() if k in OPENAI_SAMPLING_KEYS}
    extra = {k: v for k, v in sampling.items() if k not in OPENAI_SAMPLING_KEYS}
    if not record_tokens:
        return {**kwargs, **({"extra_body": extra} if extra else {})}
    extra["return_token_ids"] = True
    return {**kwargs, "logprobs": True, "extra_body": extra}


async def post_plain(client, path: str, payload: dict[str, Any], kwargs: dict[str, Any]) -> SimpleNamespace:
    """A completion as `client.chat.completions.create(**payload, **kwargs)` (path "/chat/completions") or
    `client.completions.create` ("/completions") returns it, for the fields vfrl reads, at a fraction of the
    client's CPU: the body is sent as given (no typed transform) and the JSON reply becomes nested namespaces
    instead of validated pydantic models. On the trainer's core that parsing was the larger part of a step's
    event loop (n choices x max_tokens logprob objects a reply). Errors are the client's own
    (openai.BadRequestError, ...): `post` raises them as `create` does."""
    body = {**payload, **{k: v for k, v in kwargs.items() if k != "extra_body"}, **kwargs.get("extra_body", {})}
    resp = await client.post(path, body=body, cast_to=httpx.Response)
    return json.loads(resp.content, object_hook=lambda d: SimpleNamespace(**d))


async def post_chat(client, model: str, messages: Messages, kwargs: dict[str, Any]) -> SimpleNamespace:
    """`client.chat.completions.create(model=, messages=, **kwargs)` through `post_plain`."""
    return await post_plain(client, "/chat/completions", {"model": model, "messages": messages}, kwargs)


async def tokenize(client, body: dict[str, Any]) -> list[int]:
    """The ids of vLLM's `/tokenize` (at the server's root, beside /v1) for `body`: `messages` (rendered with
    the chat template) or a `prompt` text."""
    resp = await client.post(f"{server_root(client.base_url)}/tokenize", body=body, cast_to=httpx.Response)
    return list(resp.json()["tokens"])


async def first_request(member: GroupMember | None, sampling: dict[str, Any], key: Any,
                        send: Callable[[dict[str, Any]], Awaitable[Any]]):
    """A rollout's first response: its share of the group's request when it is a `member` of one
    (group_request.py), else `send(sampling)`. `key` is what the request asks besides its sampling (the
    messages and tools, the prompt text); `send(s)` sends it with sampling `s`."""
    if member is None or "n" in sampling:
        return await send(sampling)
    group, index = member
    seed = sampling.get("seed")
    group_sampling = {**sampling, "seed": seed - index} if seed is not None else sampling

    async def send_for_group(n: int):
        return await send({**group_sampling, "n": n})

    resp = await group.claim(index, (key, {k: v for k, v in sampling.items() if k != "seed"}), send_for_group)
    return resp if resp is not None else await send(sampling)


def plain(obj: Any) -> Any:
    """`obj` as plain dicts and lists: a pydantic model (model_dump), nested namespaces, or already plain."""
    if hasattr(obj, "model_dump"):
        return obj.model_dump()
    if isinstance(obj, SimpleNamespace):
        obj = vars(obj)
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plain(v) for v in obj]
    return obj


class MissingTokenIds(RuntimeError):
    """The server answered without vLLM's token ids or logprobs: it cannot feed training."""

    def __init__(self, what: str):
        self.what = what
        super().__init__(
            f"the server's reply has no {what}: recording tokens for training needs vLLM's `return_token_ids` "
            "(vLLM >= 0.10.2, e.g. started with vf-vllm); to evaluate another OpenAI-compatible server, "
            "use vf-eval (text mode)")


def returned(obj: Any, name: str) -> Any:
    """`obj.name` as the server sent it; MissingTokenIds when it is absent or null."""
    value = getattr(obj, name, None)
    if value is None:
        raise MissingTokenIds(f"`{name}`")
    return value


async def probe_token_ids(client, model: str, completion: bool = False) -> str | None:
    """Ask the server for one token the way token mode does: a chat request, or with `completion` a
    `/v1/completions` one (a message_type="completion" environment, a model that may have no chat template).
    None when it answers with vLLM's token ids and logprobs; else why not, in a few words (the server
    refused the fields, or ignored them)."""
    request = sampling_request({"max_tokens": 1})
    try:
        if completion:
            resp = await client.completions.create(model=model, prompt="Hi", **{**request, "logprobs": 0})
        else:
            resp = await client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}],
                                                        **request)
    except (openai.BadRequestError, openai.UnprocessableEntityError) as e:
        detail = re.sub(r"^Error code: \d+ - ", "", " ".join(str(e.message).split()))
        return f"it answered HTTP {e.status_code}: {detail[:160]}"
    choice = resp.choices[0]
    prompt_ids_on = choice if completion else resp  # a completions reply has them on each choice
    for obj, name in ((prompt_ids_on, "prompt_token_ids"), (choice, "token_ids"), (choice, "logprobs")):
        if getattr(obj, name, None) is None:
            return f"its replies carry no {name}"
    return None


@dataclass
class TokenSequence:
    """prompt_ids + completion_ids, grown turn by turn, with the loss mask and sampling logprobs."""

    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    completion_logprobs: list[float] = field(default_factory=list)
    completion_mask: list[int] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)

    @property
    def ids(self) -> list[int]:
        return self.prompt_ids + self.completion_ids

    def add_env(self, ids: list[int]) -> None:
        self.completion_ids += ids
        self.completion_logprobs += [0.0] * len(ids)
        self.completion_mask += [0] * len(ids)

    def add_model(self, ids: list[int], logprobs: list[float]) -> None:
        if len(ids) != len(logprobs):
            raise RuntimeError(
                f"server returned {len(ids)} token ids but {len(logprobs)} logprobs; "
                "is it vLLM with return_token_ids support?"
            )
        start = len(self.completion_ids)
        self.completion_ids += ids
        self.completion_logprobs += logprobs
        self.completion_mask += [1] * len(ids)
        self.turn_spans.append((start, len(self.completion_ids)))


@dataclass
class ModelTurn:
    message: dict[str, Any] | str  # the assistant message to append to the conversation (a completion's text)
    truncated: bool  # stopped by max_tokens


class TurnSampler:
    """Samples the turns of one rollout and records them in `self.seq`.

    `flags` is shared by every rollout of an environment: once one rollout sees the template rewrite
    history, later turns of all rollouts go straight to the token path, and once the server refuses
    automatic tool choice, tool calls are read from the reply text. `group`: the rollout's place in its
    group's shared first request (group_request.py); None: the first turn is a request of its own.
    """

    def __init__(self, client, model: str, sampling: dict[str, Any], flags: dict[str, Any],
                 tools: list[dict[str, Any]] | None = None, record_tokens: bool = True,
                 group: GroupMember | None = None):
        self.client = client
        self.model = model
        self.sampling = sampling
        self.flags = flags
        self.group = group
        self.tools = tools or None
        self.record_tokens = record_tokens
        self.seq = TokenSequence()  # stays empty in text mode
        self.mode = "chat" if record_tokens else "text"
        self.turns = 0  # model replies sampled so far
        self.ended_on_stop_token = True  # did the last reply end with an end-of-turn token?

    async def sample(self, messages: Messages, new_messages: Messages) -> ModelTurn:
        """Sample the next reply to `messages`; `new_messages` are the ones added since the last reply."""
        if self.turns and not new_messages:
            raise ValueError("env_response returned no messages; a turn needs a user or tool message to answer")
        turn = await self._sample(messages, new_messages)
        self.turns += 1
        return turn

    async def _sample(self, messages: Messages, new_messages: Messages) -> ModelTurn:
        if not self.record_tokens:
            resp = await (self._chat(messages) if self.turns else self._first_chat(messages))
            choice = resp.choices[0]
            return self._turn(self._message(choice), choice)
        if not self.turns:
            resp = await self._first_chat(messages)
            self.seq.prompt_ids = list(returned(resp, "prompt_token_ids"))
            return self._keep_chat(resp)
        if self.mode == "chat" and not self.flags.get("template_rewrites_history"):
            resp = await self._chat(messages)
            prompt = list(returned(resp, "prompt_token_ids"))
            seq = self.seq.ids
            if prompt[: len(seq)] == seq:
                self.seq.add_env(prompt[len(seq):])
                return self._keep_chat(resp)
            if not self.flags.get("template_rewrites_history"):  # said once, as the tool-call parser's line
                log.warning("chat template re-rendered earlier turns differently from the sampled tokens; "
                            "sending later turns as token ids")
            self.flags["template_rewrites_history"] = True
        self.mode = "tokens"
        return await self._token_turn(new_messages)

    # ---- chat path ----
    async def _first_chat(self, messages: Messages):
        return await first_request(self.group, self.sampling, (messages, self.tools), partial(self._chat, messages))

    async def _chat(self, messages: Messages, sampling: dict[str, Any] | None = None):
        kwargs = sampling_request(sampling or self.sampling, self.record_tokens)
        if self.tools:
            kwargs["tools"] = self.tools
            if self.flags.get("tool_choice") == "none":
                kwargs["tool_choice"] = "none"
        try:
            if self.record_tokens:
                return await post_chat(self.client, self.model, messages, kwargs)
            return await self.client.chat.completions.create(model=self.model, messages=messages, **kwargs)
        except Exception as e:
            if not (self.tools and "tool_choice" not in kwargs and "tool-call-parser" in str(e)):
                raise
            # vLLM started without --enable-auto-tool-choice: tools still reach the template, and
            # the calls are read from the reply text (parse_tool_calls)
            if self.flags.get("tool_choice") != "none":  # said once: the rollouts in flight all meet it
                log.warning("server has no tool-call parser; reading tool calls from the reply text")
            self.flags["tool_choice"] = "none"
            return await self._chat(messages, sampling)

    def _keep_chat(self, resp) -> ModelTurn:
        choice = resp.choices[0]
        logprobs = returned(returned(choice, "logprobs"), "content")
        self.seq.add_model(list(returned(choice, "token_ids")), [t.logprob for t in logprobs])
        return self._turn(self._message(choice), choice)

    @staticmethod
    def _message(choice) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": choice.message.content or ""}
        if tool_calls := getattr(choice.message, "tool_calls", None):
            message["tool_calls"] = [plain(tc) for tc in tool_calls]
        return message

    # ---- token path ----
    async def _token_turn(self, new_messages: Messages) -> ModelTurn:
        if not self.ended_on_stop_token:
            raise SequenceError("the model's reply did not end with an end-of-turn token (a stop string ended "
                                "it?); cannot place the environment's tokens after it")
        delta = await self._delta_ids(new_messages, last_token=self.seq.ids[-1])
        prompt = self.seq.ids + delta
        request = sampling_request(self.sampling)
        request["logprobs"] = 0  # completions: the sampled token's logprob only
        resp = await self.client.completions.create(model=self.model, prompt=prompt, **request)
        choice = resp.choices[0]
        self.seq.add_env(delta)
        logprobs = returned(returned(choice, "logprobs"), "token_logprobs")
        self.seq.add_model(list(returned(choice, "token_ids")), list(logprobs))
        return self._turn({"role": "assistant", "content": choice.text or ""}, choice)

    def _turn(self, message: dict[str, Any], choice) -> ModelTurn:
        # vLLM: stop_reason is None for EOS, a token id for stop_token_ids, the string for a stop string
        self.ended_on_stop_token = choice.finish_reason == "stop" and not isinstance(
            getattr(choice, "stop_reason", None), str)
        return ModelTurn(message, truncated=choice.finish_reason == "length")

    async def _tokenize(self, messages: Messages, add_generation_prompt: bool) -> list[int]:
        body: dict[str, Any] = {"model": self.model, "messages": messages,
                                "add_generation_prompt": add_generation_prompt}
        if self.tools:
            body["tools"] = self.tools
        return await tokenize(self.client, body)

    async def _delta_ids(self, new_messages: Messages, last_token: int) -> list[int]:
        """Tokens of `new_messages` + the generation prompt, as they follow a finished model reply.

        Renders anchor + new messages, and anchor + a different user message: both render the
        anchor the same way (neither has it last, which templates like Qwen3's treat specially),
        so they agree up to where the new messages begin. The delta starts right after the last
        end-of-turn token (the token the model's reply ended with) they share, so that what the
        template writes after it ("\n" in ChatML) belongs to the delta.
        """
        first = str(new_messages[0].get("content") or "")
        other = [{"role": "user", "content": "1" if first.startswith("0") else "0"}]
        after = await self._tokenize(_ANCHOR + new_messages, add_generation_prompt=True)
        probe = await self._tokenize(_ANCHOR + other, add_generation_prompt=True)
        shared = next((i for i, (x, y) in enumerate(zip(after, probe)) if x != y), min(len(after), len(probe)))
        if last_token not in after[:shared]:
            raise SequenceError(f"the chat template does not end turns with token {last_token}, the one the "
                                "model's reply ended with; cannot place the environment's tokens")
        cut = shared - after[:shared][::-1].index(last_token)
        return after[cut:]


class SequenceError(RuntimeError):
    """A turn's tokens cannot be joined to the sequence; the rollout ends there."""


class CompletionSampler:
    """Samples the turns of one `message_type="completion"` rollout through `/v1/completions` and records
    them in `self.seq`: the model continues text, no chat template is involved.

    - Turn 0 sends the prompt text. vLLM tokenizes it as its tokenizer does (special tokens written in the
      text read as those tokens; a BOS where the tokenizer adds one) and returns the ids it used
      (`prompt_token_ids`): they become `prompt_ids`, and the sampled ids with their logprobs open
      `completion_ids`. A group's first turns go out as one request with `n` (group_request.py).
    - Turn k > 0 sends token ids: the sequence so far, then the environment's new text as the server's
      `/tokenize` reads it alone (no special tokens added), which enter the sequence with mask 0. Sending
      the whole text again would have vLLM tokenize the model's replies afresh, and that need not give the
      ids it sampled (a reply sampled in pieces that make one token, a reply's last newline merging with
      the environment's first): the model would continue a sequence other than the one trained, and a prefix
      check like the chat path's would throw such samples away. With ids it continues exactly
      `prompt_ids + completion_ids`, at one /tokenize call a turn.

    A turn's text is vLLM's `text`: a stop string is left out of it, as vLLM returns it, while its tokens
    stay in the sequence the model goes on from, as sampled (`sequence_mode = "completion"`). Text mode
    (`record_tokens=False`): every turn sends the whole text so far as a plain completions request (the
    first turns of a group as one, as above). `group` as for `TurnSampler`.
    """

    def __init__(self, client, model: str, sampling: dict[str, Any], record_tokens: bool = True,
                 group: GroupMember | None = None):
        self.client = client
        self.model = model
        self.sampling = sampling
        self.record_tokens = record_tokens
        self.group = group
        self.seq = TokenSequence()  # stays empty in text mode
        self.mode = "completion" if record_tokens else "text"
        self.turns = 0  # model replies sampled so far

    async def sample(self, text: str, new_text: str) -> ModelTurn:
        """Sample the continuation of `text` (the prompt and the completion so far); `new_text` is the part
        the environment added since the last reply."""
        if not self.turns:
            resp = await first_request(self.group, self.sampling, text, partial(self._complete, text))
            if self.record_tokens:
                self.seq.prompt_ids = list(returned(resp.choices[0], "prompt_token_ids"))
        elif not self.record_tokens:
            resp = await self._complete(text, self.sampling)
        else:
            delta = await tokenize(self.client, {"model": self.model, "prompt": new_text,
                                                 "add_special_tokens": False}) if new_text else []
            resp = await self._complete(self.seq.ids + delta, self.sampling)
            self.seq.add_env(delta)
        choice = resp.choices[0]
        if self.record_tokens:
            logprobs = returned(returned(choice, "logprobs"), "token_logprobs")
            self.seq.add_model(list(returned(choice, "token_ids")), list(logprobs))
        self.turns += 1
        return ModelTurn(choice.text or "", truncated=choice.finish_reason == "length")

    async def _complete(self, prompt: str | list[int], sampling: dict[str, Any]):
        kwargs = sampling_request(sampling, self.record_tokens)
        if not self.record_tokens:  # any OpenAI-compatible server: its own client, no vLLM fields
            return await self.client.completions.create(model=self.model, prompt=prompt, **kwargs)
        kwargs["logprobs"] = 0  # completions: the sampled token's logprob only
        return await post_plain(self.client, "/completions", {"model": self.model, "prompt": prompt}, kwargs)


def parse_tool_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The OpenAI-style tool calls of an assistant message: the server's, else Hermes/Qwen
    `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks in its text.

    A block that is not valid JSON becomes a call named `invalid` whose arguments hold the text, so
    the tool env can report the mistake to the model.
    """
    if message.get("tool_calls"):
        return list(message["tool_calls"])
    calls = []
    for _, _, block, data in text_tool_calls.blocks(message.get("content") or ""):
        if data is text_tool_calls.UNCLOSED:
            break
        try:
            name, args = data["name"], data.get("arguments", {})
        except (KeyError, TypeError, AttributeError):  # not JSON (INVALID), not an object, no name
            name, args = "invalid", block
        calls.append({"id": f"call_{uuid.uuid4().hex[:8]}", "type": "function",
                      "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}})
    return calls
