"""Hermes tool calls read from a reply's text, for verifiers 0.4 packages on models without tool tokens.

verifiers' train client finds a reply's tool calls with a `renderers` tool parser, and the Hermes/Qwen one
(`qwen3`) looks for the `<tool_call>` token: a tokenizer that has no such token (SmolLM2's, any model whose
template has no tool syntax) spells it as several ordinary tokens, and that parser then finds no call at all.
This one decodes the reply and finds `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks in the
text, read as vfrl's classic `ToolEnv` reads them (`blocks`, used by envs/sampling.py: parse_tool_calls). Each block's
token span is the tokens its characters fall in; the reply's content is what comes before the first block.

It is registered in `renderers` as `hermes-text` when a verifiers 0.4 environment is built, and chosen with
`env.renderer = { name = "default", tool_parser = "hermes-text", chat_template = "<file or template>" }`: the
default renderer renders with the model's own template (or the one given), and a template that writes an
assistant message's `tool_calls` back as the same blocks keeps the conversation's tokens the ones it sampled
(configs/templates/smollm2_tool_calls.jinja).
"""

from __future__ import annotations

import json

NAME = "hermes-text"
OPEN, CLOSE = "<tool_call>", "</tool_call>"


class HermesTextToolParser:
    """`renderers`' ToolParser protocol: `extract(ids)` -> (content ids, one ParsedToolCall per block)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False) if ids else ""

    def token_at(self, ids: list[int], char: int) -> int:
        """The index of the token whose decoded text holds character `char` of the decoded reply."""
        lo, hi = 0, len(ids)
        while lo < hi:  # the fewest tokens whose text reaches past `char`
            mid = (lo + hi) // 2
            if len(self.decode(ids[:mid + 1])) > char:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def extract(self, ids: list[int]) -> tuple[list[int], list]:
        from renderers.base import ParsedToolCall, ToolCallParseStatus

        text = self.decode(ids)
        calls = []
        for start, end, raw, parsed in blocks(text):
            span = (self.token_at(ids, start), self.token_at(ids, end - 1) + 1)
            if parsed is UNCLOSED:
                calls.append(ParsedToolCall(raw=raw, token_span=span, status=ToolCallParseStatus.UNCLOSED_BLOCK))
                break
            if parsed is INVALID:
                calls.append(ParsedToolCall(raw=raw, token_span=span, status=ToolCallParseStatus.INVALID_JSON))
                continue
            name = parsed.get("name") if isinstance(parsed, dict) else None
            arguments = parsed.get("arguments", {}) if isinstance(parsed, dict) else {}
            calls.append(ParsedToolCall(raw=raw, name=name or None, arguments=arguments, token_span=span,
                                        status=ToolCallParseStatus.OK if name else ToolCallParseStatus.MISSING_NAME))
        return (ids[:calls[0].token_span[0]] if calls else ids), calls


UNCLOSED, INVALID = object(), object()


def blocks(text: str):
    """(start, end, raw, parsed) of each `<tool_call>` block: the JSON value after the opening tag when the closing
    tag follows it (a string in it may hold "</tool_call>"), else INVALID up to the next closing tag, or UNCLOSED
    to the end of the text."""
    decoder = json.JSONDecoder()
    pos = 0
    while (start := text.find(OPEN, pos)) != -1:
        body = start + len(OPEN)
        value_start = len(text) - len(text[body:].lstrip())
        try:
            parsed, value_end = decoder.raw_decode(text, value_start)
        except json.JSONDecodeError:
            parsed, value_end = INVALID, None
        close = -1 if value_end is None else len(text) - len(text[value_end:].lstrip())
        if value_end is None or not text.startswith(CLOSE, close):
            parsed, close = INVALID, text.find(CLOSE, body)
            if close == -1:
                yield start, len(text), text[body:].strip(), UNCLOSED
                return
        yield start, close + len(CLOSE), text[body:close].strip(), parsed
        pos = close + len(CLOSE)


def register() -> None:
    """Make `hermes-text` a tool parser `renderers` knows by name."""
    from renderers import parsers

    parsers.TOOL_PARSERS.setdefault(NAME, HermesTextToolParser)
