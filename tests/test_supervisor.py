"""vf-vllm leaves no vLLM process behind, whichever process of the server's tree dies first (inference/supervisor.py,
inference/reaper.py).

The stand-in server here is a process tree shaped as vLLM's: a leader that ignores SIGTERM (as vLLM's API server
can hang in its own shutdown) and a child titled `VLLM::EngineCore`. The real vf-vllm tree is killed the same
ways mid-run in test_faults_e2e.py (its engine core: started again; vf-vllm itself: its reaper ends the server).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vfrl.inference.supervisor import ENGINE_CORE
from vfrl.proc_table import group_members, pid_alive

# the "engine core": sleeps; with ENGINE_FORKS set, it forks short-lived children all along, which carry its
# title (argv[0]) until they exit, as vLLM's engine core forks helpers that carry it until they exec
ENGINE = """
import os, time
while os.environ.get("ENGINE_FORKS"):
    if os.fork() == 0:
        time.sleep(0.7)
        os._exit(0)
    os.wait()
    time.sleep(0.2)
time.sleep(600)
"""

# the leader: starts an "engine core" child, ignores SIGTERM when IGNORE_TERM is set, prints both pids, sleeps
FAKE_SERVER = f"""
import os, signal, subprocess, sys, time
ENGINE = {ENGINE!r}
if os.environ.get("IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
engine = subprocess.Popen([{ENGINE_CORE!r}, "-c", ENGINE], executable=sys.executable)
print(engine.pid, flush=True)
if os.environ.get("SERVE"):  # serves: /health answers 200 on the port of its --port (0: one it binds free)
    import http.server
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])), Health).serve_forever()
time.sleep(600)
"""

# vf-vllm's part: run_supervised over the stand-in server; prints the server's pid (its group), then its exit code.
# With SERVE set, the stand-in answers /health on PORT (0: a port it binds free, which vf-vllm finds and writes to
# PORT_FILE); vf-vllm asks it and starts a server that answered
# it again up to MAX_RESTARTS times.
SUPERVISOR = f"""
import os, sys
from vfrl.inference import supervisor
from vfrl.inference.supervisor import run_supervised
supervisor.TRAINER_GRACE_S = 1.0
supervisor.STOP_GRACE_S = 2.0
from vfrl.inference.served_port import ServedPort
from pathlib import Path
trainer_pid = Path(os.environ["TRAINER_PID"]) if "TRAINER_PID" in os.environ else None
port = ServedPort("127.0.0.1", int(os.environ["PORT"]), Path(os.environ["PORT_FILE"]) if "PORT_FILE" in os.environ
                  else None) if "PORT" in os.environ else None
code = run_supervised([sys.executable, "-c", {FAKE_SERVER!r}, "--port", os.environ.get("PORT", "0")], env=None,
                      trainer_pids=[trainer_pid] if trainer_pid else [],
                      started=lambda pid: print("server", pid, flush=True), port=port,
                      max_restarts=int(os.environ.get("MAX_RESTARTS", "0")), restarts_log=os.environ.get("RESTARTS"),
                      engines_file=os.environ.get("ENGINES"))
