"""Turn TOML and pydantic failures into one line per problem: file, dotted key, bad value, what is allowed."""

from __future__ import annotations

import difflib
import json
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from vfrl.config import RLConfig, RuleError
from vfrl.launcher.overrides import Override, apply_overrides


class ConfigError(Exception):
    pass


def toml_value(value: Any) -> str:
    """A value as it is written in TOML: `true`, `"cosine"`, `[1, 2]`, `1e-05`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, list, dict)):
        return json.dumps(value)
    return str(value)


def _model_at(loc: tuple, model: type[BaseModel] = RLConfig) -> type[BaseModel] | None:
    for part in loc:
        ann = getattr(model.model_fields.get(str(part)), "annotation", None)
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return None
        model = ann
    return model


def _all_keys(model: type[BaseModel] = RLConfig, prefix: str = "") -> list[str]:
    """Every dotted key of the config tree: `model`, `trainer.gpus`, `trainer.args.batch_size`, ..."""
    keys = []
    for name in model.model_fields:
        sub = _model_at((name,), model)
        keys += _all_keys(sub, f"{prefix}{name}.") if sub else [prefix + name]
    return keys


def did_you_mean(loc: tuple) -> str:
    """The same name in another table (a key put in the wrong table), else a close spelling in this one."""
    name = str(loc[-1])
    elsewhere = [k for k in _all_keys() if k.rsplit(".", 1)[-1] == name]
    if elsewhere:
        return elsewhere[0]
    table = _model_at(loc[:-1])
    close = difflib.get_close_matches(name, list(table.model_fields) if table else [], n=1)
    return ".".join(map(str, loc[:-1] + (close[0],))) if close else ""


def _allowed(msg: str) -> str:
    return msg.removeprefix("Value error, ").replace("Input should be", "must be").replace("input should be", "must be")


def describe(path: Path, err: ValidationError, overridden: dict[str, str] | None = None) -> str:
    """One line per problem. `overridden` maps dotted keys set on the command line to the flag that set them."""
    overridden = overridden or {}

    def origin(key: str) -> str:
        return f" (from {overridden[key]})" if key in overridden else ""

    lines = []
    for e in err.errors():
        loc = tuple(e["loc"])
        key = ".".join(str(p) for p in loc)
        rule = e.get("ctx", {}).get("error")
        if isinstance(rule, RuleError):
            for rel_key, value, allowed in rule.problems:
                full = f"{key}.{rel_key}" if key else rel_key
                lines.append(f"{path}: {full} = {toml_value(value)}{origin(full)} is invalid: {allowed}")
        elif e["type"] == "extra_forbidden":
            hint = did_you_mean(loc)
            lines.append(f"{path}: unknown key '{key}'{origin(key)}" + (f"; did you mean '{hint}'?" if hint else ""))
        elif e["type"] == "missing":
            lines.append(f"{path}: missing required key '{key}'")
        elif e["type"] == "value_error" and isinstance(e.get("input"), dict):  # a rule of a whole table
            lines.append(f"{path}: [{key}] {_allowed(e['msg'])}" if key else f"{path}: {_allowed(e['msg'])}")
        else:
            shown = toml_value(e.get("input")) if key else "config"
            lines.append(f"{path}: {key or 'config'} = {shown}{origin(key)} is invalid: {_allowed(e['msg'])}")
    return "\n".join(lines)


def load_user_config(path: Path, overrides: list[Override] = ()) -> RLConfig:
    """Read, apply command-line overrides, validate: RLConfig, or ConfigError with one line per problem."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file (TOML must be UTF-8)") from None
    problems = apply_overrides(data, overrides)
    if problems:
        raise ConfigError("\n".join(f"{path}: {p}" for p in problems))
    try:
        return RLConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(describe(path, e, {o.key: o.flag for o in overrides})) from None
