"""Every overridable hook of verifiers' classic API, in every shape the community's packages write it, runs a rollout.

verifiers' hooks were plain methods in its early releases and coroutines later, and packages of both ages live on
the hub side by side: `state = super().setup_state(state)` in a `def`, `state = await super().setup_state(state,
**kwargs)` in an `async def` (20 of prime-environments' 109 packages), `if self.max_turns_reached(state):` in a sync
stop condition. The shapes are generated: each hook x each environment class that has it x {sync, async} x
{replaces the base hook, calls it: with `await`, without}. Each shape is written as a package's source file (`import
verifiers as vf`), loaded by vfrl's loader as vf-train loads it, and rolled out: with the fake server here, and with
the real vLLM below (tests marked e2e)."""

from __future__ import annotations

import asyncio
import itertools
import json
import textwrap
from dataclasses import dataclass

import pytest
from fake_openai import FakeOpenAI

import vfrl as vf

# How a package's method is written: its `def` and how it reaches the base hook (None: it does not).
SHAPES = {
    "sync_replaces": ("def", None),
    "async_replaces": ("async def", None),
    "sync_calls_base": ("def", "{call}"),  # as written for verifiers' early releases, whose hooks were plain
    "async_awaits_base": ("async def", "await {call}"),  # as written for its later ones, whose hooks are coroutines
    "async_calls_base_without_await": ("async def", "{call}"),
}
REPLACES = ("sync_replaces", "async_replaces")


@dataclass(frozen=True)
class Hook:
    """A hook as a package overrides it: `method` with `signature`, its body when it calls the base (`{base}`: the
    base hook's result, read as the shape reads it) and when it does not, the classes that have it. `name` tells
    apart the ways one method is written (verifiers changed `is_completed(messages, state)` to `(state)` and gave
    `call_tool` a `tool_call_id` and a message to return). `genuinely_async`: the base does real waiting (runs
    tools), so only an awaiting call can read it, in verifiers as here."""

    name: str
    method: str
    signature: str
    calls_base: str
    replaces: str
    classes: tuple[str, ...]
    base_call: str = ""
    genuinely_async: bool = False
    decorator: str = ""


