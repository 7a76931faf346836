"""Which verifiers API a package is written against, and classic (<= 0.3) packages loaded unchanged.

verifiers 0.4 dropped the classic API (its root package holds only `verifiers.v1`), and verifiers 0.3
cannot share a Python with vLLM (it needs mcp < 2, vLLM mcp >= 2). vfrl has the classic names and module
paths (vfrl/envs/classic.py; docs/environments.md, "Porting from verifiers"), so a classic package runs on
vfrl once its `import verifiers as vf` reads `import vfrl as vf`. Rather than asking the user to edit the
package, vfrl's loader reads it that way: when `env.id` names a module whose source imports verifiers but
never `verifiers.v1`, that module and its submodules, and the classic modules the package ships beside it,
are compiled from their source with their verifiers imports pointed at vfrl (the lines the port guide tells
a user to change, nothing else; the files on disk and every other module's `verifiers` stay as they are).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import re
import sys
from pathlib import Path

from vfrl.package_folders import folder_modules, source_folder

IMPORTS_VERIFIERS = re.compile(r"^\s*(import verifiers|from verifiers[\s.])", re.MULTILINE)
IMPORTS_V1 = re.compile(r"^\s*(import verifiers\.v1|from verifiers\.v1[\s.]|from verifiers import v1\b)", re.MULTILINE)
# a classic package's verifiers imports, read as vfrl's: `import verifiers as vf`, `from verifiers.x import y`,
# `import verifiers`
TO_VFRL = [(re.compile(r"^(\s*)import verifiers as (\w+)", re.MULTILINE), r"\1import vfrl as \2"),
           (re.compile(r"^(\s*)from verifiers(\.|\s)", re.MULTILINE), r"\1from vfrl\2"),
           (re.compile(r"^(\s*)import verifiers\s*$", re.MULTILINE), r"\1import vfrl as verifiers")]


def module_sources(module: str) -> list[Path]:
    """The .py files of an importable module or package (200 at most), found without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [p for loc in spec.submodule_search_locations for p in sorted(Path(loc).rglob("*.py"))][:200]
    return [Path(spec.origin)] if spec.origin and spec.origin.endswith(".py") else []


def verifiers_taskset(name: str) -> str | None:
    """`verifiers.v1.tasksets.<name>` when verifiers 0.4 ships a taskset of that name (textarena, harbor, ...): its
    own loader looks there before a module of the name, so `textarena` is its taskset, not textarena's game
    package. Found on disk, without importing verifiers for every other id."""
    spec = importlib.util.find_spec("verifiers") if "." not in name else None
    folders = (spec and spec.submodule_search_locations) or []
    for folder in folders:
        tasksets = Path(folder) / "v1" / "tasksets"
        if (tasksets / name / "__init__.py").is_file() or (tasksets / f"{name}.py").is_file():
            return f"verifiers.v1.tasksets.{name}"
    return None


def companions(module: str) -> list[str]:
    """The other top-level modules an environment ships beside `module` (`rubrics/`, `utils/` next to
    `my_env.py`): those its distribution installs, or, when `module` is found in a folder of its own (a
    checkout on the path, an editable install's source), that folder's other modules and packages."""
    from importlib.metadata import packages_distributions

    by_top = packages_distributions()
    dists = set(by_top.get(module, ()))
    names = {top for top, of in by_top.items() if dists & set(of)}
    if (folder := source_folder(module)) is not None:
        names |= folder_modules(folder)
    return sorted(names - {module, "verifiers", "vfrl"})


def verifiers_api(module: str) -> str | None:
    """Which verifiers API a module's source is written against: "v1" (0.4), "classic" (<= 0.3), or None."""
    texts = []
    for path in module_sources(module):
        try:
            texts.append(path.read_text(errors="replace"))
        except OSError:
            continue
    if any(IMPORTS_V1.search(t) for t in texts):
        return "v1"
    if any(IMPORTS_VERIFIERS.search(t) for t in texts):
        return "classic"
    return None


# what verifiers' classic releases installed with themselves that their packages import without asking for it
# (module -> distribution): vfrl stands in for those releases, so vf-install adds what is missing. Left out:
# prime-sandboxes and prime-tunnel, the hosted sandboxes vfrl does not run (loader.HOSTED).
CLASSIC_DEPENDENCIES = {"datasets": "datasets", "math_verify": "math-verify", "anthropic": "anthropic",
                        "nest_asyncio": "nest-asyncio", "wget": "wget", "agents": "openai-agents",
                        "textual": "textual", "gepa": "gepa", "zmq": "pyzmq", "msgpack": "msgpack",
                        "aiolimiter": "aiolimiter", "setproctitle": "setproctitle", "regex": "regex",
                        "tenacity": "tenacity", "requests": "requests", "rich": "rich", "jinja2": "jinja2",
                        "numpy": "numpy", "httpx": "httpx", "pydantic": "pydantic", "openai": "openai"}
TOP_IMPORT = re.compile(r"^\s*(?:import|from)\s+(\w+)", re.MULTILINE)


def classic_dependencies_missing(module: str) -> dict[str, str]:
    """{module: distribution} of what a classic package's modules (it and the ones it ships beside it) import from
    verifiers' classic dependencies and this Python lacks."""
    imported = set()
    for name in [module, *companions(module)]:
        for path in module_sources(name):
            try:
                imported |= set(TOP_IMPORT.findall(path.read_text(errors="replace")))
            except OSError:
                continue
    return {m: CLASSIC_DEPENDENCIES[m] for m in sorted(imported & CLASSIC_DEPENDENCIES.keys())
            if importlib.util.find_spec(m) is None}


def as_vfrl(source: str) -> str:
    for pattern, replacement in TO_VFRL:
        source = pattern.sub(replacement, source)
    return source


class ClassicSourceLoader(importlib.machinery.SourceFileLoader):
    """Compiles a classic package's module from its source with the verifiers imports read as vfrl's; never
    from or into __pycache__ (that bytecode would serve a plain import of the same file)."""

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        source = importlib.util.decode_source(self.get_data(path))
        return compile(as_vfrl(source), path, "exec", dont_inherit=True)


class ClassicPackageFinder(importlib.abc.MetaPathFinder):
    """Finds `package` and its submodules as the other finders do, and loads their .py files with
    ClassicSourceLoader."""

    def __init__(self, package: str):
        self.package = package

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.package and not fullname.startswith(self.package + "."):
            return None
        spec = next((found for finder in sys.meta_path if not isinstance(finder, ClassicPackageFinder)
                     and hasattr(finder, "find_spec") and (found := finder.find_spec(fullname, path, target))), None)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec  # whoever else finds it (sys.path, an editable install's finder) and loads it as usual
        spec.loader = ClassicSourceLoader(fullname, spec.origin)
        return spec


def load_classic_as_vfrl(package: str) -> None:
    """Every later import of `package` (and its submodules) in this process reads it against vfrl's API, and so
    does every import of the classic modules it ships beside it (`companions`)."""
    def read_as_vfrl(name: str) -> bool:
        return any(isinstance(f, ClassicPackageFinder) and f.package == name for f in sys.meta_path)

    if read_as_vfrl(package):
        return  # loaded before in this process, its companions with it (finding them reads every distribution)
    for name in [package, *(c for c in companions(package) if verifiers_api(c) == "classic")]:
        if not read_as_vfrl(name):
            sys.meta_path.insert(0, ClassicPackageFinder(name))
