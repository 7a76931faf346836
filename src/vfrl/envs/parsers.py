"""Parsers: read the answer (and check the format) of a model reply, as in verifiers.

`Parser` passes text through `extract_fn`; `XMLParser(["think", "answer"])` reads `<tag>...</tag>`
fields; `ThinkParser` keeps what follows the last `</think>` (nothing when a reply has none), `MaybeThinkParser`
the same or the whole reply. Each gives `parse_answer(completion)` for reward functions and
`get_format_reward_func()` for a format reward.
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any, Callable

from vfrl.envs.messages import content_text, message_field

Messages = list[dict[str, Any]]


def assistant_texts(completion: str | Messages) -> list[str]:
    """The text of every assistant message of a completion (a plain string is one message): its content's
    text, "" for a reply with tool calls only; dicts or objects (`content_text`)."""
    if isinstance(completion, str):
        return [completion]
    return [content_text(message_field(m, "content")) for m in completion if message_field(m, "role") == "assistant"]


class Parser:
    def __init__(self, extract_fn: Callable[[str], str] = lambda text: text):
        self.extract_fn = extract_fn

    def parse(self, text: str) -> Any:
        return self.extract_fn(text)

    def parse_answer(self, completion: str | Messages) -> str | None:
        """The parsed last assistant message; None when there is none."""
        texts = assistant_texts(completion)
        return self.parse(texts[-1]) if texts else None

    # verifiers' helpers: the messages of one role, in order
    def get_assistant_messages(self, completion: Messages) -> Messages:
        return [m for m in completion if message_field(m, "role") == "assistant"]

    def get_user_messages(self, completion: Messages) -> Messages:
        return [m for m in completion if message_field(m, "role") == "user"]

    def get_system_messages(self, completion: Messages) -> Messages:
        return [m for m in completion if message_field(m, "role") == "system"]

    def get_tool_messages(self, completion: Messages) -> Messages:
        return [m for m in completion if message_field(m, "role") == "tool"]

    def get_format_reward_func(self) -> Callable[..., float]:
        def format_reward_func(completion) -> float:
            return 1.0

        return format_reward_func


class XMLParser(Parser):
    """`XMLParser(["think", "answer"])`: `parse(text).answer` is the text inside `<answer>...</answer>`.

    A field may be a tuple of alternative tags, `("code", "answer")`: the first tag found fills it,
    under the first name.
    """

    def __init__(self, fields: list[str | tuple[str, ...]], answer_field: str = "answer"):
        super().__init__()
        self.fields: list[tuple[str, ...]] = [(f,) if isinstance(f, str) else tuple(f) for f in fields]
        if not self.fields or any(not f for f in self.fields):
            raise ValueError("XMLParser needs at least one field name")
        self.answer_field = answer_field

    @staticmethod
    def _find(tag: str, text: str) -> str | None:
        found = re.findall(rf"<{re.escape(tag)}>\s*(.*?)\s*</{re.escape(tag)}>", text, flags=re.DOTALL)
        return found[-1] if found else None

    def parse(self, text: str) -> SimpleNamespace:
        values = {}
        for alternatives in self.fields:
            value = None
            for tag in alternatives:
                if (value := self._find(tag, text)) is not None:
                    break
            values[alternatives[0]] = value
        return SimpleNamespace(**values)

    def parse_answer(self, completion: str | Messages) -> str | None:
        """The answer field of the latest assistant message that has one."""
        for text in reversed(assistant_texts(completion)):
            value = getattr(self.parse(text), self.answer_field, None)
            if value is not None:
                return value
        return None

    def get_format_str(self) -> str:
        """The expected format, for a system prompt: each field's tags (alternatives as `<[ a | b ]>`)."""
        tag = lambda alts: alts[0] if len(alts) == 1 else f"[ {' | '.join(alts)} ]"  # noqa: E731
        return "".join(f"<{tag(alts)}>\n...\n</{tag(alts)}>\n" for alts in self.fields)

    def format(self, **values: str) -> str:
        """`format(think="...", answer="42")` -> the fields as XML, in field order."""
        return "\n".join(f"<{alts[0]}>\n{values[alts[0]]}\n</{alts[0]}>" for alts in self.fields if alts[0] in values)

    def get_format_reward_func(self) -> Callable[..., float]:
        """Mean over assistant messages of the fraction of fields present exactly once."""

        def format_reward_func(completion) -> float:
            texts = assistant_texts(completion)
            if not texts:
                return 0.0
            scores = []
            for text in texts:
                present = sum(
                    any(text.count(f"<{t}>") == 1 and text.count(f"</{t}>") == 1 for t in alts) for alts in self.fields
                )
                scores.append(present / len(self.fields))
            return sum(scores) / len(scores)

        return format_reward_func


class ThinkParser(Parser):
    """For models that reason in `<think>...</think>`: parses the text after the last `</think>`, and "" when the
    reply has no `</think>` (a reply that skipped its reasoning has no answer, as in verifiers)."""

    def parse(self, text: str) -> Any:
        return self.extract_fn(text.rsplit("</think>", 1)[1].strip() if "</think>" in text else "")

    def get_format_reward_func(self) -> Callable[..., float]:
        """1.0 per assistant message of the form `<think>...</think>answer` (one think block, an answer)."""

        def format_reward_func(completion) -> float:
            texts = assistant_texts(completion)
            if not texts:
                return 0.0
            ok = [
                t.lstrip().startswith("<think>") and t.count("<think>") == 1 and t.count("</think>") == 1
                and bool(t.rsplit("</think>", 1)[1].strip())
                for t in texts
            ]
            return sum(ok) / len(ok)

        return format_reward_func


class MaybeThinkParser(Parser):
    """For models that may or may not reason in `<think>...</think>` (or whose template strips it): parses the text
    after the last `</think>`, or the whole reply when it has none."""

    def parse(self, text: str) -> Any:
        return self.extract_fn(text.rsplit("</think>", 1)[-1].strip())
