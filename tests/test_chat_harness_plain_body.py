"""The in-process chat program's request bodies skip openai's transform only where it would change nothing: for
every generated message shape (tests/test_message_shapes.py) with tools and sampling values given or not, the
body sent is the one openai's own transform gives."""

import asyncio
import datetime
import json
import random
from typing import Annotated

import pytest
from typing_extensions import TypedDict

pytest.importorskip("verifiers.v1", reason="verifiers 0.4 is not installed (pip install -e '.[verifiers]')")

from openai import omit  # noqa: E402
from openai._utils import _transform  # noqa: E402
from openai._utils._transform import PropertyInfo  # noqa: E402
from openai.types.chat import completion_create_params as params  # noqa: E402
from test_message_shapes import SHAPES, random_text  # noqa: E402

from vfrl_chat_harness import RUN, ProgramRun, plain_body  # noqa: E402

TOOL = {"type": "function", "function": {"name": "add", "description": "a + b", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}


def body_of(messages: list, rng: random.Random) -> dict:
    """A chat completion's body as openai's `create` hands it to the transform: every parameter, most not given."""
    maybe = lambda value: value if rng.random() < 0.5 else omit  # noqa: E731
    return {"messages": messages, "model": "m", "stream": True, "stream_options": {"include_usage": True},
            "tools": maybe([TOOL]), "tool_choice": maybe("auto"), "temperature": maybe(0.7), "top_p": maybe(1),
            "max_tokens": maybe(12), "stop": maybe(["\n", random_text(rng)]), "seed": maybe(3), "n": maybe(2),
            "logprobs": maybe(True), "metadata": maybe({"k": random_text(rng)}), "user": omit, "audio": omit,
            "response_format": maybe({"type": "json_schema", "json_schema": {"name": "s", "schema": {}}})}


def both(body: dict, expected_type=params.CompletionCreateParamsStreaming, in_a_run: bool = True):
    """(what the chat program's requests send, what openai's own transform gives, did the transform run)"""
    module = type("chat_completions", (), {})
    calls = []

    async def openai_transform(data, t):
        calls.append(t)
        return await _transform.async_maybe_transform(data, t)

    module.async_maybe_transform = staticmethod(openai_transform)
    plain_body.install(module, RUN)

    async def sent():
        token = RUN.set(ProgramRun([])) if in_a_run else None
        try:
            return await module.async_maybe_transform(body, expected_type)
        finally:
            if token is not None:
                RUN.reset(token)

    got = asyncio.run(sent())
    ran = bool(calls)
    return got, asyncio.run(_transform.async_maybe_transform(body, expected_type)), ran


def test_every_message_shape_is_sent_as_openais_transform_sends_it():
    rng = random.Random(0)
    skipped = 0
    for shape in SHAPES:
        body = body_of([{"role": "system", "content": "Reverse the text."}, shape.message], rng)
        got, want, ran = both(body)
        assert json.dumps(got, sort_keys=True, default=repr) == json.dumps(want, sort_keys=True, default=repr), \
            shape.label
        plain = shape.label.endswith("/dict")
        assert ran is not plain, shape.label  # plain JSON skips the walk; a pydantic or object message takes it
        skipped += plain
    assert skipped >= 100


def test_what_is_not_plain_json_or_not_in_a_run_takes_openais_transform():
    rng = random.Random(1)
    messages = [{"role": "user", "content": "hi"}]
    for body in [body_of(tuple(messages), rng),  # openai makes a list of any iterable
                 body_of(messages, rng) | {"metadata": {"when": datetime.date(2026, 1, 1)}},
                 body_of([{"role": "user", "content": "hi", 3: "not a string key"}], rng)]:
        got, want, ran = both(body)
        assert ran and repr(got) == repr(want)
    got, want, ran = both(body_of(messages, rng), in_a_run=False)
    assert ran and got == want


class Renamed(TypedDict, total=False):
    card_id: Annotated[str, PropertyInfo(alias="cardID")]
    items: list["Renamed"]


def test_a_type_that_renames_or_formats_a_field_takes_openais_transform():
    assert plain_body.marks_nothing(params.CompletionCreateParamsStreaming)
    assert not plain_body.marks_nothing(Renamed)
    got, want, ran = both({"items": [{"card_id": "x"}], "skip": omit}, Renamed)
    assert ran and got == want == {"items": [{"cardID": "x"}]}
