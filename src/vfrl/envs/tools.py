"""ToolEnv: python functions become OpenAI tools; the model calls them, the env runs them.

The JSON schema of a tool comes from its signature (types, defaults) and docstring (first paragraph
= description, `Args:` lines = parameter descriptions). Each call's result goes back as a `tool`
message; a tool that raises, an unknown tool or arguments that are not JSON are reported to the
model in that message, never raised. The rollout ends when the model replies without a tool call.

Functions that run code must isolate it themselves (a subprocess with time and memory limits):
tools run in the trainer's process.

`StatefulToolEnv` hides some arguments from the model and fills them per call from the rollout's
state in `update_tool_args` (a sandbox id, a session, the example's data).
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from typing import Any, Callable, Literal

from vfrl.daemon_pool import DaemonPool
from vfrl.envs.environment import Messages
from vfrl.envs.multiturn import MultiTurnEnv
from vfrl.envs.sampling import parse_tool_calls

# not asyncio.to_thread: a tool that hangs would hold one of the default executor's few threads for good,
# other to_thread calls wait on the same threads, and the rollout time limit abandons it
SYNC_TOOLS = DaemonPool("tool", size=16)
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array"}


def json_type(annotation: Any) -> dict[str, Any]:
    """JSON schema of a python annotation: `int` -> integer, `list[str]` -> array of string, ..."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        return json_type(options[0]) if len(options) == 1 else {"anyOf": [json_type(a) for a in options]}
    if origin in (list, tuple, set):
        return {"type": "array", **({"items": json_type(args[0])} if args else {})}
    if origin is dict:
        return {"type": "object"}
    return {"type": _JSON_TYPES[annotation]} if annotation in _JSON_TYPES else {}


def docstring_parts(func: Callable) -> tuple[str, dict[str, str]]:
    """(description, {param: description}) from a Google-style docstring."""
    doc = inspect.getdoc(func) or ""
    description = doc.split("\n\n")[0].replace("\n", " ").strip()
    params: dict[str, str] = {}
    section = re.search(r"^(?:Args|Arguments|Parameters):\s*\n(.*?)(?:\n\s*\n|\Z)", doc, flags=re.S | re.M)
    if section:
        name = None
        for line in section.group(1).splitlines():
            if m := re.match(r"^\s*(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", line):
                name = m.group(1)
                params[name] = m.group(2).strip()
            elif name and line.strip():
                params[name] += " " + line.strip()
    return description, params


def tool_schema(func: Callable, skip: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """The OpenAI `tools` entry of a function; parameters named in `skip` are hidden from the model."""
    description, docs = docstring_parts(func)
    hints = typing.get_type_hints(func)
    properties, required = {}, []
    for name, p in inspect.signature(func).parameters.items():
        if name in skip or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        prop = json_type(hints.get(name, p.annotation))
        if name in docs:
            prop["description"] = docs[name]
        properties[name] = prop
        if p.default is p.empty:
            required.append(name)
    return {"type": "function", "function": {
        "name": func.__name__, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required},
    }}


class ToolEnv(MultiTurnEnv):
    def __init__(self, tools: list[Callable] | None = None, max_turns: int = 10, **kwargs):
        super().__init__(max_turns=max_turns, **kwargs)
        if self.message_type == "completion":  # as verifiers: tools travel in chat requests only
            raise ValueError(f"{type(self).__name__}: tools need chat messages; message_type='completion' has none")
        self.tools: list[Callable] = []
        self.oai_tools: list[dict[str, Any]] = []
        self.tool_map: dict[str, Callable] = {}
        self.skipped_args: dict[str, list[str]] = {}
        for tool in tools or []:
            self.add_tool(tool)

    def add_tool(self, tool: Callable, args_to_skip: list[str] | None = None) -> None:
        self.tools.append(tool)
        self.skipped_args[tool.__name__] = list(args_to_skip or [])
        self.oai_tools.append(tool_schema(tool, skip=self.skipped_args[tool.__name__]))
        self.tool_map[tool.__name__] = tool

    def tools_for_request(self) -> list[dict[str, Any]] | None:
        return self.oai_tools or None

    def is_completed(self, messages: Messages, state: dict[str, Any]) -> bool:
        last = messages[-1] if messages else {}
        return last.get("role") == "assistant" and not parse_tool_calls(last)

    def update_tool_args(self, tool_name: str, tool_args: dict[str, Any], messages: Messages,
                         state: dict[str, Any]) -> dict[str, Any]:
        return tool_args

    async def call_tool(self, tool_name: str, tool_args: dict[str, Any]) -> str:
        tool = self.tool_map[tool_name]
        if inspect.iscoroutinefunction(tool):
            result = tool(**tool_args)
        else:
            result = await SYNC_TOOLS.run(lambda: tool(**tool_args))
        if inspect.isawaitable(result):
            result = await result
        return result if isinstance(result, str) else json.dumps(result, default=str)

    async def env_response(self, messages: Messages, state: dict[str, Any]) -> Messages:
        replies = []
        for call in parse_tool_calls(messages[-1]):
            name, raw_args = call["function"]["name"], call["function"]["arguments"]
            try:
                if name not in self.tool_map:
                    raise LookupError(f"unknown tool {name!r}; available: {', '.join(self.tool_map)}")
                args = json.loads(raw_args) if isinstance(raw_args, str) else dict(raw_args or {})
                if not isinstance(args, dict):
                    raise TypeError("tool arguments must be a JSON object")
                hidden = self.skipped_args[name]
                args = {k: v for k, v in args.items() if k not in hidden}  # the model may not set them
                args = self.update_tool_args(name, args, messages, state)
                content = await self.call_tool(name, args)
            except Exception as e:  # the model's mistake (or the tool's) is the model's to read
                content = f"Error: {type(e).__name__}: {e}"
                state["tool_errors"] = state.get("tool_errors", 0) + 1
            state["tool_calls"] = state.get("tool_calls", 0) + 1
            replies.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": content})
        return replies


class StatefulToolEnv(ToolEnv):
    """Tools with hidden arguments: add them with `add_tool(func, args_to_skip=[...])` and fill them in
    `update_tool_args(tool_name, tool_args, messages, state)`."""

    def update_tool_args(self, tool_name: str, tool_args: dict[str, Any], messages: Messages,
                         state: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__} must implement update_tool_args to fill hidden arguments")
