"""An environment that does not load: one line naming the environment, its package and the error, from
load_environment and vf-eval.

No server is needed: loading happens before anything talks to one.
"""

import sys

import pytest
from test_env_cli import one_error_line, run_cli

import vfrl
from vfrl.environments.loader import EnvironmentLoadError

MODULES = {
    "raises_env_mod": "def load_environment(size: int = 3):\n"
                      "    raise ValueError(f'size {size} is too big;\\nuse at most 2')\n",
    "not_an_env_mod": "def load_environment():\n    return {'dataset': []}\n",
    "bad_import_env_mod": "import no_such_dependency_xyz\n\ndef load_environment():\n    pass\n",
    "bad_syntax_env_mod": "def load_environment(:\n",
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
                       "not a vfrl Environment"),
    ("bad-import-env-mod", "environment 'bad-import-env-mod' (module bad_import_env_mod): importing it raised "
                           "ModuleNotFoundError: No module named 'no_such_dependency_xyz' (at bad_import_env_mod.py:1)"),
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
    with pytest.raises(EnvironmentLoadError, match=r"environment 'reverse-text' \(package reverse-text [^)]*\) does not "
                                                   r"take these args \{'no_such_arg': 1\}: got an unexpected keyword"):
        vfrl.load_environment("reverse-text", no_such_arg=1)


def test_vf_eval_gives_the_same_one_line(broken_envs):
    for env_id in ("raises-env-mod", "not-an-env-mod"):
        with pytest.raises(EnvironmentLoadError) as e:
            vfrl.load_environment(env_id)
        sys.modules.pop(env_id.replace("-", "_"), None)
        assert one_error_line(run_cli("vf-eval", env_id, "-b", "http://127.0.0.1:9/v1"), "vf-eval") == \
            f"vf-eval: error: {e.value}"
