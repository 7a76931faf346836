"""vf-setup: writes the shipped configs, accelerate configs and environments into an empty directory,
offline, from files inside the package (also from a built wheel); never overwrites without --force."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from vfrl.bundle import bundled_files

ROOT = Path(__file__).resolve().parents[1]
VF_SETUP = str(Path(sys.executable).parent / "vf-setup")


def test_bundle_is_the_repository_folders():
    files = {str(p) for p in bundled_files(ROOT)}
    for toml in (ROOT / "configs" / "rl").glob("*.toml"):  # every shipped config, whoever added it
        assert f"configs/rl/{toml.name}" in files
    for name in ("single_gpu", "ddp", "zero3", "fsdp"):
        assert f"configs/accelerate/{name}.yaml" in files
    assert "environments/reverse_text/reverse_text.py" in files
    assert not [f for f in files if "egg-info" in f or "__pycache__" in f]


def test_vf_setup_writes_everything_into_an_empty_directory(tmp_path):
    out = subprocess.run([VF_SETUP], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    expected = bundled_files(ROOT)
    for rel in expected:
        assert (tmp_path / rel).read_bytes() == (ROOT / rel).read_bytes()
        assert f"wrote    {rel}" in out
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert written == sorted(expected)
    assert f"{len(expected)} written, 0 skipped" in out


def test_vf_setup_never_overwrites_without_force(tmp_path):
    mine = tmp_path / "configs" / "rl" / "quickstart.toml"
    mine.parent.mkdir(parents=True)
    mine.write_text("# my own edits\n")
    out = subprocess.run([VF_SETUP], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert mine.read_text() == "# my own edits\n"
    assert "skipped  configs/rl/quickstart.toml (exists; --force overwrites)" in out
    again = subprocess.run([VF_SETUP], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert f"0 written, {len(bundled_files(ROOT))} skipped" in again
    subprocess.run([VF_SETUP, "--force"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert mine.read_text() == (ROOT / "configs/rl/quickstart.toml").read_text()


def test_vf_setup_refuses_a_file_as_destination(tmp_path):
    (tmp_path / "f").write_text("x")
    res = subprocess.run([VF_SETUP, "f"], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 2 and "vf-setup: error: f is a file" in res.stderr and "Traceback" not in res.stderr


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory):
    """Build a wheel from a copy of the project's sources (no network) and install it into a bare target dir."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src-copy"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "_bundled")
    for name in ("configs", "environments", "src", "models/tiny-reverse"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp / "dist"), str(src)], check=True, capture_output=True)
    wheel = next((tmp / "dist").glob("vfrl-*.whl"))
    target = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    return wheel, target


def test_wheel_carries_the_bundle(installed_wheel):
    wheel, _ = installed_wheel
    names = set(zipfile.ZipFile(wheel).namelist())
    for rel in bundled_files(ROOT):
        assert f"vfrl/_bundled/{rel}" in names


def test_vf_setup_from_the_installed_wheel(installed_wheel, tmp_path):
    _, target = installed_wheel
    env = {**os.environ, "PYTHONPATH": str(target), "PYTHONNOUSERSITE": "1"}
    code = "import vfrl.scaffold as s; print(s.__file__); s.main()"
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0].startswith(str(target))  # really the wheel's copy, not the checkout
    for rel in bundled_files(ROOT):
        assert (tmp_path / rel).read_bytes() == (ROOT / rel).read_bytes()