TALKS = ("MultiTurnEnv", "ToolEnv", "StatefulToolEnv")  # classes whose rollouts here run two model turns
TOOLS = ("ToolEnv", "StatefulToolEnv")
# hooks that end a MultiTurnEnv's rollout after two replies themselves: its max_turns is 5 then, else 2
ENDS = ("is_completed", "is_completed_of_state", "max_turns_reached", "stop_condition")
HOOKS = [
    Hook("setup_state", "setup_state", "(self, state, **kwargs)",
         calls_base="state = {base}\n    state['hooked'] = 'setup_state'\n    return state",
         replaces="state['hooked'] = 'setup_state'\n    return state",
         base_call="super().setup_state(state, **kwargs)", classes=("SingleTurnEnv", *TALKS)),
    Hook("setup_state_in_place", "setup_state", "(self, state)",  # changes the state, returns nothing
         calls_base="{base}\n    state['hooked'] = 'setup_state'", replaces="state['hooked'] = 'setup_state'",
         base_call="super().setup_state(state)", classes=("MultiTurnEnv",)),
    # the package's own end: after two replies (the env's max_turns is 5)
    Hook("is_completed", "is_completed", "(self, messages, state, **kwargs)",
         calls_base="done = {base}\n    return bool(done) or state['turn'] >= 2",
         replaces="return state['turn'] >= 2",
         base_call="super().is_completed(messages, state, **kwargs)", classes=("MultiTurnEnv",)),
    Hook("is_completed_of_state", "is_completed", "(self, state, **kwargs)",  # verifiers 0.2+
         calls_base="done = {base}\n    return bool(done) or state['turn'] >= 2",
         replaces="return state['turn'] >= 2",
         base_call="super().is_completed(state, **kwargs)", classes=("MultiTurnEnv",)),
    Hook("is_completed_of_tools", "is_completed", "(self, state)",  # a ToolEnv's: the base's "no tool call", counted
         calls_base="done = {base}\n    state['asked'] = state.get('asked', 0) + 1\n    return done",
         replaces="state['asked'] = state.get('asked', 0) + 1\n    if not state['completion']:\n"
                  "        return False\n    last = state['completion'][-1]\n"
                  "    called = last.get('tool_calls') or '<tool_call>' in (last.get('content') or '')\n"
                  "    return last['role'] == 'assistant' and not called",
         base_call="super().is_completed(state)", classes=TOOLS),
    Hook("max_turns_reached", "max_turns_reached", "(self, state)",  # a package's own limit: two replies
         calls_base="return ({base}) or state['turn'] >= 2",
         replaces="return state['turn'] >= 2",
         base_call="super().max_turns_reached(state)", classes=("MultiTurnEnv",)),
    Hook("stop_condition", "two_replies", "(self, state)",  # a @vf.stop of its own that asks a built-in one first
         calls_base="if {base}:\n        return True\n    return state['turn'] >= 2",
         replaces="return state['turn'] >= 2",
         base_call="self.has_error(state)", classes=("MultiTurnEnv",), decorator="@vf.stop"),
    Hook("env_response", "env_response", "(self, messages, state, **kwargs)",  # its base has nothing to give
         calls_base="",
         replaces="state['hooked'] = 'env_response'\n    return [{{'role': 'user', 'content': 'go on'}}]",
         classes=("MultiTurnEnv",)),
    Hook("env_response_of_tools", "env_response", "(self, messages, state, **kwargs)",  # the base runs the tools
         calls_base="out = {base}\n    state['hooked'] = 'env_response'\n    return out",
         replaces="state['hooked'] = 'env_response'\n"
                  "    return [{{'role': 'tool', 'content': '5 s3cret', 'tool_call_id': 'c0'}}]",
         base_call="super().env_response(messages, state, **kwargs)", classes=TOOLS, genuinely_async=True),
    Hook("update_tool_args", "update_tool_args", "(self, tool_name, tool_args, messages, state, **kwargs)",
         calls_base="args = dict({base})\n    args['secret'] = state['info']['secret']\n    return args",
         replaces="return {{**tool_args, 'secret': state['info']['secret']}}",
         base_call="super().update_tool_args(tool_name, tool_args, messages, state, **kwargs)",
         classes=("ToolEnv",)),
    Hook("call_tool", "call_tool", "(self, tool_name, tool_args, **kwargs)",  # vfrl's own shape: text back
         calls_base="out = {base}\n    return out.content + ' (checked)'",
         replaces="return f\"{{tool_args['a'] + tool_args['b']}} {{tool_args['secret']}} (checked)\"",
         base_call="super().call_tool(tool_name, tool_args, **kwargs)", classes=TOOLS, genuinely_async=True),
    Hook("call_tool_of_verifiers", "call_tool", "(self, tool_name, tool_args, tool_call_id, **kwargs)",
         calls_base="msg = {base}\n    msg.content = msg.content + ' (checked)'\n    return msg",
         replaces="return vf.ToolMessage(content=f\"{{tool_args['a'] + tool_args['b']}} {{tool_args['secret']}} "
                  "(checked)\", tool_call_id=tool_call_id)",
         base_call="super().call_tool(tool_name, tool_args, tool_call_id, **kwargs)", classes=TOOLS,
         genuinely_async=True),
    Hook("cleanup", "on_end", "(self, state)", calls_base="", replaces="state['hooked'] = 'cleanup'",
         classes=("MultiTurnEnv", "ToolEnv"), decorator="@vf.cleanup"),
    Hook("teardown", "close_once", "(self)", calls_base="", replaces="CLOSED.append(id(self))",
         classes=("MultiTurnEnv",), decorator="@vf.teardown"),
]


@dataclass(frozen=True)
class Case:
    hook: Hook
    cls: str
    shape: str

    @property
    def id(self) -> str:
        return f"{self.cls}-{self.hook.name}-{self.shape}"

    @property
    def cls_name(self) -> str:
        return self.id.replace("-", "_")


def cases() -> list[Case]:
    out = []
    for hook, shape in itertools.product(HOOKS, SHAPES):
        calls = SHAPES[shape][1] is not None
        if calls and not hook.calls_base:
            continue  # a decorated method of the package's own: nothing to call
        if hook.genuinely_async and calls and shape != "async_awaits_base":
            continue  # its base waits on tools: only `await` reads it, in verifiers too
        out += [Case(hook, cls, shape) for cls in hook.classes]
    return out


def method_source(case: Case) -> str:
    d, how = SHAPES[case.shape]
    hook = case.hook
    body = hook.replaces.format() if how is None else hook.calls_base.format(base=how.format(call=hook.base_call))
    head = f"{hook.decorator}\n" if hook.decorator else ""
    return head + f"{d} {hook.method}{hook.signature}:\n    {body}\n"


