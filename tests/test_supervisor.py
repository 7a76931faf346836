"""vf-vllm leaves no vLLM process behind, whichever process of the server's tree dies first (inference/supervisor.py,
inference/reaper.py).

The stand-in server here is a process tree shaped as vLLM's: a leader that ignores SIGTERM (as vLLM's API server
can hang in its own shutdown) and a child titled `VLLM::EngineCore`. The real vf-vllm tree is killed the same
ways in test_faults_e2e.py (the supervisor, mid-run) and below (the engine core of the session's tool server
is not touched: a server of its own).
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from test_faults_e2e import vllm_server_pid
from vfrl.inference.supervisor import ENGINE_CORE
from vfrl.proc_table import group_members, pid_alive

# the leader: starts an "engine core" child, ignores SIGTERM when IGNORE_TERM is set, prints both pids, sleeps
FAKE_SERVER = f"""
import os, signal, subprocess, sys, time
if os.environ.get("IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
engine = subprocess.Popen([{ENGINE_CORE!r}, "-c", "import time; time.sleep(600)"], executable=sys.executable)
print(engine.pid, flush=True)
time.sleep(600)
"""

# vf-vllm's part: run_supervised over the stand-in server; prints the server's pid (its group), then its exit code
SUPERVISOR = f"""
import sys
from vfrl.inference.supervisor import run_supervised
code = run_supervised([sys.executable, "-c", {FAKE_SERVER!r}], env=None,
                      started=lambda pid: print("server", pid, flush=True))
print("exit", code, flush=True)
"""


def wait_until(check, timeout: float, what: str, poll: float = 0.1):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout:.0f}s")
        time.sleep(poll)
    return value


def start_supervised(tmp_path: Path, hangs_on_term: bool = True) -> tuple[subprocess.Popen, int, int, Path]:
    """(vf-vllm stand-in, server group, engine core pid, its output file)."""
    out = tmp_path / "supervisor.out"
    env = {**os.environ, **({"IGNORE_TERM": "1"} if hangs_on_term else {})}
    proc = subprocess.Popen([sys.executable, "-c", SUPERVISOR], stdout=open(out, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True, env=env)
    lines = wait_until(lambda: (t := out.read_text().split()) and len(t) >= 3 and t, 60, "the server start")
    pgid, engine = int(lines[1]), int(lines[2])
    wait_until(lambda: f"vLLM's engine core is pid {engine}" in out.read_text(), 30, "the engine core seen")
    return proc, pgid, engine, out


def cleanup(pgid: int, proc: subprocess.Popen) -> None:
    for group in (pgid, proc.pid):
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_dead_engine_core_ends_the_server_at_once(tmp_path):
    proc, pgid, engine, out = start_supervised(tmp_path)
    try:
        t0 = time.monotonic()
        os.kill(engine, signal.SIGKILL)
        proc.wait(timeout=30)  # the leader ignores SIGTERM: ended with SIGKILL after the grace
        took = time.monotonic() - t0
        assert group_members(pgid) == []
        text = out.read_text()
        assert f"vLLM's engine core (pid {engine}) exited while the server ran; ending the server" in text, text
        assert "exit 137" in text and took < 10, (took, text)
    finally:
        cleanup(pgid, proc)


def test_a_killed_supervisor_leaves_no_server_process_behind(tmp_path):
    proc, pgid, engine, out = start_supervised(tmp_path)
    try:
        os.kill(proc.pid, signal.SIGKILL)  # vf-vllm itself: kill -9, the OOM killer
        proc.wait(timeout=10)
        assert len(group_members(pgid)) == 2  # the server and its engine core outlive it for a moment
        wait_until(lambda: group_members(pgid) == [], 10, "the server's group ending")
        assert not pid_alive(engine)
    finally:
        cleanup(pgid, proc)


def test_the_reaper_leaves_with_a_clean_supervisor_exit_and_ignores_the_panes_signals(tmp_path):
    """SIGTERM to vf-vllm's group (vf-rl stop, the Python API's stop_server): the server ends through vf-vllm, and
    the reaper (in a session of its own) neither dies first nor stays."""
    proc, pgid, engine, out = start_supervised(tmp_path, hangs_on_term=False)
    try:
        reapers = [pid for pid in map(int, subprocess.run(["pgrep", "-f", f"vfrl.inference.reaper {pgid} "],
                                                          capture_output=True, text=True).stdout.split())]
        assert len(reapers) == 1, reapers
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        text = out.read_text()
        assert group_members(pgid) == [] and "exit 143" in text and "exited while the server ran" not in text, text
        wait_until(lambda: not pid_alive(reapers[0]), 5, "the reaper's exit")
    finally:
        cleanup(pgid, proc)


# ---------- the real vf-vllm (vLLM's CPU server, the tiny model) ----------
def real_tree(tmp_path: Path, tiny_model) -> tuple:
    """A real vf-vllm serving the tiny model: (its context, supervisor pid, server group, engine core pid)."""
    from vfrl.testing import free_port, vf_vllm, write_config

    port = free_port()
    config = write_config(tmp_path / "config.toml", tiny_model, port, tmp_path)
    served = vf_vllm(config, port, "k", tmp_path / "inference.log")
    served.__enter__()
    supervisor = int((tmp_path / "inference.pid").read_text())
    server = vllm_server_pid(tmp_path)  # vf-vllm's child beside its reaper
    log = tmp_path / "inference.log"
    engine = int(wait_until(lambda: (t := log.read_text()).count("engine core is pid ") and
                            t.split("engine core is pid ")[1].split()[0], 60, "the engine core named in the log"))
    return served, supervisor, server, engine


@pytest.mark.e2e
@pytest.mark.parametrize("victim", ["engine core", "vf-vllm"])
def test_real_vllm_tree_is_gone_within_seconds_of_a_kill(tmp_path, tiny_model, victim):
    """kill -9 of the engine core (the OOM killer's likeliest pick) or of vf-vllm itself: within seconds no
    process of the server is left (the engine core: vf-vllm ends the API server, which could hang without it;
    vf-vllm: its reaper ends the server's group)."""
    served, supervisor, server, engine = real_tree(tmp_path, tiny_model)
    try:
        t0 = time.monotonic()
        os.kill(engine if victim == "engine core" else supervisor, signal.SIGKILL)
        wait_until(lambda: group_members(server) == [] and not pid_alive(supervisor), 20, "the tree's end")
        took = time.monotonic() - t0
        said = (f"vLLM's engine core (pid {engine}) exited while the server ran" if victim == "engine core" else
                f"vf-vllm (pid {supervisor}) is gone; its reaper ended")  # written once the group is gone
        wait_until(lambda: said in (tmp_path / "inference.log").read_text(), 10, "the log line")
        assert took < 20
    finally:
        cleanup(server, SimpleNamespace(pid=supervisor))
        served.__exit__(None, None, None)
