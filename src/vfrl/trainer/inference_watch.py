"""Is the vLLM server still there? A watch that runs beside the training loop.

Without it the loop learns of a dead server only when a request fails (after the client's retries,
with hundreds of lines of connection tracebacks), and of a hung one (SIGSTOP, a deadlock) only when
`generation_timeout` (600 s) runs out. The watch looks at the server's process (vf-vllm's pid file)
every second and at `/health`; the server is lost when its process is gone, or when `/health` has not
answered for `inference_timeout` seconds. The trainer then writes an emergency checkpoint and stops
with one line (trainer/cli.py).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx

from vfrl.inference.endpoints import server_root
from vfrl.proc_table import pid_alive


class InferenceLost(RuntimeError):
    """The vLLM server exited or stopped answering; the message says which, in a few words."""


def server_pid(pid_file: Path | None) -> int | None:
    try:
        return int(pid_file.read_text()) if pid_file else None
    except (OSError, ValueError):
        return None


def process_gone(pid_file: Path | None) -> str | None:
    pid = server_pid(pid_file)
    return f"the vLLM server (pid {pid}) exited" if pid is not None and not pid_alive(pid) else None


async def watch_inference(base_url: str, pid_file: Path | None, unresponsive_s: float, poll: float = 1.0) -> None:
    """Return never; raise InferenceLost once the server is gone or has not answered /health for `unresponsive_s`."""
    health = f"{server_root(base_url)}/health"
    last_answer = time.monotonic()
    async with httpx.AsyncClient(timeout=min(5.0, unresponsive_s)) as http:
        while True:
            if gone := process_gone(pid_file):
                raise InferenceLost(gone)
            try:
                if (await http.get(health)).status_code == 200:
                    last_answer = time.monotonic()
            except httpx.HTTPError:
                pass
            if (silent := time.monotonic() - last_answer) > unresponsive_s:
                raise InferenceLost(f"the vLLM server has not answered {health} for {silent:.0f}s "
                                    f"(inference_timeout = {unresponsive_s:g})")
            await asyncio.sleep(poll)


def wait_for_server(base_url: str, timeout: float, inference_pid_file: Path | None = None) -> float:
    """Block until vLLM answers /health; returns seconds waited. InferenceLost at once if the server process died."""
    t0 = time.time()
    root = server_root(base_url)
    while True:
        try:
            if httpx.get(f"{root}/health", timeout=2).status_code == 200:
                return time.time() - t0
        except httpx.TransportError:
            pass
        if gone := process_gone(inference_pid_file):
            raise InferenceLost(f"{gone} during start-up")
        if time.time() - t0 > timeout:
            raise InferenceLost(f"vLLM did not answer {root}/health within {timeout:.0f}s of starting")
        time.sleep(1)


def inference_problem(base_url: str, pid_file: Path | None) -> str | None:
    """After the loop failed: was the server the cause? Why, in a few words; None when it is up and answering."""
    if gone := process_gone(pid_file):
        return gone
    try:
        if httpx.get(f"{server_root(base_url)}/health", timeout=5).status_code == 200:
            return None
        return f"the vLLM server at {server_root(base_url)} answers /health with an error"
    except httpx.ConnectError:  # nothing listens: the server process is gone (its supervisor may still be reaping)
        return f"the vLLM server at {server_root(base_url)} exited (connection refused)"
    except httpx.HTTPError:
        return f"the vLLM server at {server_root(base_url)} does not answer"
