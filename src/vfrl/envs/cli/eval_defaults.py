"""vf-eval defaults from the environment package's own pyproject.toml, table `[tool.vfrl.eval]`.

The file is found where the package was installed from (pip's direct_url.json for folder and
editable installs), else in ./environments/<module>/. A package installed from a wheel has none.
"""

from __future__ import annotations

import difflib
import json
import tomllib
from importlib.metadata import Distribution, PackageNotFoundError, distribution, entry_points
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from vfrl.envs.cli import env_id as to_env_id
from vfrl.envs.cli import module_name
from vfrl.envs.loader import ENTRY_POINT_GROUP

EVAL_DEFAULTS: dict[str, Any] = {
    "model": None, "api_base_url": "http://127.0.0.1:8000/v1", "api_key_var": "VFRL_API_KEY",
    "num_examples": 5, "rollouts_per_example": 3, "max_concurrent": 32, "max_tokens": None, "temperature": None,
}
TYPES: dict[str, tuple[type, ...]] = {
    "model": (str,), "api_base_url": (str,), "api_key_var": (str,), "num_examples": (int,),
    "rollouts_per_example": (int,), "max_concurrent": (int,), "max_tokens": (int,), "temperature": (int, float),
    "env_args": (dict,), "sampling_args": (dict,),
}


def _dist_of(env_id: str) -> Distribution | None:
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in (env_id, to_env_id(env_id)) and ep.dist is not None:
            return ep.dist
    try:
        return distribution(to_env_id(env_id))
    except PackageNotFoundError:
        return None


def _source_dir(dist: Distribution) -> Path | None:
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    url = json.loads(text).get("url", "")
    parsed = urlparse(url)
    return Path(unquote(parsed.path)) if parsed.scheme == "file" else None


def find_pyproject(env_id: str) -> Path | None:
    candidates = []
    if (dist := _dist_of(env_id)) is not None and (src := _source_dir(dist)) is not None:
        candidates.append(src / "pyproject.toml")
    candidates.append(Path("environments") / module_name(env_id) / "pyproject.toml")
    return next((p for p in candidates if p.is_file()), None)


def read_eval_defaults(env_id: str) -> tuple[dict[str, Any], Path | None]:
    """({option: value}, the file they came from). ValueError names the file and key of a mistake."""
    path = find_pyproject(env_id)
    if path is None:
        return {}, None
    try:
        table = tomllib.loads(path.read_text()).get("tool", {}).get("vfrl", {}).get("eval", {})
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML: {e}") from None
    for key, value in table.items():
        if key not in TYPES:
            close = difflib.get_close_matches(key, list(TYPES), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; known keys: {', '.join(TYPES)}"
            raise ValueError(f"{path}: unknown key 'tool.vfrl.eval.{key}'{hint}")
        if not isinstance(value, TYPES[key]) or isinstance(value, bool):
            raise ValueError(f"{path}: 'tool.vfrl.eval.{key}' = {value!r} should be {TYPES[key][0].__name__}")
    return table, (path if table else None)
