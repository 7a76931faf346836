"""Turn TOML and pydantic failures into one line per problem: file, dotted key, bad value, the fix."""

from __future__ import annotations

import difflib
import tomllib
from pathlib import Path

from pydantic import BaseModel, ValidationError

from vfrl.config import RLConfig


class ConfigError(Exception):
    pass


def _fields_at(loc: tuple, model: type[BaseModel] = RLConfig) -> list[str]:
    """Field names of the model at a location, for "did you mean" suggestions."""
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        ann = getattr(field, "annotation", None)
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return []
        model = ann
    return list(model.model_fields)


def describe(path: Path, err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = tuple(e["loc"])
        key = ".".join(str(p) for p in loc)
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            known = _fields_at(loc)
            close = difflib.get_close_matches(str(loc[-1]), known, n=1)
            hint = f"; did you mean '{'.'.join(map(str, loc[:-1] + (close[0],)))}'?" if close else ""
            lines.append(f"{path}: unknown key '{key}'{hint}")
        elif e["type"] == "missing":
            lines.append(f"{path}: missing required key '{key}'")
        elif e["type"] == "value_error":  # a cross-field rule of a whole table
            lines.append(f"{path}: [{key}] {msg}" if key else f"{path}: {msg}")
        else:
            where = f"'{key}'" if key else "config"
            lines.append(f"{path}: {where} = {e.get('input')!r} is invalid: {msg}")
    return "\n".join(lines)


def load_user_config(path: Path) -> RLConfig:
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    try:
        return RLConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(describe(path, e)) from None