def class_source(case: Case) -> str:
    """The case's environment class, as a hub package writes one: it overrides the hook in the case's shape; the
    rest is what it needs to talk (a MultiTurnEnv's user turn, a ToolEnv's hidden `secret` filled in)."""
    cls = case.cls
    talk = "" if cls != "MultiTurnEnv" or case.hook.name == "env_response" else (
        "async def env_response(self, messages, state, **kwargs):\n"
        "    return [{'role': 'user', 'content': 'go on'}]\n")
    fills = "" if cls not in TOOLS or case.hook.name == "update_tool_args" else (
        "def update_tool_args(self, tool_name, tool_args, messages, state, **kwargs):\n"
        "    return {**tool_args, 'secret': state['info']['secret']}\n")
    turns = 5 if cls in TOOLS or case.hook.name in ENDS else 1 if cls == "SingleTurnEnv" else 2
    return (f"class {case.cls_name}(vf.{cls}):\n    MAX_TURNS = {turns}\n\n"
            + textwrap.indent(method_source(case) + talk + fills, "    ") + "\n\n")


PACKAGE = "hook_shapes_pkg"


def package_source(made: list[Case]) -> str:
    """One package with every case's class; `load_environment(case=...)` builds that case's environment."""
    return f'''"""Every hook shape of tests/test_hook_shapes.py, a class each: generated as a hub package is written."""
import verifiers as vf

CLOSED = []  # the environments (id()) whose @vf.teardown ran


def add(a: int, b: int, secret: str = "") -> str:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return f"{{a + b}} {{secret}}".strip()


{"".join(class_source(c) for c in made)}
def load_environment(case: str):
    cls = globals()[case]
    tools = issubclass(cls, vf.ToolEnv)
    rows = [{{"question": "add 2 3" if tools else "say hi", "answer": "5", "info": {{"secret": "s3cret"}}}}]
    env = cls(dataset=rows, rubric=vf.Rubric(funcs=[lambda completion: 1.0]), max_turns=cls.MAX_TURNS)
    if tools:
        env.add_tool(add, args_to_skip=["secret"])
    return env
'''


@pytest.fixture(scope="module")
def hook_package(tmp_path_factory):
    """The generated package, importable (as vf-train imports an environment: by vfrl's loader, its verifiers
    imports read as vfrl's)."""
    import sys

    folder = tmp_path_factory.mktemp("hook-shapes")
    (folder / f"{PACKAGE}.py").write_text(package_source(cases()))
    sys.path.insert(0, str(folder))
    yield
    sys.path.remove(str(folder))


def tool_call(a: int, b: int) -> str:
    return "<tool_call>" + json.dumps({"name": "add", "arguments": {"a": a, "b": b}}) + "</tool_call>"


def load(case: Case):
    return vf.load_environment(PACKAGE, case=case.cls_name)


async def rollout_of(env, client, model: str = "m", max_tokens: int = 300):
    """One scored rollout and its state, as the trainer makes them (greedy: the tiny models' likeliest replies)."""
    try:
        r, state = await env.rollout_with_state(client, model, env.dataset[0], 0,
                                                {"max_tokens": max_tokens, "temperature": 0.0})
        state["env_id"] = id(env)  # which environment's teardown to look for (assert_hook_ran)
        return await env.score(r, state), state
    finally:
        await env.aclose()


def roll(env, client, **kwargs):
    return asyncio.run(rollout_of(env, client, **kwargs))


def served_rollouts(made: list[Case], server, max_tokens: int) -> list:
    """A rollout of each case's environment on the real server, all at once (as a batch is sampled)."""
    from openai import AsyncOpenAI

    async def all_of():
        client = AsyncOpenAI(base_url=server.base_url, api_key=server.api_key)
        try:
            return await asyncio.gather(*(rollout_of(load(c), client, server.model, max_tokens) for c in made))
        finally:
            await client.close()

    return asyncio.run(all_of())


