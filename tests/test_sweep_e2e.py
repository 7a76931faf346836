"""A sweep with the real stack (issue 62): `vf-rl @ cfg --sweep ...` trains its runs against one vLLM, each run under
adapter names of its own; a run killed or stopped leaves the others training; the shared server killed is started
again and every run heals; the sweep's server stops once its last run has ended."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BIN, socket_of_real_runs, write_config
from vfrl.launcher import procs, tmux
from vfrl.run_dir import RunDir, read_jsonl

pytestmark = pytest.mark.e2e


def steps(run_dir: Path) -> list[dict]:
    return [r for r in read_jsonl(RunDir(run_dir).metrics) if "loss" in r] if RunDir(run_dir).metrics.exists() else []


def wait_until(check, timeout: float, what: str, logs: Path | None = None):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            seen = {str(p.relative_to(logs)): p.read_text()[-2500:] for p in logs.rglob("*.log")} if logs else {}
            pytest.fail(f"{what} did not happen within {timeout:.0f}s: {seen}")
        time.sleep(0.5)
    return value


def vf_rl(*args, cwd, timeout=300):
    return subprocess.run([str(BIN / "vf-rl"), *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


@pytest.fixture
def socket_name(tmp_path):
    with socket_of_real_runs("sweep", tmp_path) as name:
        yield name


def test_a_two_run_sweep_trains_both_against_one_vllm_each_under_its_own_adapter_names(tmp_path, tiny_model,
                                                                                       socket_name):
    cfg = write_config(tmp_path / "cfg.toml", tiny_model, port=0, output_dir=tmp_path / "outputs", max_steps=3,
                       batch_size=8, rollouts_per_example=4, max_tokens=8)
    done = vf_rl("@", str(cfg), "--sweep", "trainer.args.learning_rate=1e-3,4e-3", "--no-attach",
                 "--tmux-socket", socket_name, cwd=tmp_path)
    sweep_dir = tmp_path / "outputs" / "test"
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads((sweep_dir / "sweep.json").read_text())
    assert [r["name"] for r in record["runs"]] == ["learning_rate=1e-3", "learning_rate=4e-3"]
    server_log = RunDir(sweep_dir).log("inference").read_text()
    assert server_log.count("vf-vllm: vLLM listens on port") == 1  # one server for both
    for run, lr in zip(record["runs"], (1e-3, 4e-3)):
        run_dir = Path(run["run_dir"])
        assert RunDir(run_dir).exit_code("trainer").read_text().strip() == "0"
        assert len(steps(run_dir)) == 3
        assert f"learning_rate = {lr}" in RunDir(run_dir).config.read_text()
        for version in range(3):  # every policy it pushed, under its own name
            assert f"Loaded new LoRA adapter: name '{run['name']}/policy-{version}'" in server_log
        assert not (run_dir / "inference.pid").exists()  # no server of its own
    # the two learning rates made two policies: their losses part after the first step
    losses = [[s["loss"] for s in steps(Path(r["run_dir"]))] for r in record["runs"]]
    assert losses[0][0] == pytest.approx(losses[1][0]) and losses[0][2] != losses[1][2]
    assert "learning_rate=4e-3" in done.stdout and "every run ended" in done.stdout
    wait_until(lambda: not procs.pane_processes([], sweep_dir), 60, "every process of the sweep gone")
    assert not tmux.run_sessions(tmux.server(socket_name))


def test_a_runs_fault_or_stop_is_its_own_and_the_shared_servers_death_heals_every_run(tmp_path, tiny_model,
                                                                                      socket_name):
    """Three runs until stopped: the shared server's engine core killed -> vf-vllm starts it again and all three go
    on; run 1's trainer killed -> it ends, the others go on; run 2 stopped -> the last goes on; the last stopped ->
    the server stops by itself, nothing left."""
    cfg = write_config(tmp_path / "cfg.toml", tiny_model, port=0, output_dir=tmp_path / "outputs",
                       max_steps=1_000_000, batch_size=8, rollouts_per_example=4, max_tokens=6)
    started = vf_rl("@", str(cfg), "--sweep", "trainer.args.seed=1,2,3", "--detach", "--tmux-socket", socket_name,
                    cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    sweep_dir = tmp_path / "outputs" / "test"
    runs = [Path(r["run_dir"]) for r in json.loads((sweep_dir / "sweep.json").read_text())["runs"]]
    sessions = ["test-1", "test-2", "test-3"]
    progressed = lambda run_dir, n: lambda: len(steps(run_dir)) >= n  # noqa: E731
    for run_dir in runs:
        wait_until(progressed(run_dir, 1), 400, f"a step of {run_dir.name}", sweep_dir)
    status = vf_rl("status", "--tmux-socket", socket_name, cwd=tmp_path).stdout
    assert "test: sweep of 3 runs, inference running" in status, status
    assert "test-2: trainer running, inference the sweep's (test)" in status, status

    engine = max(procs.alive(procs.recorded_engines(sweep_dir)), key=lambda p: p.start)
    os.kill(engine.pid, signal.SIGKILL)
    wait_until(lambda: RunDir(sweep_dir).inference_restarts.exists(), 60, "vf-vllm starting the server again",
               sweep_dir)
    before = [len(steps(r)) for r in runs]
    for run_dir, n in zip(runs, before):  # every run heals: it trains on against the new server
        wait_until(progressed(run_dir, n + 2), 400, f"{run_dir.name} training after the restart", sweep_dir)
    for run_dir in runs:
        assert any(s.get("inference_restarts") == 1 for s in steps(run_dir)), run_dir.name

    trainer = int(RunDir(runs[0]).trainer_pid.read_text())
    os.kill(trainer, signal.SIGKILL)
    wait_until(lambda: RunDir(runs[0]).exit_code("trainer").exists(), 60, "run 1's pane recording its end")
    assert RunDir(runs[0]).exit_code("trainer").read_text().strip() == "137"
    n = [len(steps(r)) for r in runs[1:]]
    for run_dir, k in zip(runs[1:], n):
        wait_until(progressed(run_dir, k + 2), 300, f"{run_dir.name} training after run 1 died", sweep_dir)

    stopped = vf_rl("stop", sessions[1], "--tmux-socket", socket_name, cwd=tmp_path)
    assert stopped.returncode == 0 and "trainer exit code 130" in stopped.stdout, stopped.stdout + stopped.stderr
    k = len(steps(runs[2]))
    wait_until(progressed(runs[2], k + 2), 300, "run 3 training after run 2 stopped", sweep_dir)
    assert tmux.session_exists(tmux.server(socket_name), "test")  # the server goes on for run 3

    stopped = vf_rl("stop", sessions[2], "--tmux-socket", socket_name, cwd=tmp_path)
    assert stopped.returncode == 0 and "trainer exit code 130" in stopped.stdout, stopped.stdout + stopped.stderr
    # the last run ended: vf-vllm stops its server by itself
    wait_until(lambda: RunDir(sweep_dir).exit_code("inference").exists(), 60, "the sweep's server stopping",
               sweep_dir)
    assert "every run's trainer is gone" in RunDir(sweep_dir).log("inference").read_text()
    final = vf_rl("stop", "test", "--tmux-socket", socket_name, cwd=tmp_path)
    assert final.returncode == 0 and "stopped the sweep 'test'" in final.stdout, final.stdout + final.stderr
    assert "test-1 137" in final.stdout and "test-2 130" in final.stdout and "test-3 130" in final.stdout
    wait_until(lambda: not procs.pane_processes([], sweep_dir), 60, "every process of the sweep gone")
    assert not any(procs.pane_processes([], r) for r in runs)