print("exit", code, flush=True)
"""


def wait_until(check, timeout: float, what: str, poll: float = 0.1):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout:.0f}s")
        time.sleep(poll)
    return value


def start_supervised(tmp_path: Path, hangs_on_term: bool = True, **env_extra) -> tuple[subprocess.Popen, int, int,
                                                                                      Path]:
    """(vf-vllm stand-in, server group, engine core pid, its output file)."""
    out = tmp_path / "supervisor.out"
    env = {**os.environ, **({"IGNORE_TERM": "1"} if hangs_on_term else {}), **env_extra}
    proc = subprocess.Popen([sys.executable, "-c", SUPERVISOR], stdout=open(out, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True, env=env)
    pgid, engine = wait_until(lambda: (found := started(out)) and found[0], 60, "the server start")
    return proc, pgid, engine, out


def started(out: Path) -> list[tuple[int, int]]:
    """(server pid, its engine core's pid) per server start, from what the stand-ins print and vf-vllm logs (the
    two processes write to the same file, in either order)."""
    text = out.read_text()
    servers = [int(line.split()[1]) for line in text.splitlines() if line.startswith("server ")]
    engines = [int(line.split()[-1]) for line in text.splitlines() if "engine core is pid " in line]
    return list(zip(servers, engines))


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


def test_a_short_lived_child_of_the_engine_core_with_its_title_does_not_end_the_server(tmp_path):
    """The engine core forks helpers that carry its title until they exec or exit: vf-vllm took one for a second
    engine core and, once it ended, killed a healthy server (exit 137, a restart spent). Only the engine core itself
    is watched."""
    proc, pgid, engine, out = start_supervised(tmp_path, ENGINE_FORKS="1")
    try:
        time.sleep(4)  # several children come and go, each seen by vf-vllm's 0.5 s polls
        text = out.read_text()
        assert proc.poll() is None and "exited while the server ran" not in text, text
        assert [int(line.split()[-1]) for line in text.splitlines() if "engine core is pid" in line] == [engine]
    finally:
        cleanup(pgid, proc)


def test_the_runs_process_search_finds_the_engine_core_by_vf_vllms_record_alone(tmp_path):
    """vLLM's process title overwrites the engine core's environment, the run's marker with it, so with its pane,
    vf-vllm and the server gone nothing led to it. vf-vllm records each engine core it sees (pid and start time)
    in the run dir, and the search finds it there with no pane and no marker; a record whose pid is now another
    process's (another start time) names nothing."""
    from vfrl.launcher import procs
    from vfrl.proc_table import stat
    from vfrl.run_dir import RunDir

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    engines = RunDir(run_dir).inference_engines
    proc, pgid, engine, out = start_supervised(tmp_path, ENGINES=str(engines))
    try:
        start = stat(engine).start
        wait_until(lambda: engines.exists() and f"{engine} {start}" in engines.read_text(), 30, "the engine's record")
        assert b"VFRL_RUN_DIR" not in Path(f"/proc/{engine}/environ").read_bytes()  # the marker cannot find it
        assert procs.Proc(engine, start) in procs.pane_processes([], run_dir)
        other = tmp_path / "other"
        other.mkdir()
        RunDir(other).inference_engines.write_text(f"{engine} {start + 1}\nnot a record\n")
        assert procs.pane_processes([], other) == set()
        engines.unlink()
        assert procs.Proc(engine, start) not in procs.pane_processes([], run_dir)  # the record is what finds it
    finally:
        cleanup(pgid, proc)


def test_a_server_that_dies_while_serving_is_started_again_up_to_max_restarts(tmp_path):
    """Its engine core killed while /health answered: the group ended, a new server started and recorded; killed
    again with no restart left: vf-vllm exits with the server's code."""
    from vfrl.testing import free_port

    restarts, port = tmp_path / "restarts.jsonl", free_port()
    proc, pgid, engine, out = start_supervised(tmp_path, False, SERVE="1", PORT=str(port), MAX_RESTARTS="1",
                                               RESTARTS=str(restarts))
    second = None
    try:
        time.sleep(1.5)  # vf-vllm sees /health answer
        os.kill(engine, signal.SIGKILL)
        second, engine2 = wait_until(lambda: len(found := started(out)) > 1 and found[1], 30,
                                     "the server started again")
        assert second != pgid and group_members(pgid) == []  # the first server is gone whole
        record = json.loads(restarts.read_text())
        assert record["restart"] == 1 and record["max_restarts"] == 1 and record["exit_code"] == 143, record
        assert "after serving for" in out.read_text() and "starting it again (1 of 1" in out.read_text()
        time.sleep(1.5)
        os.kill(engine2, signal.SIGKILL)
        proc.wait(timeout=30)
        text = out.read_text()
        assert "exit 143" in text and "again after 1 restart(s)" in text and group_members(second) == [], text
        assert len(restarts.read_text().splitlines()) == 1
    finally:
        cleanup(pgid, proc)
        if second:
            cleanup(second, proc)


def test_port_0_the_port_the_server_bound_is_written_and_a_restart_serves_on_it(tmp_path):
    """inference.port = 0: the server binds a free port itself (no other process can take it between a pick and the
    bind); vf-vllm finds it once the server listens, writes it to the port file, and starts a restarted server on
    that same port, which the run's clients know."""
    import urllib.request

    from vfrl.inference.served_port import read_port

    port_file = tmp_path / "inference.port"
    port_file.write_text("1")  # an earlier server's: never read as this one's
    proc, pgid, engine, out = start_supervised(tmp_path, False, SERVE="1", PORT="0", PORT_FILE=str(port_file),
                                               MAX_RESTARTS="1", RESTARTS=str(tmp_path / "r.jsonl"))
    second = None
    try:
        port = wait_until(lambda: read_port(port_file) not in (None, 1) and read_port(port_file), 30, "the port file")
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).status == 200
        wait_until(lambda: "listens on port" in out.read_text() and (tmp_path / "r.jsonl").exists() is False, 30,
                   "the listening line")
        time.sleep(1.5)  # vf-vllm sees /health answer
        os.kill(engine, signal.SIGKILL)
        second, _ = wait_until(lambda: len(found := started(out)) > 1 and found[1], 30, "the server started again")
        wait_until(lambda: _answers(f"http://127.0.0.1:{port}/health"), 30, "the restarted server on the same port")
        assert read_port(port_file) == port
        assert out.read_text().count("vf-vllm: vLLM listens on port") == 1, out.read_text()
    finally:
        cleanup(pgid, proc)
        if second:
            cleanup(second, proc)