def assert_hook_ran(case: Case, r, state, exact: bool = True) -> None:
    """What the rollout shows when the package's method ran as it is written, and the base hook's part with it.
    `exact`: the model's replies are scripted (the fake server), so the number of turns is known too."""
    hook, talks = case.hook.name, case.cls != "SingleTurnEnv"
    replies = [m for m in r.completion if m["role"] == "assistant"]
    assert r.reward == 1.0 and not r.reward_errors and r.error is None, (r.error, r.reward_errors)
    if case.cls in TOOLS:
        tools = [m["content"] for m in r.completion if m["role"] == "tool"]
        checked = " (checked)" if hook.startswith("call_tool") else ""
        # the model called add, the tool answered with the hidden argument filled, the model's answer ended it
        assert tools[:1] == [f"5 s3cret{checked}"] and (len(replies) == 2 or not exact), r.completion
    elif talks:
        assert len(replies) == 2, r.completion  # ended by the package's own rule (max_turns 5), or by max_turns 2
    if hook in ("setup_state", "setup_state_in_place", "env_response", "env_response_of_tools", "cleanup"):
        assert state["hooked"] == {"setup_state_in_place": "setup_state", "env_response_of_tools": "env_response"
                                   }.get(hook, hook)
    if hook == "is_completed_of_tools":
        assert state["asked"] >= 2
    if hook == "teardown":
        import sys

        assert sys.modules[PACKAGE].CLOSED.count(state["env_id"]) == 1


def test_the_cases_cover_every_hook_class_and_shape():
    made = cases()
    assert {c.hook.name for c in made} == {h.name for h in HOOKS}
    assert {c.shape for c in made} == set(SHAPES)
    for hook in HOOKS:
        shapes = {c.shape for c in made if c.hook is hook}
        assert set(REPLACES) <= shapes
        if hook.calls_base:
            assert "async_awaits_base" in shapes and (hook.genuinely_async or len(shapes) == len(SHAPES))
    assert len(made) > 40


@pytest.mark.parametrize("case", cases(), ids=lambda c: c.id)
def test_every_hook_shape_runs_a_rollout(case, hook_package):
    env = load(case)
    if case.cls in TOOLS:
        client = FakeOpenAI([tool_call(2, 3), "5"])
    else:
        client = FakeOpenAI(lambda prompt: "hi")
    r, state = roll(env, client)
    assert_hook_ran(case, r, state)


def test_a_base_hook_reads_the_same_with_and_without_await():
    from vfrl.envs.hook_results import Returned, State, Verdict

    env = vf.MultiTurnEnv(dataset=[{"question": "q"}], max_turns=2)
    state = State({"trajectory": [1, 2], "x": 1})

    async def awaited():
        return (await env.setup_state(state), await env.max_turns_reached(state), await env.has_error(state),
                await vf.ToolEnv(dataset=[{"question": "q"}]).update_tool_args("t", {"a": 1}, [], state))

    got, reached, error, args = asyncio.run(awaited())
    assert got is state and reached is True and error is False and args == {"a": 1} and type(args) is dict
    assert env.setup_state(state) is state and env.max_turns_reached(state) and not env.has_error(state)
    assert env.max_turns_reached(state) == True and repr(env.has_error(state)) == "False"  # noqa: E712
    assert isinstance(env.is_completed([], state), Verdict) and isinstance(env.setup_state({}), State)
    assert json.dumps([state, Verdict(1)]) == '[{"trajectory": [1, 2], "x": 1}, 1]'
    assert isinstance(vf.ToolEnv(dataset=[{"question": "q"}]).update_tool_args("t", {}, [], state), Returned)


# ---- the same shapes with the real vLLM ----

@pytest.mark.e2e
def test_every_chat_hook_shape_runs_with_the_real_vllm(hook_package, shared_vllm_server):
    """The MultiTurnEnv and SingleTurnEnv shapes, each a rollout of the tiny model through the session's vf-vllm:
    the conversation, token ids and logprobs are vLLM's."""
    made = [c for c in cases() if c.cls in ("MultiTurnEnv", "SingleTurnEnv")]
    for case, (r, state) in zip(made, served_rollouts(made, shared_vllm_server, max_tokens=48)):
        assert len(r.completion_logprobs) == len(r.completion_ids) > 0, case.id
        assert_hook_ran(case, r, state)


@pytest.mark.e2e
def test_every_tool_hook_shape_runs_with_the_real_vllm(hook_package, tool_server):
    """The ToolEnv and StatefulToolEnv shapes with the tiny tool-calling model (tests/tool_model.py) through the
    tool tests' vf-vllm, whose Hermes parser reads its call: each calls `add`, the package's hooks fill, run and
    read it, and the model's second reply ends the rollout."""
    made = [c for c in cases() if c.cls in TOOLS]
    for case, (r, state) in zip(made, served_rollouts(made, tool_server, max_tokens=64)):
        assert r.completion_ids and r.completion_logprobs, case.id
        assert_hook_ran(case, r, state, exact=False)
