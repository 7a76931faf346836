"""vf-init: create a new environment package (pyproject with the entry point, a working example module, a README)."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from string import Template
from typing import Annotated

import typer

from vfrl.envs.cli import env_id, fail, module_name, valid_name

PROG = "vf-init"
app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


def render(name: str) -> dict[str, str]:
    """File name -> text of the new package, from the templates shipped with vfrl."""
    values = {"env_id": env_id(name), "module": module_name(name)}
    template_dir = files("vfrl.envs.cli") / "template"
    return {
        "pyproject.toml": Template((template_dir / "pyproject.toml.tmpl").read_text()).substitute(values),
        f"{values['module']}.py": Template((template_dir / "module.py.tmpl").read_text()).substitute(values),
        "README.md": Template((template_dir / "README.md.tmpl").read_text()).substitute(values),
    }


def create_package(name: str, parent: Path) -> Path:
    target = parent / module_name(name)
    target.mkdir(parents=True)  # FileExistsError when the folder is already there: never overwrite
    for filename, text in render(name).items():
        (target / filename).write_text(text)
    return target


@app.command()
def init(
    name: Annotated[str, typer.Argument(
        metavar="NAME", help="Environment name, e.g. my-env (package my-env, module my_env).")],
    path: Annotated[Path, typer.Option(
        "--path", "-p", help="Folder that holds environment packages.")] = Path("environments"),
) -> None:
    """Create PATH/<module>/ for environment NAME: pyproject.toml, <module>.py with a working
    `load_environment`, and a README whose TODO sections you fill in."""
    if not valid_name(name):
        fail(PROG, f"'{name}' is not a valid environment name: use letters, digits, '-' or '_', starting with a letter")
    target = path / module_name(name)
    if target.exists():
        fail(PROG, f"{target} already exists; pick another name or remove it first (vf-init never overwrites)")
    create_package(name, path)
    typer.echo(f"{PROG}: created {target}/ (pyproject.toml, {module_name(name)}.py, README.md)")
    typer.echo(f"{PROG}: next: edit {target / (module_name(name) + '.py')}, then `vf-install {env_id(name)}` "
               f"and `vf-eval {env_id(name)} -m MODEL -b BASE_URL`")


def main() -> None:
    app()
