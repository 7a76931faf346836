"""Does an environment's `load_environment` take the `env.args` given? The line that names only the wrong ones.

vf-train and vf-eval check the function itself before calling it (envs/loader.py); vf-rl checks before vLLM starts,
from the package's source (`declared_params`: the `def load_environment` of the module `env.id` names, read with
`ast`, not imported: an import would pull the package's dependencies into the launcher). A function defined
elsewhere and imported there, or one with **kwargs, is left to the load.
"""

from __future__ import annotations

import ast
import difflib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


@dataclass
class Params:
    """What a load_environment takes by name: every name, those without a default, and whether **kwargs."""

    names: list[str]
    required: list[str]
    takes_any: bool


def params_of(func: Callable[..., Any]) -> Params | None:
    """The function's parameters (None when it has no signature to read, a builtin)."""
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return None
    named = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return Params([p.name for p in named], [p.name for p in named if p.default is p.empty],
                  any(p.kind is p.VAR_KEYWORD for p in params))


def declared_params(source_file: str | Path) -> Params | None:
    """`load_environment`'s parameters as the module's source declares them at its top level; None when it does
    not (imported from elsewhere, built at run time) or the file cannot be read."""
    try:
        tree = ast.parse(Path(source_file).read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None
    func = next((node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and node.name == "load_environment"), None)
    if func is None:
        return None
    a = func.args
    positional = a.posonlyargs + a.args
    defaulted = {arg.arg for arg in positional[len(positional) - len(a.defaults):]} if a.defaults else set()
    defaulted |= {arg.arg for arg, default in zip(a.kwonlyargs, a.kw_defaults) if default is not None}
    names = [arg.arg for arg in a.args + a.kwonlyargs]
    return Params(names, [n for n in names if n not in defaulted], a.kwarg is not None)


def args_problem(who: str, params: Params, env_args: dict[str, Any],
                 where: str = "the environment's args") -> str | None:
    """The one line for `env_args` that `params` refuses (each unknown name with its nearest, each required one
    missing), or None. `who`: the environment as the line names it; `where`: what the user fixes (`env.args`)."""
    parts = []
    unknown = [] if params.takes_any else [k for k in env_args if k not in params.names]
    for key in unknown:
        near = difflib.get_close_matches(key, params.names, n=1)
        parts.append(f"'{key}'" + (f" (did you mean '{near[0]}'?)" if near else ""))
    said = f"does not take {', '.join(parts)}" if parts else ""
    missing = [n for n in params.required if n not in env_args]
    if missing:
        said += ("; " if said else "") + f"needs {', '.join(repr(n) for n in missing)}"
    if not said:
        return None
    takes = ", ".join(params.names) or "no arguments"
    return f"{who}: its load_environment() {said} (it takes: {takes}); fix {where}"