def _answers(url: str) -> bool:
    import urllib.request

    try:
        return urllib.request.urlopen(url, timeout=2).status == 200
    except OSError:
        return False


def test_a_health_answered_by_another_process_on_the_port_is_not_the_servers(tmp_path):
    """Another server held the configured port first: the stand-in cannot bind it and exits, though /health answers
    there. It never served, so it is not started again (vf-vllm started it again and again, counting the other's
    /health as its own)."""
    import http.server
    import threading

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *_):
            pass

    other = http.server.HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        proc = subprocess.Popen([sys.executable, "-c", SUPERVISOR], stdout=open(tmp_path / "out", "w"),
                                stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "SERVE": "1", "PORT": str(other.server_port), "MAX_RESTARTS": "2",
                                     "RESTARTS": str(tmp_path / "r.jsonl")})
        try:
            proc.wait(timeout=60)
        finally:
            cleanup(proc.pid, proc)
        text = (tmp_path / "out").read_text()
        assert "before it served; not starting it again" in text and "Address already in use" in text, text
        assert not (tmp_path / "r.jsonl").exists()
    finally:
        other.shutdown()


def test_a_server_that_dies_before_it_served_is_not_started_again(tmp_path):
    """/health never answered (a bad flag, a model that does not fit): starting it again would fail the same way."""
    from vfrl.testing import free_port

    # nothing answers there: the stand-in serves no /health without SERVE
    proc, pgid, engine, out = start_supervised(tmp_path, False, MAX_RESTARTS="2", RESTARTS=str(tmp_path / "r.jsonl"),
                                               PORT=str(free_port()))
    try:
        os.kill(engine, signal.SIGKILL)
        proc.wait(timeout=30)
        text = out.read_text()
        assert "exit 143" in text and "before it served; not starting it again" in text, text
        assert not (tmp_path / "r.jsonl").exists()
    finally:
        cleanup(pgid, proc)


def test_the_server_is_stopped_once_the_trainer_is_gone_without_stopping_it(tmp_path):
    """The trainer's pane died with it (its shell killed, the pane closed): no epilogue stops vLLM, so vf-vllm does,
    once the vf-train named in trainer.pid has been gone for a grace period. A pid that is no vf-train is not
    watched (a Slurm job's trainer on another node)."""
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "vf-train"])
    (tmp_path / "trainer.pid").write_text(str(trainer.pid))
    proc, pgid, engine, out = start_supervised(tmp_path, False, TRAINER_PID=str(tmp_path / "trainer.pid"))
    try:
        time.sleep(1)  # seen alive
        trainer.kill()
        trainer.wait()
        proc.wait(timeout=30)
        text = out.read_text()
        assert f"the trainer (pid {trainer.pid}) is gone and nothing stopped the server" in text, text
        assert "exit 143" in text and group_members(pgid) == [], text
    finally:
        cleanup(pgid, proc)

    (tmp_path / "trainer.pid").write_text(str(os.getpid()))  # alive, but no vf-train: never watched
    proc, pgid, engine, out = start_supervised(tmp_path, False, TRAINER_PID=str(tmp_path / "trainer.pid"))
    try:
        time.sleep(2.5)
        assert proc.poll() is None and "the trainer" not in out.read_text()
    finally:
        cleanup(pgid, proc)


def test_a_server_that_does_not_stop_when_asked_is_killed_after_the_grace(tmp_path):
    """vLLM's API server asked to stop can wait in uvicorn's graceful shutdown for the trainer's open connections,
    /health silent, while vf-vllm lives: the trainer would wait out inference_timeout. Killed after STOP_GRACE_S."""
    proc, pgid, engine, out = start_supervised(tmp_path)  # the stand-in ignores SIGTERM
    try:
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        text = out.read_text()
        assert "did not stop within 2s of being asked; killing it" in text and "exit 137" in text, text
        assert group_members(pgid) == [] and time.monotonic() - t0 < 10
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
