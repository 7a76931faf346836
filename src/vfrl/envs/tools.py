"""ToolEnv: python functions become OpenAI tools; the model calls them, the env runs them.

The JSON schema of a tool comes from its signature and docstring (tool_defs.py). Each call's result
goes back as a `tool` message; a tool that raises, an unknown tool or arguments that are not JSON are
reported to the model in that message, never raised. The rollout ends when the model replies without a tool call.

Tools run in the trainer's process; one that runs code the model wrote runs it in vfrl's local sandbox
(`vfrl.sandbox.run`, as `vfrl.tools.python` does: no network, nothing of the user's, limits, every process ended).

`StatefulToolEnv` hides some arguments from the model and fills them per call from the rollout's
state in `update_tool_args` (a sandbox id, a session, the example's data).

A ToolEnv's functions are also its `tool_defs` (tool_defs.py), which the rollout sends (multiturn.py).
"""

from __future__ import annotations

import inspect
import json
from typing import Any, Callable

from vfrl.daemon_pool import DaemonPool
from vfrl.rollout_types import Messages
from vfrl.envs.hook_results import Returned, Verdict, maybe_await, messages_and_state, positional_params
from vfrl.envs.messages import Message, content_text, message_field
from vfrl.envs.multiturn import MultiTurnEnv
from vfrl.envs.sampling import parse_tool_calls
from vfrl.envs.tool_defs import Tool, convert_func_to_tool_def, tool_schema  # noqa: F401 - classic import path

# not asyncio.to_thread: a tool that hangs would hold one of the default executor's few threads for good,
# other to_thread calls wait on the same threads, and the rollout time limit abandons it
SYNC_TOOLS = DaemonPool("tool", size=16)


class ToolEnv(MultiTurnEnv):
    def __init__(self, tools: list[Callable] | None = None, max_turns: int = 10, **kwargs):
        super().__init__(max_turns=max_turns, **kwargs)
        if self.message_type == "completion":  # as verifiers: tools travel in chat requests only
            raise ValueError(f"{type(self).__name__}: tools need chat messages; message_type='completion' has none")
        self.tools: list[Callable] = []
        self.tool_defs = list(self.tool_defs or [])  # with any given as `tool_defs`, its functions' (add_tool)
        self.tool_map: dict[str, Callable] = {}
        self.skipped_args: dict[str, list[str]] = {}
        for tool in tools or []:
            self.add_tool(tool)

    def add_tool(self, tool: Callable, args_to_skip: list[str] | None = None) -> None:
        self.tools.append(tool)
        self.skipped_args[tool.__name__] = list(args_to_skip or [])
        self.tool_defs.append(Tool.of(tool_schema(tool, skip=self.skipped_args[tool.__name__])))
        self.tool_map[tool.__name__] = tool

    def remove_tool(self, tool: Callable) -> None:
        """Take a tool away from the model (a package may keep calling it itself, as SandboxEnv's bash)."""
        name = tool.__name__
        self.tools = [t for t in self.tools if t.__name__ != name]
        self.tool_defs = [t for t in self.tool_defs if Tool.of(t).name != name]
        self.tool_map.pop(name, None)
        self.skipped_args.pop(name, None)

    @property
    def oai_tools(self) -> list[dict[str, Any]]:
        """The `tool_defs` as OpenAI `tools` entries (the older name, which packages still read and set)."""
        return [Tool.of(t).openai() for t in self.tool_defs]

    @oai_tools.setter
    def oai_tools(self, schemas: list[dict[str, Any]] | None) -> None:
        self.tool_defs = [Tool.of(s) for s in schemas or []]

    def is_completed(self, *args: Any, **kwargs: Any) -> Verdict:
        """`(messages, state)` or `(state)`: did the model's last reply call no tool?"""
        messages, state = messages_and_state(args, kwargs)
        conversation = messages if messages is not None else state.get("completion")
        last = Message.of(conversation[-1]) if conversation else Message()
        return Verdict(last.get("role") == "assistant" and not parse_tool_calls(last))

    def update_tool_args(self, tool_name: str, tool_args: dict[str, Any], messages: Messages,
                         state: dict[str, Any], **kwargs: Any) -> Returned:
        return Returned(tool_args)

    async def call_tool(self, tool_name: str, tool_args: dict[str, Any], tool_call_id: str = "",
                        **kwargs: Any) -> Message:
        """Run the tool; its result as the tool message (verifiers' signature and return, which packages that
        override it call and read: `msg = await super().call_tool(name, args, tool_call_id, **kwargs)`)."""
        tool = self.tool_map[tool_name]
        if inspect.iscoroutinefunction(tool):
            result = tool(**tool_args)
        else:
            result = await SYNC_TOOLS.run(lambda: tool(**tool_args))
        if inspect.isawaitable(result):
            result = await result
        content = result if isinstance(result, str) else json.dumps(result, default=str)
        return Message({"role": "tool", "content": content, "tool_call_id": tool_call_id})

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
                args = await maybe_await(self.update_tool_args(name, args, messages, state))
                # a package's override may take verifiers' tool_call_id or not, and return a message or its text
                asked = (name, args, call.get("id", ""))[:3 if positional_params(self.call_tool) >= 3 else 2]
                result = await maybe_await(self.call_tool(*asked))
                content = result if isinstance(result, str) else content_text(message_field(result, "content"))
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
