"""Is the vLLM server still there? A watch that runs beside the training loop.

Without it the loop learns of a dead server only when a request fails (after the client's retries,
with hundreds of lines of connection tracebacks), and of a hung one (SIGSTOP, a deadlock) only when
`generation_timeout` (600 s) runs out. The watch looks at the server's process (vf-vllm's pid file)
every second and at `/health`; the server is lost when its process is gone, or when `/health` has not
answered for `inference_timeout` seconds. The trainer then writes an emergency checkpoint and stops
with one line (trainer/cli.py).

A server vf-vllm is starting again (it died while it served: inference.max_restarts, inference/supervisor.py)
is not lost: vf-vllm writes each restart to <run_dir>/inference.restarts.jsonl, the watch then gives the new
server the start-up's time, and the trainer waits for it and goes on (RLTrainer.heal).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx

from vfrl.inference.endpoints import client_host, server_root
from vfrl.inference.served_port import read_port
from vfrl.proc_table import pid_alive
from vfrl.run_dir import RunDir

START_TIMEOUT = 900.0  # seconds a server (vf-vllm's, at launch or started again) may take to answer /health


class InferenceLost(RuntimeError):
    """The vLLM server exited or stopped answering; the message says which, in a few words."""


def server_pid(pid_file: Path | None) -> int | None:
    try:
        return int(pid_file.read_text()) if pid_file else None
    except (OSError, ValueError):
        return None


def process_gone(pid_file: Path | None) -> str | None:
    pid = server_pid(pid_file)
    if pid is None or pid_alive(pid):
        return None
    return f"the vLLM server (pid {pid}) exited{restarted(pid_file)}"


def restarted(pid_file: Path | None) -> str:
    """' (vf-vllm had started it again Nx before)', or nothing."""
    return f" (vf-vllm had started it again {n}x before)" if (n := len(restarts(pid_file))) else ""


def restarts(pid_file: Path | None) -> list[dict]:
    """The restarts the run's vf-vllm recorded (none for a server vf-rl did not start)."""
    return RunDir(pid_file.parent).server_restarts() if pid_file else []


async def watch_inference(base_url: str, pid_file: Path | None, unresponsive_s: float, poll: float = 1.0) -> None:
    """Return never; raise InferenceLost once the server is gone or has not answered /health for `unresponsive_s`
    (START_TIMEOUT while vf-vllm starts it again)."""
    health = f"{server_root(base_url)}/health"
    last_answer, answered_at = time.monotonic(), time.time()  # the restarts file is read only once it is silent
    async with httpx.AsyncClient(timeout=min(5.0, unresponsive_s)) as http:
        while True:
            if gone := process_gone(pid_file):
                raise InferenceLost(gone)
            try:
                if (await http.get(health)).status_code == 200:
                    last_answer, answered_at = time.monotonic(), time.time()
            except httpx.HTTPError:
                pass
            if (silent := time.monotonic() - last_answer) > unresponsive_s:
                restarting = any(r["time"] > answered_at for r in restarts(pid_file))
                if silent > (START_TIMEOUT if restarting else unresponsive_s):
                    raise InferenceLost(f"the vLLM server has not answered {health} for {silent:.0f}s "
                                        + ("since vf-vllm started it again" if restarting
                                           else f"(inference_timeout = {unresponsive_s:g})"))
            await asyncio.sleep(poll)


async def restart_under_way(base_url: str, pid_file: Path | None, seen: int, max_restarts: int,
                            notice_s: float = 30.0) -> dict | None:
    """After the loop failed: is vf-vllm starting the server again (a restart after the first `seen`)? Its record,
    or None when it is not: `max_restarts` spent, no restart recorded within `notice_s` while the server is silent
    and vf-vllm alive, vf-vllm gone, or the server answering (then the failure was not the server's)."""
    if seen >= max_restarts:  # vf-vllm starts no more
        return None
    t0 = time.monotonic()
    async with httpx.AsyncClient(timeout=2.0) as http:
        while len(done := restarts(pid_file)) <= seen:
            if pid_file is None or process_gone(pid_file) or time.monotonic() > t0 + notice_s:
                return None
            try:  # asked after vf-vllm's own watch (0.5 s) has had time to see a dead engine core
                if time.monotonic() > t0 + 3 and (await http.get(f"{server_root(base_url)}/health")).status_code == 200:
                    return None
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.5)
    return done[-1]


