"""Find and load an environment package by id."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from vfrl.environments.environment import Environment

ENTRY_POINT_GROUP = "vfrl.environments"


class EnvironmentNotFound(LookupError):
    pass


def installed_environments() -> list[str]:
    return sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))


def load_environment(env_id: str, **env_args) -> Environment:
    """`reverse-text` -> the `vfrl.environments` entry point of that name, else module `reverse_text`.

    The target is a `load_environment(**env_args)` function (or a module that has one).
    """
    target = None
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in (env_id, env_id.replace("_", "-")):
            target = ep.load()
            break
    if target is None:
        module_name = env_id.replace("-", "_").split("/")[-1]
        try:
            target = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name != module_name:
                raise
            have = ", ".join(installed_environments()) or "none"
            raise EnvironmentNotFound(
                f"environment '{env_id}' is not installed (installed: {have}); "
                f"install it with `pip install -e environments/{module_name}`"
            ) from None
    func = getattr(target, "load_environment", target)
    if not callable(func):
        raise EnvironmentNotFound(f"environment '{env_id}' has no load_environment() function")
    env = func(**env_args)
    if not isinstance(env, Environment):
        raise TypeError(f"load_environment() of '{env_id}' returned {type(env).__name__}, not a vfrl Environment")
    return env
