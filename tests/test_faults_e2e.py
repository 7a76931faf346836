"""The vLLM server lost mid-run, for real (tmux, the vLLM CPU server, the trainer; issue 9, item 2; issue 42).

Killed (-9) or hung (SIGSTOP) while the trainer trains with save_strategy = "no" (the quick start's):
- killed, with restarts left (inference.max_restarts): vf-vllm starts it again, the trainer waits for it, pushes
  its policy and goes on; no step is lost or trained twice, and the restart is in metrics and `vf-rl status`;
- hung, or killed with no restart left: the trainer notices within seconds (hung: after inference_timeout),
  writes an emergency checkpoint, prints one line naming the cause, the inference log and the exact
  `vf-rl ... --resume` command, and exits 3; the inference pane ends every process the server started
  (vLLM's engine core), `vf-rl status` says the inference pane exited, and the printed command continues the run.
"""

import shlex
import subprocess
import time
from pathlib import Path

import pytest

from conftest import socket_of_real_runs

from test_launcher_session_e2e import VF_RL, start_run
from vfrl.launcher import procs, tmux
from vfrl.launcher.plot import read_metrics
from vfrl.learner.checkpoint import latest_checkpoint, step_of

pytestmark = pytest.mark.e2e


@pytest.fixture
def socket_name(tmp_path):
    with socket_of_real_runs("faults", tmp_path) as name:
        yield name


