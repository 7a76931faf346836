"""An environment package's own copy of a module comes before an installed one of the same name.

The shape is the one an editable install has (vf-install's default for a folder): the package's source folder is
appended to the path after site-packages, as its `.pth` line is. Here "installed" is a folder before it on the path
holding a module of the same name, as vfrl's bundled reasoning-gym environment installs reasoning-gym 0.1.25 before
carbonteq-ai's reasoning_gym_v1, which ships reasoning-gym at a later commit.
"""

import logging
import os
import subprocess
import sys

import pytest

import vfrl
from vfrl.package_folders import own_modules_first

ENV = ("import vendored_lib\n\nimport vfrl\n\nUSED = vendored_lib.WHO\n\n\n"
       "def load_environment():\n"
       "    return vfrl.SingleTurnEnv(dataset=[{'question': USED, 'answer': USED}],\n"
       "                              rubric=vfrl.Rubric(funcs=[lambda completion: 0.0], weights=[1.0]))\n")


@pytest.fixture
def vendoring_package(tmp_path, monkeypatch):
    """(source folder, installed folder): the package `vendored_env` with its own `vendored_lib`, found after an
    installed `vendored_lib`, on this process's path and on PYTHONPATH for the processes it starts."""
    installed, source = tmp_path / "site", tmp_path / "src"
    for folder, who in ((installed, "installed"), (source, "own")):
        (folder / "vendored_lib").mkdir(parents=True)
        (folder / "vendored_lib" / "__init__.py").write_text(f"WHO = {who!r}\n")
    (source / "vendored_env.py").write_text(ENV)
    (source / "json").mkdir()  # a folder without __init__.py (a namespace package) never shadows one with it
    (source / "json" / "make_fixtures.py").write_text("")
    monkeypatch.setattr(sys, "path", [*sys.path, str(installed), str(source)])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(installed), str(source)]))
    for name in ("vendored_env", "vendored_lib"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield source, installed
    for name in ("vendored_env", "vendored_lib"):
        sys.modules.pop(name, None)


def test_the_package_imports_its_own_copy_and_says_so(vendoring_package, caplog):
    source, installed = vendoring_package
    with caplog.at_level(logging.WARNING):
        vfrl.load_environment("vendored-env")
    assert sys.modules["vendored_env"].USED == "own"
    assert sys.modules["vendored_lib"].__file__ == str(source / "vendored_lib" / "__init__.py")
    assert caplog.messages == [f"environment module vendored_env ships its own vendored_lib (in {source}): imported "
                               f"from there, not from {installed / 'vendored_lib'}"]


def test_the_processes_it_starts_import_the_same_copy(vendoring_package):
    source, _ = vendoring_package
    assert own_modules_first("vendored_env") == ["vendored_lib"]
    child = subprocess.run([sys.executable, "-c", "import vendored_lib; print(vendored_lib.WHO)"],
                           env=os.environ, capture_output=True, text=True, check=True)
    assert child.stdout.strip() == "own"


def test_nothing_moves_when_nothing_is_shadowed(vendoring_package):
    source, installed = vendoring_package
    (installed / "vendored_lib" / "__init__.py").unlink()
    (installed / "vendored_lib").rmdir()
    path, pythonpath = list(sys.path), os.environ["PYTHONPATH"]
    assert own_modules_first("vendored_env") == []
    assert (sys.path, os.environ["PYTHONPATH"]) == (path, pythonpath)


def test_an_installed_copy_already_imported_stays_and_is_named(vendoring_package, caplog):
    source, installed = vendoring_package
    import vendored_lib  # noqa: F401 (the process had imported the installed one before the environment loads)

    with caplog.at_level(logging.WARNING):
        vfrl.load_environment("vendored-env")
    assert sys.modules["vendored_env"].USED == "installed"
    assert caplog.messages == [f"environment module vendored_env ships its own vendored_lib (in {source}), but this "
                               f"process imported vendored_lib from {installed / 'vendored_lib'} first: the "
                               f"environment gets that one"]


def test_a_package_in_site_packages_is_left_as_it_is():
    assert own_modules_first("vfrl") == []  # installed, or a source checkout whose folder ships nothing shadowed
    assert own_modules_first("json") == []  # the standard library's folder
