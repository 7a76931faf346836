"""verifiers' classic SandboxEnv on vfrl's local sandbox: a `bash` tool in a sandbox of the rollout's own.

As verifiers' (0.3): `setup_state` creates the rollout's sandbox (`state["sandbox_id"]`, `state["sandbox_state"]`),
the model's `bash` calls run in it (their sandbox arguments filled by `update_tool_args`, hidden from the model),
`post_rollout(state)` runs before it is deleted when the rollout ends (a package computes what its rubric needs
there), and what is left is deleted when the environment closes. `self.sandbox_client` takes the calls packages make
themselves (`execute_command`, `upload_file`, ...).

What differs from the hosted sandboxes: with `env.sandbox = "local"` the sandbox runs on this machine
(vfrl/sandbox/container.py): its system is this machine's, read-only, not the package's docker image; no network,
so a package that installs its own dependencies inside at start-up gets pip's error; its sizes are vfrl's limits,
not `cpu_cores`/`memory_gb`/`disk_size_gb`. Without that setting the environment is refused in one line, as vfrl
runs no hosted sandbox.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict

from vfrl import sandbox
from vfrl.envs.environment import teardown
from vfrl.envs.hook_results import Returned, maybe_await, positional_params
from vfrl.envs.multiturn import cleanup
from vfrl.envs.tools import StatefulToolEnv
from vfrl.errors import SandboxError
from vfrl.sandbox.client import LocalSandboxClient
from vfrl.sandbox.local import Limits

SandboxState = dict[str, Any]  # verifiers' type of a sandbox's record, named in such packages' signatures


class CreateSandboxRequest(BaseModel):
    """A hosted sandbox's settings as packages build and read them (`self.sandbox_request.model_copy()`)."""

    model_config = ConfigDict(extra="allow")

    name: str = "sandbox-env"
    docker_image: str = "python:3.11-slim"
    start_command: str = "tail -f /dev/null"
    cpu_cores: int = 1
    memory_gb: int = 2
    disk_size_gb: int = 5
    gpu_count: int = 0
    timeout_minutes: int = 60
    environment_vars: dict[str, str] | None = None


def refused(cls: str) -> str:
    return (f"vfrl does not run Prime Intellect's hosted sandboxes, which {cls} creates; set env.sandbox = \"local\" "
            "(vf-eval --sandbox local) to run them in vfrl's local sandbox on this machine")