def own_server_url(inference, paths: RunDir, timeout: float) -> str:
    """The OpenAI base URL of the run's own vLLM (`inference`: the config's [inference]): its port, or with port 0
    the port vLLM bound, read from the run directory once vf-vllm has found it (inference/served_port.py)."""
    if inference.port:
        return inference.url
    return listening_url(inference.host, paths.inference_port, paths.inference_pid, timeout)


def listening_url(host: str, port_file: Path, pid_file: Path | None, timeout: float) -> str:
    """The base URL on the port vf-vllm wrote to `port_file`, once it has. InferenceLost when the server (vf-vllm's
    `pid_file`) exits or `timeout` passes first."""
    t0 = time.time()
    while (port := read_port(port_file)) is None:
        if gone := process_gone(pid_file):
            raise InferenceLost(f"{gone} during start-up")
        if time.time() - t0 > timeout:
            raise InferenceLost(f"vLLM did not listen within {timeout:.0f}s of starting (vf-vllm writes the port it "
                                f"bound to {port_file})")
        time.sleep(0.5)
    return f"http://{client_host(host)}:{port}/v1"


def wait_for_server(base_url: str, timeout: float, inference_pid_file: Path | None = None,
                    api_key: str | None = None) -> float:
    """Block until vLLM answers /health; returns seconds waited. InferenceLost at once if the server process died.

    With `api_key` (the run's), the server must also take it (`GET /models`): /health is open to all, and a port
    named in the config can be held by another run's server (one that bound it before this run's vLLM), which then
    answers /health for it (and 401 to its first request). Such a server is never taken for the run's own: the wait
    goes on until the run's own answers, or its process ends (it could not bind), said in one line."""
    t0 = time.time()
    root = server_root(base_url)
    other = False  # a server that is not the run's answered at root
    while True:
        try:
            if httpx.get(f"{root}/health", timeout=2).status_code == 200:
                if api_key is None or takes_key(base_url, api_key):
                    return time.time() - t0
                other = True
        except httpx.TransportError:
            pass
        if gone := process_gone(inference_pid_file):
            if other:
                raise InferenceLost(f"{gone} during start-up; another server answers at {root} and refuses this run's "
                                    "API key: it took the port before this run's vLLM could bind it. Start the run "
                                    "again, or set inference.port = 0: vLLM then binds a free port itself")
            raise InferenceLost(f"{gone} during start-up")
        if time.time() - t0 > timeout:
            whose = " (one that refuses this run's API key answers /health there)" if other else ""
            raise InferenceLost(f"vLLM did not answer {root}/health within {timeout:.0f}s of starting{whose}")
        time.sleep(1)


def takes_key(base_url: str, api_key: str) -> bool:
    """Does the server at `base_url` take `api_key`? (vf-vllm's key check answers 401 to any other.)"""
    try:
        reply = httpx.get(f"{base_url.rstrip('/')}/models", headers={"Authorization": f"Bearer {api_key}"}, timeout=5)
    except httpx.TransportError:
        return False
    return reply.status_code not in (401, 403)


def inference_problem(base_url: str | None, pid_file: Path | None) -> str | None:
    """After the loop failed: was the server the cause? Why, in a few words; None when it is up and answering
    (or not yet listening: `base_url` None)."""
    if gone := process_gone(pid_file):
        return gone
    if base_url is None:
        return None
    try:
        if httpx.get(f"{server_root(base_url)}/health", timeout=5).status_code == 200:
            return None
        return f"the vLLM server at {server_root(base_url)} answers /health with an error"
    except httpx.ConnectError:  # nothing listens: the server process is gone (its supervisor may still be reaping)
        return f"the vLLM server at {server_root(base_url)} exited (connection refused){restarted(pid_file)}"
    except httpx.HTTPError:
        return f"the vLLM server at {server_root(base_url)} does not answer"
