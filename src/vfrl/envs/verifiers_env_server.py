"""verifiers 0.4 episodes run by verifiers' own env server, in worker processes beside the trainer (`env.workers`).

By default a verifiers 0.4 environment runs its episodes in the trainer's process (verifiers_v1.py): each costs
that process ~5 ms of CPU (verifiers' trace graph, its interception server, its chat program), which on a GPU host
sampling 512 rollouts a step is seconds of the one Python thread the trainer also steps with. With
`env.workers = N`, episodes run in verifiers' env server (`verifiers.v1.serve.serve_env`, the server prime-rl runs
for each environment): one `EnvServer` process, or for N > 1 a broker over N of them, each loading the environment
from its config; the trainer sends each episode's task, model and sampling (`EnvClient.run`) and reads back the
episode, which vfrl turns into rollouts as it does a local one. Every worker applies what vfrl applies in its own
process for verifiers (`worker_setup`: the hot-path fixes, the text tool-call parser); its episodes sample with a
request each (a group's first turns share one request only among episodes of one process).

The server starts with the environment's first rollout (again in a new event loop, the old one's ended) and stops
with `aclose` or when this process exits; killed, it leaves none behind: the server watches a pipe from this process
and ends itself when the pipe closes.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import multiprocessing
import multiprocessing.util  # registers its exit handler (waits on children) before end_all below
import queue
import sys
import weakref
from typing import Any, Callable

START_TIMEOUT_S = 300  # a worker imports verifiers and loads the environment; its tool servers may take minutes
RUNNING: weakref.WeakSet = weakref.WeakSet()  # servers to end at exit, before multiprocessing waits on its children


class EnvServerError(RuntimeError):
    """The env server could not start; the message is one line for the user."""


def worker_setup() -> None:
    """Run by the env server's process and each of its workers before it loads the environment: warnings and
    errors to stderr (the trainer's log), and vfrl's fixes for verifiers, as vf-train applies them."""
    from vfrl.envs import text_tool_calls, verifiers_group_request, verifiers_hot_path

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s env-server %(levelname)s %(name)s: %(message)s")
    verifiers_hot_path.apply()
    verifiers_group_request.install()
    text_tool_calls.register()


def serve(**kwargs) -> None:
    """verifiers' `serve_env`, imported in the spawned process."""
    from verifiers.v1.serve import serve_env

    serve_env(**kwargs)


class EnvServerProcess:
    """verifiers' env server for one environment config, with `workers` worker processes, and a client to it."""

    def __init__(self, env_id: str, config_data: dict[str, Any], workers: int, target: Callable = serve):
        self.env_id, self.config_data, self.workers, self.target = env_id, config_data, workers, target
        self.process = None
        self.client = None
        self._pipe = None

    async def start(self) -> None:
        """Spawn the server and wait until it answers; EnvServerError when it exits or does not answer first."""
        from verifiers.v1.serve import EnvClient

        spawn = multiprocessing.get_context("spawn")
        addresses, (self._pipe, child_end) = spawn.Queue(), spawn.Pipe()
        self.process = spawn.Process(target=self.target, daemon=False, kwargs=dict(
            max_workers=self.workers, elastic=False, address="tcp://127.0.0.1:0", address_queue=addresses,
            death_pipe=child_end, log_setup=worker_setup, config_data=self.config_data))
        await asyncio.to_thread(self.process.start)
        RUNNING.add(self)
        child_end.close()  # the server's end: this process's exit closes ours, which ends the server
        address = await asyncio.to_thread(self._address, addresses)
        self.client = EnvClient(address)
        try:
            await self.client.wait_for_server_startup(timeout=START_TIMEOUT_S, interval=0.2)
        except TimeoutError:
            await self.stop()
            raise EnvServerError(f"environment '{self.env_id}': verifiers' env server at {address} did not answer "
                                 f"in {START_TIMEOUT_S}s (its log lines are in the trainer's log)") from None

    def _address(self, addresses) -> str:
        """The address the server bound, as it reports it; EnvServerError when it exits first."""
        waited = 0.0
        while True:
            try:
                return addresses.get(timeout=0.5)
            except queue.Empty:
                waited += 0.5
            if not self.process.is_alive():
                raise EnvServerError(
                    f"environment '{self.env_id}': verifiers' env server exited with code {self.process.exitcode} "
                    f"before it served (env.workers = {self.workers}; its error is in the trainer's log)")
            if waited >= START_TIMEOUT_S:
                self.process.kill()
                raise EnvServerError(f"environment '{self.env_id}': verifiers' env server did not start in "
                                     f"{START_TIMEOUT_S}s (env.workers = {self.workers})")

    async def run(self, context, task_data: dict[str, Any]):
        """One episode of the task with `task_data` (its dumped TaskData), as verifiers' wire Episode."""
        return await self.client.run(context.client, context.model, context.sampling, task_data)

    async def stop(self) -> None:
        """Close the client and end the server."""
        if self.client is not None:
            client, self.client = self.client, None
            await client.close()
        await asyncio.to_thread(self.end)

    def end(self) -> None:
        """End the server process (SIGTERM: it closes its workers and their resources), killed if it lingers."""
        if self.process is not None:
            process, self.process = self.process, None
            process.terminate()
            process.join(30)
            if process.is_alive():
                process.kill()
                process.join(5)
        if self._pipe is not None:
            with contextlib.suppress(OSError):
                self._pipe.close()
            self._pipe = None


@atexit.register  # after multiprocessing's own exit handler is registered, so it runs first
def end_all() -> None:
    for server in list(RUNNING):
        server.end()
