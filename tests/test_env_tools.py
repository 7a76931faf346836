"""ToolEnv / StatefulToolEnv against the fake vLLM server: schemas, calls, errors, hidden arguments."""

import asyncio
import json
from typing import Literal

from fake_openai import FakeOpenAI, decode

import vfrl
from vfrl.envs.tools import tool_schema


def add(a: int, b: float = 1.0) -> float:
    """Add two numbers.

    Args:
        a: the first number
        b (float): the second number,
            one by default
    """
    return a + b


def fail(x: str) -> str:
    """Always fails."""
    raise RuntimeError(f"cannot handle {x}")


def call(name, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def run_tool_env(env, replies, **client_args):
    client = FakeOpenAI(replies, **client_args)
    r, state = asyncio.run(env.rollout_with_state(client, "m", env.dataset[0], 0, {"max_tokens": 300}))
    return r, state, client


def test_schema_from_signature_and_docstring():
    def pick(name: str, tags: list[str], mode: Literal["a", "b"] = "a", limit: int | None = None) -> str:
        """Pick something."""

    assert tool_schema(add) == {"type": "function", "function": {
        "name": "add", "description": "Add two numbers.",
        "parameters": {"type": "object", "required": ["a"], "properties": {
            "a": {"type": "integer", "description": "the first number"},
            "b": {"type": "number", "description": "the second number, one by default"},
        }}}}
    props = tool_schema(pick)["function"]["parameters"]["properties"]
    assert props == {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
                     "mode": {"enum": ["a", "b"]}, "limit": {"type": "integer"}}


def test_tool_calls_are_executed_and_returned_as_tool_messages():
    env = vfrl.ToolEnv(tools=[add], dataset=[{"question": "2+3?"}])
    r, state, client = run_tool_env(env, [call("add", a=2, b=3), "It is 5."])
    assistant, tool, final = r.completion
    assert tool["role"] == "tool" and tool["content"] == "5" and tool["tool_call_id"]
    assert final == {"role": "assistant", "content": "It is 5."}
    assert state["tool_calls"] == 1 and "tool_errors" not in state
    # the tools reached the server; this one has no tool parser, so calls were read from the text
    assert client.calls[0][1]["tools"] == [tool_schema(add)] and client.calls[-1][1]["tool_choice"] == "none"
    # the tool's output is an environment token span: no loss on it
    env_text = decode([t for t, m in zip(r.completion_ids, r.completion_mask) if m == 0])
    assert "<|im_start|>tool\n5<|im_end|>" in env_text
    assert all(m == 1 for a, b in r.turn_spans for m in r.completion_mask[a:b])


def test_tool_errors_are_reported_to_the_model_not_raised():
    env = vfrl.ToolEnv(tools=[add, fail], dataset=[{"question": "q"}])
    replies = [call("fail", x="it") + call("nope") + "<tool_call>{not json</tool_call>" + call("add", b=2), "done"]
    r, state, _ = run_tool_env(env, replies)
    contents = [m["content"] for m in r.completion if m["role"] == "tool"]
    assert contents[0] == "Error: RuntimeError: cannot handle it"
    assert contents[1].startswith("Error: LookupError: unknown tool 'nope'; available: add, fail")
    assert contents[2].startswith("Error: LookupError: unknown tool 'invalid'")
    assert contents[3].startswith("Error: TypeError:") and "'a'" in contents[3]
    assert state["tool_errors"] == 4 and r.completion[-1]["content"] == "done"


def test_server_parsed_tool_calls_are_used_and_turns_continue_as_token_ids():
    env = vfrl.ToolEnv(tools=[add], dataset=[{"question": "q"}])
    r, state, client = run_tool_env(env, ["sure " + call("add", a=1), "discarded", "2"],
                                   tool_parser=True)
    assert r.completion[0]["tool_calls"][0]["id"] == "srv0" and r.completion[1]["content"] == "2.0"
    assert client.calls[0][1]["tool_choice"] is None  # auto tool choice was accepted
    # ChatML renders only the stripped content of the tool-calling reply, so the prefix check fails
    # and the sequence keeps the tokens actually sampled, tool call text included
    assert r.sequence_mode == "tokens" and r.completion[-1]["content"] == "2"
    assert '<tool_call>{"name": "add"' in decode(r.completion_ids[slice(*r.turn_spans[0])])


def test_rollout_ends_when_the_model_stops_calling_tools_or_at_max_turns():
    env = vfrl.ToolEnv(tools=[add], dataset=[{"question": "q"}], max_turns=2)
    r, state, _ = run_tool_env(env, [call("add", a=1)] * 3)
    assert state["turn"] == 2 and state["tool_calls"] == 1


class Notes(vfrl.StatefulToolEnv):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.add_tool(self.write, args_to_skip=["notebook"])

    @staticmethod
    def write(text: str, notebook: list) -> str:
        """Write a note."""
        notebook.append(text)
        return f"{len(notebook)} notes"

    def setup_state(self, state):
        state["notebook"] = []
        return state

    def update_tool_args(self, tool_name, tool_args, messages, state):
        return {**tool_args, "notebook": state["notebook"]}


def test_stateful_tool_env_injects_hidden_arguments_from_state():
    env = Notes(dataset=[{"question": "q"}])
    assert env.oai_tools[0]["function"]["parameters"]["properties"] == {"text": {"type": "string"}}
    replies = [call("write", text="a"), call("write", text="b", notebook=["forged"]), "ok"]
    r, state, _ = run_tool_env(env, replies)
    assert state["notebook"] == ["a", "b"]  # the model's own `notebook` argument was dropped
    assert [m["content"] for m in r.completion if m["role"] == "tool"] == ["1 notes", "2 notes"]


def test_concurrent_rollouts_all_recover_when_the_server_refuses_auto_tool_choice():
    env = vfrl.ToolEnv(tools=[add], dataset=[{"question": "q"}])
    client = FakeOpenAI(lambda prompt: "no tools needed", delay=0.01)

    async def many():
        return await asyncio.gather(*(env.rollout(client, "m", env.dataset[0], 0, {}) for _ in range(4)))

    assert all(r.completion[-1]["content"] == "no tools needed" for r in asyncio.run(many()))
    assert env.sampler_flags["tool_choice"] == "none"
