"""The environment CLIs: `vf-init` (scaffold a package), `vf-install` (pip-install one), `vf-eval` (evaluate one)."""

from __future__ import annotations

import re
from typing import NoReturn

import typer


def fail(program: str, message: str) -> NoReturn:
    """A user mistake: one line on stderr, exit code 1, no traceback."""
    typer.secho(f"{program}: error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(1)


_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


def module_name(name: str) -> str:
    """`my-env` -> `my_env`: the Python module and the folder under environments/."""
    return name.replace("-", "_").lower()


def env_id(name: str) -> str:
    """`my_env` -> `my-env`: the distribution name and the id `load_environment` is called with."""
    return name.replace("_", "-").lower()


def valid_name(name: str) -> bool:
    return bool(_NAME.match(name))
