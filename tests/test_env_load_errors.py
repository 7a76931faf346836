"""An environment that does not load: one line naming the environment, its package and the error, from
load_environment, vf-eval and vf-train; the traceback only in the trainer's log.

No server is needed: loading happens before anything talks to one (vf-train loads the model and the
environment before it waits for vLLM).
"""

import os
import subprocess
import sys

import pytest
import tomli_w
from conftest import BIN
from test_env_cli import one_error_line, run_cli

import vfrl
from vfrl.envs.loader import EnvironmentLoadError

MODULES = {
    "raises_env_mod": "def load_environment(size: int = 3):\n"
                      "    raise ValueError(f'size {size} is too big;\\nuse at most 2')\n",
    "not_an_env_mod": "def load_environment():\n    return {'dataset': []}\n",
    "bad_import_env_mod": "import no_such_dependency_xyz\n\ndef load_environment():\n    pass\n",
    "bad_syntax_env_mod": "def load_environment(:\n",
    # a package whose data comes from the Hugging Face hub, offline: it loads, and its dataset fails when read
    "offline_data_env_mod": "import vfrl\n\n\ndef build():\n"
                            "    raise ConnectionError(\n"
                            "        \"Couldn't reach 'org/data' on the Hub (OfflineModeIsEnabled)\")\n"
                            "\n\ndef load_environment():\n"
                            "    return vfrl.SingleTurnEnv(dataset=build, rubric=vfrl.Rubric(funcs=[], weights=[]))\n",
}


@pytest.fixture
def broken_envs(tmp_path, monkeypatch):
    for name, code in MODULES.items():
        (tmp_path / f"{name}.py").write_text(code)
        sys.modules.pop(name, None)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("env_id, message", [
    ("raises-env-mod", "environment 'raises-env-mod' (module raises_env_mod): load_environment() raised ValueError: "
                       "size 3 is too big; use at most 2 (at raises_env_mod.py:2)"),
    ("not-an-env-mod", "environment 'not-an-env-mod' (module not_an_env_mod): load_environment() returned dict, "
                       "not a vfrl Environment (it has no aclose, dataset, env_id, eval_dataset, limit_tasks, "
                       "rows, run_group, score_rollouts)"),
    ("bad-import-env-mod", "environment 'bad-import-env-mod' (module bad_import_env_mod): importing it raised "
                           "ModuleNotFoundError: No module named 'no_such_dependency_xyz' "
                           "(at bad_import_env_mod.py:1)"),
    ("bad-syntax-env-mod", "environment 'bad-syntax-env-mod' (module bad_syntax_env_mod): importing it raised "
                           "SyntaxError: invalid syntax (bad_syntax_env_mod.py, line 1)"),
])
def test_a_failing_load_is_one_line_naming_the_package_and_the_error(broken_envs, env_id, message):
    with pytest.raises(EnvironmentLoadError) as e:
        vfrl.load_environment(env_id)
    assert str(e.value) == message


def test_the_original_error_stays_attached_for_the_log(broken_envs):
    with pytest.raises(EnvironmentLoadError) as e:
        vfrl.load_environment("raises-env-mod", size=5)
    assert isinstance(e.value.__cause__, ValueError) and "size 5" in str(e.value.__cause__)


def test_args_the_function_does_not_take_name_the_package():
    with pytest.raises(EnvironmentLoadError,
                       match=r"^environment 'reverse-text' \(package reverse-text [^)]*\): its load_environment\(\) "
                             r"does not take 'no_such_arg' \(it takes: num_train_examples, [^)]*\); fix the "
                             r"environment's args$"):
        vfrl.load_environment("reverse-text", no_such_arg=1, seed=3)


def test_vf_eval_says_in_one_line_that_the_dataset_could_not_be_built(broken_envs):
    assert one_error_line(run_cli("vf-eval", "offline-data-env-mod", "-b", "http://127.0.0.1:9/v1"), "vf-eval") == (
        "vf-eval: error: offline-data-env-mod: building its dataset (build()) raised ConnectionError: Couldn't reach "
        "'org/data' on the Hub (OfflineModeIsEnabled) (at offline_data_env_mod.py:5)")


def test_vf_eval_gives_the_same_one_line(broken_envs):
    for env_id in ("raises-env-mod", "not-an-env-mod"):
        with pytest.raises(EnvironmentLoadError) as e:
            vfrl.load_environment(env_id)
        sys.modules.pop(env_id.replace("-", "_"), None)
        assert one_error_line(run_cli("vf-eval", env_id, "-b", "http://127.0.0.1:9/v1"), "vf-eval") == \
            f"vf-eval: error: {e.value}"


def test_vf_train_prints_one_line_and_puts_the_traceback_in_its_log(broken_envs, tiny_model):
    """The real console script, as vf-rl's pane runs it (the log exists: the pane tees into it)."""
    run_dir = broken_envs / "run"
    (run_dir / "logs").mkdir(parents=True)
    log = run_dir / "logs" / "trainer.log"
    log.write_text("")
    (run_dir / "config.toml").write_text(tomli_w.dumps({
        "model": str(tiny_model), "env": {"id": "raises-env-mod"},
        "trainer": {"gpus": 0, "args": {"output_dir": str(broken_envs), "max_tokens": 8, "max_seq_len": 64}}}))
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join([str(broken_envs), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([str(BIN / "vf-train"), "@", str(run_dir / "config.toml")], env=env, cwd=broken_envs,
                          capture_output=True, text=True, timeout=300)
    line = ("vf-train: error: environment 'raises-env-mod' (module raises_env_mod): load_environment() raised "
            f"ValueError: size 3 is too big; use at most 2 (at raises_env_mod.py:2) (traceback in {log})")
    assert one_error_line(done, "vf-train") == line
    assert "Traceback" not in done.stdout
    assert "Traceback" in log.read_text() and "raise ValueError" in log.read_text()
