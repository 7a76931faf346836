"""verifiers' classic SandboxEnv on vfrl's local sandbox: packages written as the community hub's are, unchanged.

The hub's sandbox packages subclass `vf.SandboxEnv`, await its `setup_state`, run their own `self.bash(...)` and
`self.sandbox_client.execute_command(...)` / `upload_file(...)` calls in the rollout's sandbox, often hide `bash`
from the model (`self.remove_tool(self.bash)`), and compute their reward in `post_rollout` before the sandbox goes.
These run with `env.sandbox = "local"` against the fake server (the sandbox is real: bubblewrap), and are refused in
one line without it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import sandbox_processes
from fake_openai import FakeOpenAI

import vfrl as vf
from vfrl import sandbox

pytestmark = pytest.mark.skipif(sandbox.isolation_problem() is not None, reason="this machine cannot isolate")

# a package as the hub writes one (e.g. gptworld, tensor_puzzles): the model's code is run by the package's own
# check in the sandbox, after files it uploads and folders it makes where a container image's code would
CHECKER = '''
import json
import tempfile

import verifiers as vf
from verifiers.envs.sandbox_env import SandboxEnv, SandboxState


class Checker(SandboxEnv):
    def __init__(self, **kwargs):
        super().__init__(sandbox_name="checker", docker_image="python:3.11-slim", **kwargs)
        self.remove_tool(self.bash)  # the model answers in text; the package runs the checks itself

    async def setup_state(self, state, **kwargs):
        state = await super().setup_state(state, **kwargs)
        await self.bash("mkdir -p /app/utils", sandbox_id=state["sandbox_id"], sandbox_state=state["sandbox_state"])
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write("def check(x):\\n    return x == 42\\n")
        await self.sandbox_client.upload_file(state["sandbox_id"], "/app/utils/check.py", f.name)
        return state

    async def env_response(self, messages, state, **kwargs):
        return [{"role": "user", "content": "and?"}]

    async def post_rollout(self, state):
        answer = state["completion"][-1]["content"]
        code = f"import sys; sys.path.insert(0, '/app/utils'); from check import check; print(check({answer!r}))"
        result = await self.sandbox_client.execute_command(state["sandbox_id"], f"python3 -c {json.dumps(code)}",
                                                           working_dir="/app", timeout=20)
        state["checked"] = result.stdout.strip()


def load_environment():
    def passed(state) -> float:
        return float(state.get("checked") == "False")  # a str is not 42: the check ran and said so

    return Checker(dataset=[{"question": "q", "answer": "42"}], rubric=vf.Rubric(funcs=[passed]), max_turns=1)
'''


def call(command: str) -> str:
    return "<tool_call>" + json.dumps({"name": "bash", "arguments": {"command": command}}) + "</tool_call>"


@pytest.fixture
def local(monkeypatch):
    monkeypatch.setenv(sandbox.MODE_ENV, "local")


def roll(env, replies):
    async def go():
        try:
            r, state = await env.rollout_with_state(FakeOpenAI(replies), "m", env.dataset[0], 0, {"max_tokens": 400})
            return await env.score(r, state), state
        finally:
            await env.aclose()

    return asyncio.run(go())


def test_the_models_bash_calls_run_in_a_sandbox_of_the_rollouts_own(local):
    env = vf.SandboxEnv(dataset=[{"question": "make a file", "answer": ""}], max_turns=4)
    assert [t.name for t in env.tool_defs] == ["bash"]
    assert set(env.tool_defs[0].parameters["properties"]) == {"command"}  # the sandbox's arguments are hidden
    r, state = roll(env, [call("echo hi > f.txt; id -u; pwd"), call("cat f.txt; ls /; echo $VFRL_SANDBOX"),
                          call("curl -s https://pypi.org || echo no network"), "done"])
    tools = [m["content"] for m in r.completion if m["role"] == "tool"]
    assert tools[0] == "0\n/sandbox"  # root inside, in its working folder
    assert tools[1].startswith("hi\n") and "\napp\n" in tools[1]  # the file stayed; / has a container's folders
    assert "local" not in tools[1]  # the test process's VFRL_SANDBOX is not in the sandbox's environment
    assert tools[2] == "no network"
    assert len(state["sandbox_state"]["command_execution_times"]) == 3 and env.active_sandboxes == set()
    assert sandbox_processes() == []  # deleted when the rollout ended


def test_a_hub_shaped_package_runs_unchanged_with_its_own_sandbox_calls(local, tmp_path, monkeypatch):
    (tmp_path / "sandbox_checker.py").write_text(CHECKER)
    monkeypatch.syspath_prepend(str(tmp_path))
    env = vf.load_environment("sandbox_checker")
    assert env.tool_defs == []  # it took bash away from the model
    r, state = roll(env, ["42"])
    assert state["checked"] == "False" and r.reward == 1.0 and not r.reward_errors
    assert sandbox_processes() == []


def test_without_env_sandbox_local_it_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv(sandbox.MODE_ENV, raising=False)
    (tmp_path / "sandbox_checker2.py").write_text(CHECKER)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(vf.envs.loader.EnvironmentLoadError) as e:
        vf.load_environment("sandbox_checker2")
    line = str(e.value)
    assert "\n" not in line and "set env.sandbox = \"local\" (vf-eval --sandbox local)" in line, line


def test_rollouts_at_once_get_sandboxes_of_their_own(local):
    env = vf.SandboxEnv(dataset=[{"question": "q", "answer": ""}], max_turns=3)

    def policy(prompt: str) -> str:
        return "done" if "<|im_start|>tool" in prompt else call("ls; touch mine")

    async def many():
        try:
            return await env.run_group(FakeOpenAI(policy), "m", 0, 4, {"max_tokens": 400}, asyncio.Semaphore(4))
        finally:
            await env.aclose()

    rollouts = asyncio.run(many())
    assert [[m["content"] for m in r.completion if m["role"] == "tool"] for r in rollouts] == [["(no output)"]] * 4


def test_vf_eval_takes_sandbox_local(tmp_path, monkeypatch):
    """vf-eval --sandbox local: the flag reaches the package's SandboxEnv (one process, as vf-eval runs)."""
    (tmp_path / "sandbox_checker3.py").write_text(CHECKER)
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    env.pop(sandbox.MODE_ENV, None)
    code = ("import asyncio, openai, sys\nsys.path.insert(0, %r)\nfrom fake_openai import FakeOpenAI\n"
            "openai.AsyncOpenAI = lambda **kw: FakeOpenAI(['42'])\nfrom vfrl.envs.cli.eval import main\n"
            "sys.argv = ['vf-eval', 'sandbox_checker3', '-n', '1', '-r', '1', '-m', 'm', '--token-ids', 'on', "
            "'-o', %r, '--sandbox', 'local']\nmain()\n") % (str(Path(__file__).parent), str(tmp_path / "out"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    [line] = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert json.loads(line)["reward"] == 1.0


def test_python_env_keeps_a_python_session_per_rollout(local):
    """verifiers' PythonEnv: the model's `python` calls share their variables, a last expression shows as Out[n],
    errors come back as the traceback, code past its time ends the session (and the next call starts a new one)."""

    def python_call(code: str) -> str:
        return "<tool_call>" + json.dumps({"name": "python", "arguments": {"code": code}}) + "</tool_call>"

    env = vf.PythonEnv(dataset=[{"question": "q", "answer": ""}], max_turns=6, timeout_per_command_seconds=2)
    assert [t.name for t in env.tool_defs] == ["python"]
    assert set(env.tool_defs[0].parameters["properties"]) == {"code"}
    r, state = roll(env, [python_call("x = 6\nprint('hi')\nx * 7"), python_call("x + 1"), python_call("1 / 0"),
                          python_call("while True: pass"), python_call("x"), "done"])
    tools = [m["content"] for m in r.completion if m["role"] == "tool"]
    assert tools[0] == "hi\nOut[1]: 42" and tools[1] == "Out[2]: 7"
    assert tools[2].startswith("Traceback") and tools[2].endswith("ZeroDivisionError: division by zero")
    assert tools[3].startswith("Error: the code ran past its 2s limit; the Python session was restarted")
    assert tools[4].endswith("NameError: name 'x' is not defined")  # a new session
    assert sandbox_processes() == []
