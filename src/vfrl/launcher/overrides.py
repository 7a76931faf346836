"""Command-line overrides of config keys: `vf-rl @ cfg.toml --trainer.args.max_steps 10`.

A flag is a dotted key of the TOML tree (dashes or underscores), its value a TOML literal
(`10`, `3e-4`, `true`, `"a b"`, `["q_proj", "v_proj"]`); anything that does not parse as TOML is
taken as a string (`--model Qwen/Qwen2.5-0.5B-Instruct`). A flag with no value is `true`.
The result is validated exactly like the file.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Override:
    key: str  # dotted, underscores: trainer.args.max_steps
    value: Any
    flag: str  # as typed, for messages: --trainer.args.max_steps


def parse_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_overrides(tokens: list[str]) -> list[Override]:
    """`["--a.b", "1", "--c=x", "--flag"]` -> overrides; ValueError (one line) on a stray token."""
    out: list[Override] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--") or len(token) <= 2:
            raise ValueError(f"unexpected argument '{token}': overrides look like --trainer.args.max_steps 10")
        name, eq, text = token[2:].partition("=")
        if not eq:
            has_value = i + 1 < len(tokens) and not tokens[i + 1].startswith("--")
            text = tokens[i + 1] if has_value else "true"
            i += has_value
        key = ".".join(part.replace("-", "_") for part in name.split("."))
        out.append(Override(key, parse_value(text), f"--{name}"))
        i += 1
    return out


def apply_overrides(data: dict, overrides: list[Override]) -> list[str]:
    """Set each dotted key in the raw TOML dict (creating tables); returns problems, one line each."""
    problems = []
    for o in overrides:
        table, parts = data, o.key.split(".")
        for depth, part in enumerate(parts[:-1]):
            node = table.setdefault(part, {})
            if not isinstance(node, dict):
                prefix = ".".join(parts[: depth + 1])
                problems.append(f"{o.flag}: '{prefix}' is a value, not a table; set it with --{prefix} VALUE")
                break
            table = node
        else:
            table[parts[-1]] = o.value
    return problems
