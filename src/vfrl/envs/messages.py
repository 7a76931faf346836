"""Chat messages that read both ways: `m["role"]` and `m.role`.

Environment packages written for verifiers' classic API use both forms, because its messages are
objects that also allow `m["role"]` (`completion[-1].tool_calls`, `call.name`, next to
`m["content"]`). Ours stay plain dicts underneath (a `dict` subclass), so rollouts still save as
JSON, compare equal to dicts and go to the server unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# the fields verifiers' message types declare: reading one that a message lacks gives None, as there
FIELDS = ("role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content")


class Message(dict):
    """A chat message dict whose keys are also attributes; `tool_calls` items are `ToolCall`s."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if self.get("tool_calls"):
            self["tool_calls"] = [ToolCall(tc) for tc in self["tool_calls"]]

    def __getattr__(self, name: str) -> Any:
        if name in self:
            return self[name]
        if name in FIELDS:
            return None
        raise AttributeError(f"message has no field {name!r} (fields: {', '.join(self)})")

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    @classmethod
    def of(cls, message: Any) -> "Message":
        """A Message from a dict, a Message or an object with `model_dump()` (a pydantic message)."""
        if isinstance(message, cls):
            return message
        if hasattr(message, "model_dump"):
            message = message.model_dump(exclude_none=True)
        return cls(message)


class ToolCall(dict):
    """An OpenAI tool call (`{"id", "type", "function": {"name", "arguments"}}`) that also reads as
    verifiers' flat one: `call.name`, `call.arguments`, `call.id`."""

    def __getattr__(self, name: str) -> Any:
        if name in ("name", "arguments") and name not in self:
            return (self.get("function") or {}).get(name)
        if name in self:
            return self[name]
        raise AttributeError(f"tool call has no field {name!r}")


Messages = list[Message]
State = dict[str, Any]  # one rollout's state is a plain dict (verifiers' is a dict subclass)


def messages(items: Any) -> list[Message]:
    return [Message.of(m) for m in items]


def SystemMessage(content: Any, **fields: Any) -> Message:  # noqa: N802 - verifiers' class name
    return Message(role="system", content=content, **fields)


def UserMessage(content: Any, **fields: Any) -> Message:  # noqa: N802
    return Message(role="user", content=content, **fields)


def AssistantMessage(content: Any = None, **fields: Any) -> Message:  # noqa: N802
    return Message(role="assistant", content=content, **fields)


def ToolMessage(content: Any, tool_call_id: str, **fields: Any) -> Message:  # noqa: N802
    return Message(role="tool", content=content, tool_call_id=tool_call_id, **fields)


# verifiers reads a system prompt from a file with `SystemMessage.from_path(path).content`
SystemMessage.from_path = lambda path: SystemMessage(Path(path).read_text(encoding="utf-8"))  # type: ignore[attr-defined]