class SandboxEnv(StatefulToolEnv):
    def __init__(self, sandbox_name: str = "sandbox-env", docker_image: str = "python:3.11-slim",
                 start_command: str = "tail -f /dev/null", cpu_cores: int = 1, memory_gb: int = 2,
                 disk_size_gb: int = 5, gpu_count: int = 0, timeout_minutes: int = 60,
                 timeout_per_command_seconds: int = 30, environment_vars: dict[str, str] | None = None,
                 **kwargs: Any):
        if sandbox.mode() != "local":
            raise NotImplementedError(refused(type(self).__name__))
        for hosted_only in ("team_id", "advanced_configs", "labels", "max_retries", "base_delay", "backoff_factor",
                            "max_backoff_seconds", "jitter", "stop_errors", "sandbox_client_max_workers",
                            "sandbox_client_max_connections", "sandbox_client_max_keepalive_connections"):
            kwargs.pop(hosted_only, None)  # the hosted client's settings; nothing here reads them
        super().__init__(**kwargs)
        self.timeout_per_command_seconds = timeout_per_command_seconds
        self.sandbox_client = LocalSandboxClient(Limits(wall_s=float(timeout_per_command_seconds),
                                                        cpu_s=timeout_minutes * 60, memory_mb=memory_gb * 1024,
                                                        scratch_mb=512))
        self.sandbox_request = CreateSandboxRequest(
            name=sandbox_name, docker_image=docker_image, start_command=start_command, cpu_cores=cpu_cores,
            memory_gb=memory_gb, disk_size_gb=disk_size_gb, gpu_count=gpu_count, timeout_minutes=timeout_minutes,
            environment_vars=environment_vars)
        self.active_sandboxes: set[str] = set()
        self.add_tool(self.bash, args_to_skip=["sandbox_id", "working_dir", "sandbox_state"])

    async def bash(self, command: str, sandbox_id: str, sandbox_state: SandboxState,
                   working_dir: str | None = None) -> str:
        """Execute `command` inside persistent sandbox container."""
        t0 = time.time()
        try:
            result = await self.sandbox_client.execute_command(sandbox_id, command, working_dir=working_dir,
                                                               timeout=self.timeout_per_command_seconds)
        except Exception as e:
            raise SandboxError(f"{type(e).__name__}: {e}") from e
        sandbox_state["command_execution_times"].append(time.time() - t0)
        if result.timed_out:
            return f"Error: Command timed out after {self.timeout_per_command_seconds}s"
        stdout, stderr = result.stdout.strip(), (result.stderr or "").strip()
        output = f"{stdout}\nstderr:\n{stderr}" if stdout and stderr else (f"stderr:\n{stderr}" if stderr else stdout)
        return output or "(no output)"

    def get_sandbox_request(self, state: dict[str, Any]) -> CreateSandboxRequest:
        """The request for this rollout's sandbox; override to vary it by rollout."""
        return self.sandbox_request.model_copy()

    async def setup_state(self, state: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        box = await self.sandbox_client.create(self.get_sandbox_request(state))
        self.active_sandboxes.add(box.id)
        state["sandbox_id"] = box.id
        state["sandbox_state"] = {"ready": True, "ready_wait_time": 0.0, "command_execution_times": []}
        return await maybe_await(super().setup_state(state, **kwargs)) or state

    def update_tool_args(self, tool_name: str, tool_args: dict[str, Any], messages: Any, state: dict[str, Any],
                         **kwargs: Any) -> Returned:
        args = Returned(tool_args)
        if tool_name == "bash":
            args.update(sandbox_id=state["sandbox_id"], sandbox_state=state["sandbox_state"],
                        working_dir=state.get("working_dir"))
        return args

    async def post_rollout(self, state: dict[str, Any]) -> None:
        """Before the rollout's sandbox is deleted: compute what the rubric needs from it into `state`."""

    @cleanup
    async def destroy_sandbox(self, state: dict[str, Any]) -> None:
        try:
            # verifiers' early releases passed (messages, state)
            asked = (state.get("completion"), state) if positional_params(self.post_rollout) >= 2 else (state,)
            await maybe_await(self.post_rollout(*asked))
        finally:
            if (sandbox_id := state.get("sandbox_id")) is not None:
                await self.sandbox_client.delete(sandbox_id)
                self.active_sandboxes.discard(sandbox_id)

    @teardown
    async def teardown_sandboxes(self) -> None:
        await self.sandbox_client.aclose()
        self.active_sandboxes.clear()


class PythonEnv(SandboxEnv):
    """verifiers' PythonEnv: the model's `python` tool runs its code in a persistent Python session in the rollout's
    sandbox (variables kept between calls; one past its time limit ends the session, the next starts anew), with
    `bash` kept from the model. `pip_install_packages` is not installed (the sandbox has no network): the code
    imports what /usr/bin/python3 has."""

    def __init__(self, pip_install_packages: str = "numpy sympy scipy", max_startup_wait_seconds: int = 30,
                 **kwargs: Any):
        self.pip_install_packages = pip_install_packages
        kwargs.setdefault("sandbox_name", "python-env")
        super().__init__(**kwargs)
        self.add_tool(self.python, args_to_skip=["sandbox_id", "sandbox_state", "python_state"])
        self.remove_tool(self.bash)

    async def setup_state(self, state: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        state = await super().setup_state(state, **kwargs)
        state["python_state"] = {"ready": True, "execution_count": 0, "ready_wait_time": 0.0}
        return state

    def update_tool_args(self, tool_name: str, tool_args: dict[str, Any], messages: Any, state: dict[str, Any],
                         **kwargs: Any) -> Returned:
        args = super().update_tool_args(tool_name, tool_args, messages, state, **kwargs)
        if tool_name == "python":
            args.update(sandbox_id=state["sandbox_id"], sandbox_state=state["sandbox_state"],
                        python_state=state["python_state"])
        return args

    async def python(self, code: str, sandbox_id: str, sandbox_state: SandboxState,
                     python_state: dict[str, Any]) -> str:
        """Execute `code` inside persistent Python REPL.

        Args:
            code: Python code; a last expression's value is shown, as in a REPL.
        """
        reply = await self.sandbox_client.run_python(sandbox_id, code, timeout=self.timeout_per_command_seconds)
        if reply["status"] == "timeout":
            return (f"Error: the code ran past its {self.timeout_per_command_seconds}s limit; the Python session was "
                    "restarted (its variables are gone)")
        python_state["execution_count"] = count = reply.get("execution_count", python_state["execution_count"] + 1)
        stdout, stderr = (reply.get("stdout") or "").rstrip(), (reply.get("stderr") or "").rstrip()
        parts = [text for text in (stdout, f"stderr:\n{stderr}" if stderr else "") if text]
        if reply.get("result") is not None:
            parts.append(reply["result"].rstrip() if reply["status"] == "error" else f"Out[{count}]: {reply['result']}")
        return "\n".join(parts) or "(no output)"
