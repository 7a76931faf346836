"""The files vfrl ships besides its code: the repository's configs/ (runs, accelerate, chat templates),
environments/ and the embedded tiny model (models/tiny-reverse, which the quick start's config names).

One source of truth: the folders at the repository root. A wheel carries a copy made at build time
(setup.py puts them under `vfrl/_bundled/`); a source checkout or an editable install reads the
folders themselves. Standard library only: setup.py loads this file before vfrl's dependencies exist.
"""

from __future__ import annotations

from pathlib import Path

# What is bundled, relative to the root; anything else in those folders is build debris.
FOLDERS = ("configs/rl", "configs/accelerate", "configs/templates", "environments", "models/tiny-reverse")
SKIP_PARTS = {"__pycache__", "build", "dist", ".pytest_cache"}
SKIP_SUFFIXES = (".egg-info", ".pyc")


def bundle_root() -> Path:
    """`vfrl/_bundled` in an installed wheel, else the source checkout this module lives in."""
    package = Path(__file__).resolve().parent
    if (package / "_bundled").is_dir():
        return package / "_bundled"
    checkout = package.parents[1]
    if (checkout / "configs").is_dir() and (checkout / "pyproject.toml").is_file():
        return checkout
    raise FileNotFoundError(f"vfrl's bundled files are missing (looked in {package / '_bundled'} and {checkout})")


def bundled(*parts: str) -> Path:
    return bundle_root().joinpath(*parts)


def bundled_files(root: Path | None = None) -> list[Path]:
    """Paths (relative to the root) of every bundled file, sorted."""
    root = root or bundle_root()
    out = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            rel = path.relative_to(root)
            if path.is_file() and not (set(rel.parts) & SKIP_PARTS) and not any(
                    p.endswith(SKIP_SUFFIXES) for p in rel.parts):
                out.append(rel)
    return out
