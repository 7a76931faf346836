"""An environment package's own folder: the modules it ships there, imported before installed ones of the same name.

A package installed editable (vf-install's default for a folder) or found in a folder on PYTHONPATH is imported
from its source folder, which Python searches after site-packages (an editable install's `.pth` line is appended to
the path). When the package ships a top-level module there that is also installed (a vendored copy of a library:
carbonteq-ai's reasoning_gym_v1 ships reasoning-gym at the commit it scores with, and vfrl's bundled reasoning-gym
environment installs reasoning-gym 0.1.25), the installed one is imported instead, and the package runs against a
library it was not written for (there: `AttributeError: ... no attribute 'score_answer_cascade'` at every score).
Installed from a wheel, its own copy would be the one imported (its files replace the installed ones).

`own_modules_first` gives the package's source folder that precedence, in this process and the processes it
starts (PYTHONPATH), before the package is imported, and says so in one line.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

log = logging.getLogger(__name__)


def site_folders() -> list[Path]:
    import site

    return [Path(p) for p in [*site.getsitepackages(), site.getusersitepackages()]]


def is_install_folder(folder: Path) -> bool:
    """Is `folder` where installed packages go (site-packages), rather than a package's own source folder?"""
    return folder.name in ("site-packages", "dist-packages") or str(folder) in map(str, site_folders())


def found_at(name: str) -> Path | None:
    """Where importing top-level module `name` would take it from (its file, or its package's folder), without
    importing it; None when nothing of that name is found."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.origin and spec.origin not in ("built-in", "frozen"):
        return Path(spec.origin)
    return next((Path(p) for p in spec.submodule_search_locations or ()), None)


def source_folder(module: str) -> Path | None:
    """The folder top-level module `module` is found in, when that is a folder of its own (a checkout on the path,
    an editable install's source), not site-packages."""
    path = found_at(module)
    if path is None or path.suffix != ".py":
        return None
    folder = path.parent.parent if path.name == "__init__.py" else path.parent
    return None if is_install_folder(folder) else folder


def folder_modules(folder: Path, regular: bool = False) -> set[str]:
    """The top-level modules and packages in `folder`; `regular`: not its folders without an `__init__.py`
    (namespace packages, which a module or package of the same name anywhere on the path comes before)."""
    def is_package(p: Path) -> bool:
        return (p / "__init__.py").is_file() if regular else any(p.glob("*.py"))

    return {p.stem for p in folder.glob("*.py") if p.stem.isidentifier()} | {
        p.name for p in folder.iterdir() if p.is_dir() and p.name.isidentifier() and is_package(p)}


def own_modules_first(module: str) -> list[str]:
    """Put the source folder of environment module `module` first on the path when another module it ships there
    would be imported from elsewhere; the names that now come from that folder."""
    folder = source_folder(module)
    if folder is None:
        return []
    shadowed = {}
    for name in sorted(folder_modules(folder, regular=True) - {module}):
        path = found_at(name)
        if path is not None and folder not in path.parents:
            shadowed[name] = path.parent if path.name == "__init__.py" else path
    if not shadowed:
        return []
    fresh = [name for name in shadowed if name not in sys.modules]
    if fresh:
        sys.path.insert(0, str(folder))
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))
        importlib.invalidate_caches()
        log.warning("environment module %s ships its own %s (in %s): imported from there, not from %s", module,
                    ", ".join(fresh), folder, ", ".join(str(shadowed[name]) for name in fresh))
    if imported := [name for name in shadowed if name in sys.modules]:
        log.warning("environment module %s ships its own %s (in %s), but this process imported %s from %s first: "
                    "the environment gets that one", module, ", ".join(imported), folder, ", ".join(imported),
                    ", ".join(str(shadowed[name]) for name in imported))
    return fresh


def installed_from(dist) -> Path | None:
    """The folder an installed distribution was installed from (pip's direct_url.json: an editable install's source,
    a local folder), or None."""
    try:
        url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
    except (OSError, ValueError):
        return None
    return Path(unquote(urlparse(url).path)).resolve() if url.startswith("file://") else None
