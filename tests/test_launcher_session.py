"""Session life with real tmux (private socket) and stand-in pane processes: an existing session is refused,
status/logs work unattached, stop leaves no process (even a stubborn one), --replace only stops vf-rl sessions.
The same with the real vLLM server and trainer: test_launcher_session_e2e.py."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import write_config, tmux_socket
from vfrl.launcher import procs, tmux
from vfrl.launcher.config_errors import load_user_config
from vfrl.launcher.pane_env import write_environment
from vfrl.launcher.machine import Machine
from vfrl.launcher.plan import make_plan
from vfrl.launcher.render import inference_epilogue, pane_script, trainer_epilogue
from vfrl.proc_table import pid_alive
from vfrl.run_dir import RunDir

VF_RL = str(Path(sys.executable).parent / "vf-rl")


@pytest.fixture
def socket_name(tmp_path):
    name = tmux_socket("session", tmp_path)
    yield name
    subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True)


def fake_run(tmp_path: Path, socket_name: str, session: str, stubborn: bool = False,
             finishing: bool = False, environ: dict | None = None, deaf_for: float = 0) -> tuple[Path, set[int]]:
    """A vf-rl session whose panes run `sleep` instead of vLLM and the trainer (same scripts, same epilogue).
    stubborn: the trainer ignores Ctrl-C. finishing: the trainer ends by itself after 2 s and the server
    takes 4 s to stop on SIGTERM, so the trainer pane's epilogue runs for a while. deaf_for: the trainer
    loses a Ctrl-C for that many seconds before it writes its pid (a pane script's first lines)."""
    cfg = load_user_config(write_config(tmp_path / "cfg.toml", Path("m"), 0, tmp_path / "outputs"))
    run_dir = tmp_path / "outputs" / session
    plan = make_plan(cfg, run_dir, session, Machine(0, 2), tmp_path)
    plan.inference.command = ["bash", "-c", f"echo $$ > {run_dir}/inference.pid; echo serving; exec sleep 600"]
    if finishing:
        plan.inference.command = ["bash", "-c", f"echo $$ > {run_dir}/inference.pid; echo serving; "
                                                "trap 'sleep 4; exit 0' TERM; while :; do sleep 0.1; done"]
    listening = (f"trap '' INT; sleep {deaf_for}; trap - INT; " if deaf_for else "") + \
        f"echo $$ > {run_dir}/trainer.pid; "  # as vf-train does once Ctrl-C stops it (`vf-rl stop` waits)
    plan.trainer.command = (["bash", "-c", listening + "trap '' INT TERM; echo training; sleep 600 & wait; sleep 600"]
                            if stubborn else ["bash", "-c", listening + "echo training; sleep 2"] if finishing
                            else ["bash", "-c", listening + "echo training; exec sleep 600"])
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / ".api_key").write_text("k")
    write_environment(run_dir, os.environ if environ is None else environ)  # as vf-rl does
    plan.inference.script.write_text(pane_script(plan.inference, run_dir, tmp_path, inference_epilogue(run_dir)))
    plan.trainer.script.write_text(pane_script(plan.trainer, run_dir, tmp_path, trainer_epilogue(run_dir, grace_s=5)))
    srv = tmux.server(socket_name)
    tmux.start_session(srv, plan, tmp_path)
    deadline = time.time() + 10
    while time.time() < deadline and not ((run_dir / "logs/trainer.log").exists()
                                          and (run_dir / "inference.pid").exists()):
        time.sleep(0.1)
    time.sleep(0.5)
    leaders = [tmux.pane_state(srv, session, role).pid for role in ("inference", "trainer", "metrics")]
    pids = procs.pane_processes(leaders)
    assert len(pids) >= 7, pids  # 2 pane shells, 2 tee, sleep x2 (+ the stubborn bash), vf-rl watch
    marked = procs.pane_processes([], run_dir)  # found by the environment marker alone
    # all but the two script shells tmux started (a short-lived `sleep 0.1` may have come or gone meanwhile)
    assert procs.alive({p for p in pids if p.pid not in leaders[:2]}) <= marked
    return run_dir, pids


