"""Chat messages that read both ways: `m["role"]` and `m.role`.

Environment packages written for verifiers' classic API use both forms, because its messages are
objects that also allow `m["role"]` (`completion[-1].tool_calls`, `call.name`, next to
`m["content"]`). Ours stay plain dicts underneath (a `dict` subclass), so rollouts still save as
JSON, compare equal to dicts and go to the server unchanged.

What a message says (`message_text`, `content_text`) is read from any shape the OpenAI chat format
and verifiers allow: a dict or an object with attributes (pydantic, verifiers 0.4's types), content
missing, None, a string or a list of parts, tool calls alone, a reasoning field. Display and logs
never stop a run over a message's shape.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vfrl.rollout_types import json_default, safe_repr as _repr  # noqa: F401  (json_default: rollout files)

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
        """A Message from a dict, a Message, a pydantic message or an object with the fields as attributes."""
        return message if isinstance(message, cls) else cls(message_dict(message))


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


def message_dict(message: Any) -> dict[str, Any]:
    """A plain dict of a message: a mapping's items, a pydantic model's fields that are set (verifiers 0.4's
    `AssistantMessage(content=None)` has no "content" then), another object's attributes that are not None."""
    if isinstance(message, Mapping):
        return dict(message)
    if hasattr(message, "model_dump"):
        return message.model_dump(exclude_none=True)
    return {k: v for k, v in vars(message).items() if v is not None}


def message_field(message: Any, name: str) -> Any:
    """A field of a message (or of a tool call, a content part) in any shape; None when it has none."""
    if isinstance(message, Mapping):
        return message.get(name)
    return getattr(message, name, None)


def content_text(content: Any, other_parts: bool = False) -> str:
    """The text of a message's `content`: a string as is, None as "", a list of parts as its text parts
    joined by newlines (as verifiers' `content_text`). The other parts (images, audio) are left out, or
    shown as their type (`[image_url]`) with `other_parts`."""
    if content is None:
        return ""
    texts = []
    for part in content if isinstance(content, (list, tuple)) else [content]:
        if part is None:
            continue
        fields = (part, message_field(part, "text"), message_field(part, "refusal"))
        text = next((t for t in fields if isinstance(t, str)), None)
        if text is not None:
            texts.append(text)
        elif message_field(part, "type") is None:  # not a typed part: a number, an unknown object
            texts.append(str(part))
        elif other_parts:
            texts.append(f"[{message_field(part, 'type')}]")
    return "\n".join(t for t in texts if t)


def tool_call_text(call: Any) -> str:
    """`name(arguments)` of a tool call, OpenAI's (`function` or `custom` inside) or verifiers' flat one."""
    if isinstance(call, str):
        return call
    inner = message_field(call, "function") or message_field(call, "custom") or call
    name = message_field(inner, "name") or message_field(call, "name") or "?"
    args = next((a for a in (message_field(inner, "arguments"), message_field(inner, "input"),
                             message_field(call, "arguments")) if a is not None), "")
    return f"{name}({args if isinstance(args, str) else json.dumps(args, default=json_default, ensure_ascii=False)})"


def message_text(message: Any) -> str:
    """What a message says, for the console, wandb and logs: a `[reasoning] ...` line when it has
    `reasoning_content` (or `reasoning`), its content's text (other parts as `[image_url]`), a
    `[tool call] name(arguments)` line per tool call; a plain string (a completion-style prompt) as
    is. Never raises: a shape it cannot read shows as its repr."""
    try:
        if message is None or isinstance(message, str):
            return message or ""
        lines = []
        reasoning = message_field(message, "reasoning_content") or message_field(message, "reasoning")
        if reasoning:
            lines.append(f"[reasoning] {content_text(reasoning)}")
        if text := content_text(message_field(message, "content"), other_parts=True):
            lines.append(text)
        lines += [f"[tool call] {tool_call_text(call)}" for call in message_field(message, "tool_calls") or []]
        return "\n".join(lines)
    except Exception:
        return _repr(message)


def last_text(messages: Any) -> str:
    """`message_text` of the last message (a console or wandb table cell); a plain string as is, "" for none."""
    try:
        if messages is None or isinstance(messages, str):
            return messages or ""
        if not isinstance(messages, (list, tuple)):  # one message on its own
            return message_text(messages)
        return message_text(messages[-1]) if messages else ""
    except Exception:
        return _repr(messages)


def messages(items: Any) -> list[Message]:
    return [Message.of(m) for m in items]


class RoleMessage(Message):
    """A message of one role, by verifiers' class of that name (`vf.UserMessage(content="hi")`): a Message, so a dict,
    and a class, so `isinstance(m, vf.UserMessage)` reads as packages write it."""

    ROLE = ""

    def __init__(self, content: Any = None, **fields: Any):
        super().__init__(role=self.ROLE, content=content, **fields)


class SystemMessage(RoleMessage):
    ROLE = "system"

    @classmethod
    def from_path(cls, path: str | Path) -> "SystemMessage":
        """verifiers reads a system prompt from a file with `SystemMessage.from_path(path).content`."""
        return cls(Path(path).read_text(encoding="utf-8"))


class UserMessage(RoleMessage):
    ROLE = "user"


class AssistantMessage(RoleMessage):
    ROLE = "assistant"


class ToolMessage(RoleMessage):
    ROLE = "tool"

    def __init__(self, content: Any = None, tool_call_id: str = "", **fields: Any):
        super().__init__(content, tool_call_id=tool_call_id, **fields)