def vllm_server_pid(run_dir: Path) -> int:
    """The API server: vf-vllm's (inference.pid's) child, beside its reaper (inference/reaper.py)."""
    supervisor = int((run_dir / "inference.pid").read_text())
    children = [pid for pid in subprocess.run(["pgrep", "-P", str(supervisor)], capture_output=True,
                                              text=True).stdout.split()
                if b"vfrl.inference.reaper" not in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(children) == 1, children
    return int(children[0])


def wait_for(path: Path, timeout: float, run_dir: Path) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            logs = {p.name: p.read_text()[-3000:] for p in (run_dir / "logs").glob("*.log")}
            pytest.fail(f"{path.name} did not appear within {timeout:.0f}s: {logs}")
        time.sleep(0.5)
    return path.read_text().strip()


def trainer_screen(socket_name: str, session: str = "test") -> list[str]:
    srv = tmux.server(socket_name)
    pane = tmux.pane_state(srv, session, "trainer").pane_id
    out = subprocess.run(["tmux", "-L", socket_name, "capture-pane", "-p", "-J", "-S", "-200", "-t", pane],
                         capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def assert_lost_server_handled(tmp: Path, run_dir: Path, socket_name: str, cause: str, detected_in: float) -> str:
    """Exit 3 within `detected_in` s, one line with cause/log/checkpoint/resume command, no process left.
    Returns the line."""
    t0 = time.monotonic()
    assert wait_for(run_dir / "trainer.exitcode", detected_in, run_dir) == "3"
    took = time.monotonic() - t0
    steps = len(read_metrics(run_dir))
    screen = trainer_screen(socket_name)
    assert not any("Traceback" in line for line in screen), "\n".join(screen[-60:])
    line = next(line for line in screen if line.startswith("vf-train: "))
    assert cause in line and "logs/inference.log" in line, line
    checkpoint = latest_checkpoint(run_dir / "checkpoints")
    # every step trained is kept, and has its metrics line (the one trained just before the fault too)
    assert checkpoint is not None and step_of(checkpoint) == steps >= 2, (line, steps)
    assert f"Training up to step {step_of(checkpoint)} is saved in {checkpoint.relative_to(tmp)}" in line, line
    assert line.endswith(f"--resume {checkpoint.relative_to(tmp)}"), line
    assert "Traceback" in (run_dir / "logs" / "trainer.log").read_text()  # the story is kept in the log
    # the inference pane ended the server's whole process tree and recorded how it ended
    wait_for(run_dir / "inference.exitcode", 60, run_dir)
    left = procs.pane_processes([], run_dir)
    deadline = time.monotonic() + 30
    while (left := procs.alive(left)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, procs.describe(left)
    status = subprocess.run([VF_RL, "status", "--tmux-socket", socket_name], capture_output=True, text=True).stdout
    assert "trainer exited 3, inference exited" in status, status
    print(f"{cause}: trainer exited {took:.1f}s after the fault")
    return line


def stop_the_server(run_dir: Path, sig: str, victim=vllm_server_pid) -> set:
    """Once two steps are logged, send `sig` to vLLM's server and everything it started (hung) or to `victim(run_dir)`
    (killed: the API server, by default); returns the server's processes."""
    logged = len(read_metrics(run_dir)) if (run_dir / "metrics.jsonl").exists() else 0
    while len(read_metrics(run_dir)) < logged + 2:
        time.sleep(0.2)
    server = vllm_server_pid(run_dir)
    engine = procs.pane_processes([server])  # the server, its engine core and whatever that started
    assert len(engine) >= 2
    for pid in [p.pid for p in engine] if sig == "STOP" else [victim(run_dir)]:
        subprocess.run(["kill", f"-{sig}", str(pid)])
    return engine


def engine_core(run_dir: Path) -> int:
    """The newest engine core vf-vllm named in the run's inference log."""
    return int((run_dir / "logs" / "inference.log").read_text().split("engine core is pid ")[-1].split()[0])


def test_vllm_hung_killed_and_killed_again_mid_run(tmp_path, tiny_model, socket_name):
    """One run, three faults (vLLM start-ups saved): the server hangs (SIGSTOP of all its processes) and is given up on
    after inference_timeout; the printed command resumes the run; its engine core is killed (-9: the OOM killer's
    pick) and vf-vllm starts the server again, the run goes on; vf-vllm itself killed, its reaper ends the server and
    the run stops."""
    cfg, run_dir = start_run(tmp_path, tiny_model, socket_name, "--trainer.args.inference_timeout", "10",
                             "--inference.max_restarts", "1")
    engine = stop_the_server(run_dir, "STOP")
    line = assert_lost_server_handled(tmp_path, run_dir, socket_name, "has not answered", detected_in=90)
    assert not procs.alive(engine)

    # the printed command continues the run
    done = step_of(latest_checkpoint(run_dir / "checkpoints"))
    subprocess.run([VF_RL, "stop", "test", "--tmux-socket", socket_name], capture_output=True, check=True)
    command = shlex.split(line[line.index("continue with: ") + len("continue with: "):])
    assert command[:3] == ["vf-rl", "@", str(cfg)] and "--trainer.args.inference_timeout" in command
    resumed = subprocess.run([VF_RL, *command[1:], "--detach"], capture_output=True, text=True, cwd=tmp_path,
                             timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]

    # the real engine core is recorded where vf-rl stop's search finds it (its title hides the run's marker)
    assert engine_core(run_dir) in {p.pid for p in procs.recorded_engines(run_dir)}
    # the engine core killed: vf-vllm ends that server and starts another, the trainer waits for it and goes on
    engine = stop_the_server(run_dir, "9", victim=engine_core)
    restarts = run_dir / "inference.restarts.jsonl"
    wait_for(restarts, 30, run_dir)
    deadline = time.monotonic() + 20
    while procs.alive(engine) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not procs.alive(engine), procs.describe(engine)  # nothing of the dead server is left
    status = subprocess.run([VF_RL, "status", "--tmux-socket", socket_name], capture_output=True, text=True).stdout
    assert "trainer running, inference running (vLLM started again 1x)" in status, status
    healed = wait_for_metrics(run_dir, lambda m: "inference_restarts" in m, 300)
    assert healed["inference_restarts"] == 1 and healed["policy_version"] == healed["step"] - 1, healed
    assert not (run_dir / "trainer.exitcode").exists()
    wait_for_metrics(run_dir, lambda m: m.get("step", 0) >= healed["step"] + 2, 120)  # trains on after it

    # vf-vllm itself killed (no restart left either): its reaper ends the server, the run stops as without restarts
    engine = stop_the_server(run_dir, "9", victim=lambda d: int((d / "inference.pid").read_text()))
    assert_lost_server_handled(tmp_path, run_dir, socket_name, "(vf-vllm had started it again 1x before)",
                               detected_in=60)
    assert not procs.alive(engine)
    steps = [m["step"] for m in read_metrics(run_dir) if "loss" in m]
    # went on from the checkpoint, and through the restart without a step lost or trained twice
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= healed["step"] + 2, (done, healed, steps)
    assert "is gone; its reaper ended the" in (run_dir / "logs" / "inference.log").read_text()


def wait_for_metrics(run_dir: Path, found, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while not (hits := [m for m in read_metrics(run_dir) if found(m)]):
        if time.monotonic() > deadline or (run_dir / "trainer.exitcode").exists():
            logs = {p.name: p.read_text()[-3000:] for p in (run_dir / "logs").glob("*.log")}
            pytest.fail(f"no such metrics line within {timeout:.0f}s: {logs}")
        time.sleep(0.5)
    return hits[0]
