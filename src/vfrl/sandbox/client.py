"""A stand-in for Prime Intellect's sandbox client (`prime_sandboxes`) that runs each sandbox on this machine
(container.py): the calls verifiers' SandboxEnv and the community's packages make, by the same names."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from vfrl.sandbox.container import CommandResult, LocalContainer
from vfrl.sandbox.local import Limits


class LocalSandboxClient:
    """`create`, `wait_for_creation`, `execute_command`, `upload_file`, `delete`, `bulk_delete`, `list`, `teardown`."""

    def __init__(self, limits: Limits = Limits(wall_s=60.0, cpu_s=60, scratch_mb=512)):
        self.limits = limits
        self.sandboxes: dict[str, LocalContainer] = {}

    async def create(self, request: Any = None) -> SimpleNamespace:
        """A new sandbox (`request`, a hosted one's settings, is read for its name only: the image is this
        machine's system, its sizes the client's limits)."""
        box = await LocalContainer(self.limits).start()
        self.sandboxes[box.id] = box
        return SimpleNamespace(id=box.id, name=getattr(request, "name", None), status="RUNNING")

    async def wait_for_creation(self, sandbox_id: str, *args: Any, **kwargs: Any) -> None:
        self.get(sandbox_id)  # ready as soon as created

    async def execute_command(self, sandbox_id: str, command: str, working_dir: str | None = None,
                              timeout: float | None = None, **kwargs: Any) -> CommandResult:
        return await self.get(sandbox_id).run(command, cwd=working_dir, timeout=timeout)

    async def run_python(self, sandbox_id: str, code: str, timeout: float | None = None) -> dict:
        """`code` in the sandbox's persistent Python session (container.py: LocalContainer.python)."""
        return await self.get(sandbox_id).python(code, timeout=timeout)

    async def upload_file(self, sandbox_id: str, file_path: str, local_file_path: str) -> None:
        await self.get(sandbox_id).write(file_path, Path(local_file_path).read_bytes())

    async def delete(self, sandbox_id: str) -> None:
        if (box := self.sandboxes.pop(sandbox_id, None)) is not None:
            await box.close()

    async def bulk_delete(self, sandbox_ids: list[str] | None = None, **kwargs: Any) -> None:
        for sandbox_id in list(sandbox_ids or kwargs.get("global_ids") or []):
            await self.delete(sandbox_id)

    async def list(self, *args: Any, **kwargs: Any) -> list[SimpleNamespace]:
        return [SimpleNamespace(id=i, status="RUNNING") for i in self.sandboxes]

    def get(self, sandbox_id: str) -> LocalContainer:
        if sandbox_id not in self.sandboxes:
            raise KeyError(f"no local sandbox {sandbox_id!r} (deleted, or never created)")
        return self.sandboxes[sandbox_id]

    async def aclose(self) -> None:
        await self.bulk_delete(list(self.sandboxes))

    def teardown(self) -> None:
        """verifiers' client closes its threads here; the sandboxes end with their own close (aclose)."""
