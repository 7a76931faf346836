"""The real thing: `vf-rl @ config` with real tmux, the real vLLM CPU server and real peft LoRA."""

import json
import subprocess
from pathlib import Path

import pytest

from conftest import BIN, write_config
from vfrl.launcher.plot import read_metrics as metrics

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_model):
    tmp = tmp_path_factory.mktemp("run")
    socket_name = f"vfrl-e2e-{tmp.name}"
    cfg = write_config(tmp / "cfg.toml", tiny_model, port=0, output_dir=tmp / "outputs", max_steps=4)
    try:
        proc = subprocess.run([str(BIN / "vf-rl"), "@", str(cfg), "--no-attach", "--tmux-socket", socket_name],
                              capture_output=True, text=True, timeout=600, cwd=tmp)
        run_dir = tmp / "outputs" / "test"
        yield proc, run_dir, socket_name
    finally:
        subprocess.run(["tmux", "-L", socket_name, "kill-server"], capture_output=True)


def test_run_finishes_with_trainer_exit_code_zero(finished_run):
    proc, run_dir, _ = finished_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (run_dir / "trainer.exitcode").read_text().strip() == "0"
    assert "step 4/4" in proc.stdout  # progress streamed to the caller
    assert len(metrics(run_dir)) == 4


def test_adapter_hot_loaded_into_vllm_every_step(finished_run):
    _, run_dir, _ = finished_run
    server_log = (run_dir / "logs" / "inference.log").read_text()
    for version in range(0, 5):  # policy-0 (base) then one per optimizer step
        assert f"Loaded new LoRA adapter: name 'policy-{version}'" in server_log
    # and the next rollouts really used it: every batch after the first was sampled by a newer adapter
    used = [m["policy_version"] for m in metrics(run_dir)]
    assert used[0] == 0 and used[-1] >= 2, used
    rollouts = [json.loads(line) for line in (run_dir / "rollouts" / "step_4.jsonl").read_text().splitlines()]
    assert {r["policy"] for r in rollouts} == {f"policy-{used[-1]}"}


def test_generation_of_next_batch_overlaps_training(finished_run):
    _, run_dir, _ = finished_run
    m = metrics(run_dir)
    for n in range(len(m) - 1):
        train, gen_next = m[n], m[n + 1]
        assert gen_next["gen_start"] < train["train_end"] and gen_next["gen_end"] > train["train_start"], (n, train, gen_next)


def test_no_batch_is_more_than_one_policy_version_stale(finished_run):
    _, run_dir, _ = finished_run
    for rec in metrics(run_dir):
        trained_at = rec["step"] - 1  # weights version when this batch was trained
        assert trained_at - 1 <= rec["policy_version"] <= trained_at


def test_run_leaves_no_process_and_no_session(finished_run):
    _, run_dir, socket_name = finished_run
    pid = int((run_dir / "inference.pid").read_text())
    assert not Path(f"/proc/{pid}").exists(), "vLLM server still running"
    left = subprocess.run(["pgrep", "-f", str(run_dir)], capture_output=True, text=True).stdout.split()
    assert left == [], f"processes still running for the run: {left}"
    sessions = subprocess.run(["tmux", "-L", socket_name, "ls"], capture_output=True, text=True)
    assert sessions.returncode != 0  # no server, no session
    assert not (run_dir / ".api_key").exists()