def vf_rl(*args, cwd=None, timeout=60):
    return subprocess.run([VF_RL, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def test_the_tmux_server_pid_is_the_servers_and_none_without_one(socket_name):
    srv = tmux.server(socket_name)
    assert tmux.server_pid(srv) is None
    subprocess.run(["tmux", "-L", socket_name, "new-session", "-d", "-s", "s", "sleep 60"], check=True)
    pid = tmux.server_pid(srv)
    assert pid and Path(f"/proc/{pid}/comm").read_text().strip().startswith("tmux")
    subprocess.run(["tmux", "-L", socket_name, "kill-server"], check=True)
    assert tmux.server_pid(srv) is None


def test_existing_session_is_refused_and_left_running(tmp_path, socket_name):
    run_dir, pids = fake_run(tmp_path, socket_name, "test")
    res = vf_rl("@", str(tmp_path / "cfg.toml"), "--no-attach", "--tmux-socket", socket_name, cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip() == (
        f"vf-rl: error: a tmux session named 'test' is already running. Attach with `tmux -L {socket_name} attach "
        f"-t test`, stop it with `vf-rl stop test`, start this run with --replace to stop that one first, or pick "
        f"another name with --session.")
    assert procs.alive(pids) == pids  # nothing was killed
    assert not (tmp_path / "outputs" / "test-2").exists()  # and nothing was started


def test_status_and_logs_without_attaching(tmp_path, socket_name):
    run_dir, _ = fake_run(tmp_path, socket_name, "test")
    (run_dir / "metrics.jsonl").write_text('{"step": 3, "max_steps": 10, "reward_mean": 0.5}\n')
    status = vf_rl("status", "--tmux-socket", socket_name)
    assert status.stdout.strip() == (f"test: trainer running, inference running, step 3/10, reward 0.500 | {run_dir}")
    assert vf_rl("logs", "--tmux-socket", socket_name).stdout == "training\n"
    assert vf_rl("logs", "--pane", "inference", "--tmux-socket", socket_name).stdout == "serving\n"
    assert vf_rl("logs", str(run_dir)).stdout == "training\n"  # a run directory works too, session or not
    bad = vf_rl("logs", "nope", "--tmux-socket", socket_name)
    assert bad.returncode == 2 and "no vf-rl session named 'nope'" in bad.stderr and "running: test" in bad.stderr


def test_stop_takes_the_ctrl_c_path_and_leaves_no_process(tmp_path, socket_name):
    run_dir, pids = fake_run(tmp_path, socket_name, "test")
    res = vf_rl("stop", "--tmux-socket", socket_name)
    assert res.returncode == 0, res.stderr
    assert "Ctrl-C to the trainer" in res.stdout and "stopped 'test' (trainer exit code 130)" in res.stdout
    assert "SIGKILL" not in res.stdout  # the clean path was enough
    assert procs.alive(pids) == set()
    assert (run_dir / "trainer.exitcode").read_text().strip() == "130"
    assert (run_dir / "inference.exitcode").read_text().strip() == "143"  # SIGTERM from the trainer's epilogue
    assert not (run_dir / ".api_key").exists()
    assert not tmux.session_exists(tmux.server(socket_name), "test")
    assert vf_rl("stop", "--tmux-socket", socket_name).stderr.startswith("vf-rl: error: no vf-rl session is running")


def test_stop_sends_its_ctrl_c_once_the_trainer_listens(tmp_path, socket_name):
    """Stopped a moment after launch: a Ctrl-C that came before vf-train handles it would be lost, and the
    stop would wait its whole --timeout before terminating the trainer."""
    run_dir, pids = fake_run(tmp_path, socket_name, "test", deaf_for=3)
    res = vf_rl("stop", "--timeout", "30", "--tmux-socket", socket_name)
    assert res.returncode == 0, res.stderr
    assert "stopped 'test' (trainer exit code 130)" in res.stdout, res.stdout
    assert "terminating" not in res.stdout, res.stdout
    assert procs.alive(pids) == set()


def test_stop_ends_a_trainer_that_ignores_ctrl_c(tmp_path, socket_name):
    run_dir, pids = fake_run(tmp_path, socket_name, "test", stubborn=True)
    res = vf_rl("stop", "--timeout", "2", "--tmux-socket", socket_name)
    assert res.returncode == 0, res.stderr
    assert "the trainer did not stop; terminating it" in res.stdout
    assert procs.alive(pids) == set()
    # the pane script still recorded how it died (SIGKILL, or SIGPIPE once its tee was gone)
    assert int((run_dir / "trainer.exitcode").read_text()) > 128
    assert not tmux.session_exists(tmux.server(socket_name), "test")


def test_stop_after_the_trainer_finished_lets_its_epilogue_run(tmp_path, socket_name):
    """The `vf-rl @ cfg` foreground path: the trainer's exit code is on disk while its pane still stops the
    server. stop must not Ctrl-C into that epilogue, and no API key may be left behind."""
    run_dir, pids = fake_run(tmp_path, socket_name, "test", finishing=True)
    deadline = time.time() + 20
    while not (run_dir / "trainer.exitcode").exists():
        assert time.time() < deadline
        time.sleep(0.1)
    res = vf_rl("stop", "--tmux-socket", socket_name)
    assert res.returncode == 0, res.stderr
    assert "the trainer has exited; its pane is stopping the inference server" in res.stdout, res.stdout
    assert "Ctrl-C" not in res.stdout and "leftover" not in res.stdout and "terminating" not in res.stdout
    assert "stopped 'test' (trainer exit code 0)" in res.stdout, res.stdout
    assert (run_dir / "inference.exitcode").read_text().strip() == "0"  # the server stopped on its own terms
    assert procs.alive(pids) == set()
    assert not (run_dir / ".api_key").exists()


def test_stop_after_the_trainer_pane_was_killed_does_not_wait_for_the_metrics_pane(tmp_path, socket_name):
    """The trainer pane's shell killed with its trainer (no exit code will come) and the server stopped after it (as
    vf-vllm does once vf-train is gone): `vf-rl stop` closes the session at once. The metrics pane's `vf-rl watch`,
    still waiting for the exit code, ends with the session; it is not waited for and then called a leftover."""
    import signal

    run_dir, pids = fake_run(tmp_path, socket_name, "test")
    srv = tmux.server(socket_name)
    trainer_pane = tmux.pane_state(srv, "test", "trainer").pid
    for p in procs.pane_processes([trainer_pane]):
        os.kill(p.pid, signal.SIGKILL)
    os.kill(int((run_dir / "inference.pid").read_text()), signal.SIGTERM)
    deadline = time.time() + 20
    while not (run_dir / "inference.exitcode").exists():
        assert time.time() < deadline
        time.sleep(0.1)
    watch = procs.pane_processes([tmux.pane_state(srv, "test", "metrics").pid])
    assert watch and procs.alive(watch)
    res = vf_rl("stop", "--tmux-socket", socket_name)
    assert res.returncode == 0, res.stderr
    assert "leftover" not in res.stdout and "terminating" not in res.stdout, res.stdout
    assert not tmux.session_exists(srv, "test")
    assert procs.wait_gone(pids, 10) == set()
    assert not (run_dir / "trainer.exitcode").exists()


def test_panes_get_vf_rl_s_environment_even_from_a_tmux_server_started_without_it(tmp_path, socket_name):
    """tmux hands a new session its *server's* environment. With a server already running that lacks a
    variable, the panes must still see what vf-rl was started with (issue 9: WANDB_MODE never arrived)."""
    without = {k: v for k, v in os.environ.items() if not k.startswith("VFRL_TEST_")}
    subprocess.run(["tmux", "-L", socket_name, "new-session", "-d", "-s", "other", "sleep 600"], env=without,
                   check=True)
    environ = {**os.environ, "VFRL_TEST_SEEN": "it's here; $HOME \"quoted\"", "CUDA_VISIBLE_DEVICES": "7"}
    run_dir, pids = fake_run(tmp_path, socket_name, "test", environ=environ)
    env_file = RunDir(run_dir).environment
    assert env_file.stat().st_mode & 0o777 == 0o600  # it may hold tokens
    shell = tmux.pane_state(tmux.server(socket_name), "test", "trainer").pid  # started by tmux: tmux's environment
    child = int(subprocess.run(["pgrep", "-P", str(shell)], capture_output=True, text=True).stdout.split()[0])
    seen = dict(kv.split(b"=", 1) for kv in Path(f"/proc/{child}/environ").read_bytes().split(b"\0") if b"=" in kv)
    assert seen[b"VFRL_TEST_SEEN"] == "it's here; $HOME \"quoted\"".encode()
    assert seen[b"CUDA_VISIBLE_DEVICES"] == b""  # the plan's devices win over the caller's
    assert b"TMUX_PANE" in seen and seen[b"TMUX_PANE"] != os.environ.get("TMUX_PANE", "").encode()
    assert vf_rl("stop", "test", "--tmux-socket", socket_name).returncode == 0
    assert not env_file.exists()  # like the API key, gone with the run


def test_a_busy_port_is_refused_in_one_line_before_anything_starts(tmp_path, socket_name, tiny_model):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        write_config(tmp_path / "cfg.toml", tiny_model, port, tmp_path / "outputs")
        res = vf_rl("@", str(tmp_path / "cfg.toml"), "--no-attach", "--tmux-socket", socket_name, cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    said = [line for line in res.stderr.strip().splitlines() if not line.startswith("vf-rl: note: ")]  # the plan's
    assert said == [f"vf-rl: error: {tmp_path / 'cfg.toml'}: inference.port = {port} is already in use on 127.0.0.1; "
                    f"choose another port, or set inference.port = 0 to pick a free one."]
    assert not tmux.session_exists(tmux.server(socket_name), "test")


def test_replace_refuses_a_session_vf_rl_did_not_start(tmp_path, socket_name):
    write_config(tmp_path / "cfg.toml", Path("m"), 0, tmp_path / "outputs")
    subprocess.run(["tmux", "-L", socket_name, "new-session", "-d", "-s", "test", "sleep 600"], check=True)
    res = vf_rl("@", str(tmp_path / "cfg.toml"), "--replace", "--no-attach", "--tmux-socket", socket_name, cwd=tmp_path)
    assert res.returncode == 2 and "was not started by vf-rl" in res.stderr
    assert tmux.session_exists(tmux.server(socket_name), "test")


def test_several_sessions_need_a_name(tmp_path, socket_name):
    fake_run(tmp_path / "a", socket_name, "a") if (tmp_path / "a").mkdir() is None else None
    fake_run(tmp_path / "b", socket_name, "b") if (tmp_path / "b").mkdir() is None else None
    res = vf_rl("stop", "--tmux-socket", socket_name)
    assert res.returncode == 2 and "2 vf-rl sessions are running" in res.stderr
    assert len(vf_rl("status", "--tmux-socket", socket_name).stdout.splitlines()) == 2
    assert vf_rl("stop", "a", "--tmux-socket", socket_name).returncode == 0
    assert list(tmux.run_sessions(tmux.server(socket_name))) == ["b"]


def test_logs_follow_prints_new_lines_until_the_run_ends(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    log = run_dir / "logs" / "trainer.log"
    log.write_text("old 1\nold 2\n")
    proc = subprocess.Popen([VF_RL, "logs", str(run_dir), "-n", "1", "-f"], stdout=subprocess.PIPE, text=True)
    time.sleep(3)
    with open(log, "a") as f:
        f.write("step 1/2\n")
    time.sleep(1)
    with open(log, "a") as f:
        f.write("step 2/2\n")
    (run_dir / "trainer.exitcode").write_text("0\n")
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out == "old 2\nstep 1/2\nstep 2/2\n"


def test_watch_prints_one_line_per_step_and_stops_with_the_trainer(tmp_path):
    from vfrl.launcher.watch import watch

    rows = [{"step": n, "max_steps": 4, "reward_mean": 0.5 + n / 10, "loss": -0.01, "mismatch_kl": 1e-3,
             "train_end": 100.0 + 2 * n} for n in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 4, "max')
    (tmp_path / "trainer.exitcode").write_text("0\n")
    out = []
    assert watch(tmp_path, out.append, poll=0) == 0
    assert out[1].split() == ["step", "reward", "avg10", "loss", "mismatch", "step", "s", "eta"]
    assert out[2].split() == ["1/4", "0.600", "0.600", "-0.0100", "1.0e-03", "-"]
    assert out[4].split() == ["3/4", "0.800", "0.700", "-0.0100", "1.0e-03", "2.00", "0:00:02"]
    assert out[5:] == ["trainer exited with code 0"]  # the half-written line is not shown


def test_watch_stops_when_the_trainer_is_gone_without_an_exit_code(tmp_path, monkeypatch):
    """Its pane was killed with it: no epilogue writes trainer.exitcode, and the metrics pane must not wait forever."""
    import subprocess
    import sys
    import threading

    from vfrl.inference import supervisor
    from vfrl.launcher.watch import watch

    monkeypatch.setattr(supervisor, "TRAINER_GRACE_S", 0.0)
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "vf-train"])
    (tmp_path / "trainer.pid").write_text(str(trainer.pid))
    out = []
    threading.Timer(1.0, trainer.kill).start()  # seen alive by the watch's first polls, then gone
    assert watch(tmp_path, out.append, poll=0.05) is None
    trainer.wait()
    assert out[-1] == f"the trainer (pid {trainer.pid}) is gone without an exit code (its pane closed?)"


def test_a_process_is_named_by_pid_and_start_time_so_a_reused_pid_is_never_signalled():
    import os

    me = procs.pane_processes([os.getpid()])
    assert {p.pid for p in me} >= {os.getpid()} and procs.alive(me) == me
    impostor = procs.Proc(os.getpid(), start=next(iter(me)).start + 1)  # same pid, another process
    assert procs.alive({impostor}) == set()
    procs.signal_all({impostor}, 9)  # must not kill this test


def test_status_trusts_the_trainer_exit_code_file_when_tmux_has_no_status_yet(tmp_path):
    from vfrl.launcher.lifecycle import describe_pane

    dead_no_status = tmux.PaneState("%1", 123, True, None)  # pty closed, SIGCHLD not yet seen by tmux
    assert describe_pane(dead_no_status) == "exited"
    assert describe_pane(tmux.PaneState("%1", 123, False, None), tmp_path / "trainer.exitcode") == "running"
    (tmp_path / "trainer.exitcode").write_text("130\n")
    assert describe_pane(dead_no_status, tmp_path / "trainer.exitcode") == "exited 130"
    assert describe_pane(None, tmp_path / "trainer.exitcode") == "exited 130"
    assert describe_pane(tmux.PaneState("%1", 123, True, 1)) == "exited 1"


def test_epilogue_kills_a_server_that_ignores_sigterm_with_its_children(tmp_path):
    """A vLLM that does not stop within the grace: its whole tree (engine, workers) gets SIGKILL, no orphans."""
    server = subprocess.Popen(["bash", "-c", "trap '' TERM; sleep 300 & sleep 300 & wait"], start_new_session=True)
    time.sleep(0.5)
    kids = [int(p) for p in subprocess.run(["pgrep", "-P", str(server.pid)], capture_output=True,
                                           text=True).stdout.split()]
    assert len(kids) == 2
    (tmp_path / "inference.pid").write_text(str(server.pid))
    script = "\n".join(["code=130", *trainer_epilogue(tmp_path, grace_s=1)]) + "\n"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert "trainer exited with code 130" in out.stdout
    assert server.wait(timeout=10) == -9
    time.sleep(0.2)
    assert not [k for k in kids if pid_alive(k)]
    assert (tmp_path / "trainer.exitcode").read_text().strip() == "130"
