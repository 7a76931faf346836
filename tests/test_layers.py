"""The layers of src/vfrl point one way: each package imports only what lies below it, read from every import
statement of every module (those inside functions too).

    launcher, grpo, testing                  the commands and the Python API
    trainer                                  wires the two sides: batch = rollouts, stats = learner, push
    rollouts | learner                       siblings: neither imports the other
    envs (parsers, rubrics, tools, sandbox)  environments; the learner does not know them
    rollout_types, env_protocol, ...         what both sides hand each other, and plain helpers
"""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "vfrl"
ABOVE = {  # package -> the packages above it, which it must not import
    "learner": {"rollouts", "trainer", "envs", "launcher", "grpo", "testing", "parsers", "rubrics", "tools"},
    "rollouts": {"learner", "trainer", "launcher", "grpo", "testing"},
    "envs": {"rollouts", "learner", "trainer", "launcher", "grpo", "testing"},
    "trainer": {"launcher", "grpo", "testing"},
    "inference": {"envs", "rollouts", "learner", "trainer", "launcher", "grpo", "testing"},
    "sandbox": {"envs", "rollouts", "learner", "trainer", "launcher", "grpo", "testing"},
}
NEUTRAL = ["rollout_types", "env_protocol", "env_names", "torch_thread", "stop_signals"]  # import none of vfrl's
# packages, only each other


def imported(path: Path) -> set[str]:
    """The vfrl modules `path` imports, anywhere in it."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("vfrl"):
            # `from vfrl import sandbox` imports vfrl.sandbox (or a name of vfrl/__init__.py)
            names |= {f"vfrl.{a.name}" for a in node.names} if node.module == "vfrl" else {node.module}
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.startswith("vfrl")}
    return names


def part(module: str) -> str:
    """vfrl.learner.loss -> learner; vfrl.rollout_types -> rollout_types; vfrl -> vfrl."""
    return module.split(".")[1] if "." in module else module


@pytest.mark.parametrize("package", sorted(ABOVE))
def test_a_package_imports_nothing_above_it(package):
    wrong = {f"{path.relative_to(SRC)} imports {module}"
             for path in (SRC / package).rglob("*.py") for module in imported(path) if part(module) in ABOVE[package]}
    assert not wrong, sorted(wrong)


@pytest.mark.parametrize("module", NEUTRAL)
def test_the_neutral_modules_import_only_each_other(module):
    assert {m for m in imported(SRC / f"{module}.py") if part(m) not in NEUTRAL} == set()


def test_the_rule_sees_an_import_inside_a_function(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n    from vfrl.trainer.trainer import RLTrainer\n")
    assert imported(tmp_path / "m.py") == {"vfrl.trainer.trainer"}


@pytest.mark.parametrize("package", sorted(ABOVE))
def test_no_package_reads_the_front_door(package):
    """vfrl/__init__.py sits above them all (it exports the environment library): a package below imports the
    module it needs, never a name of vfrl/__init__.py (its version aside)."""
    wrong = {f"{path.relative_to(SRC)} imports {module}"
             for path in (SRC / package).rglob("*.py") for module in imported(path)
             if module.count(".") == 1 and module != "vfrl.__version__"
             and not (SRC / f"{part(module)}.py").exists() and not (SRC / part(module)).is_dir()}
    assert not wrong, sorted(wrong)
