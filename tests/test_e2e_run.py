"""The real thing: `vf-rl @ config` with real tmux, the real vLLM CPU server and real peft LoRA."""

import json
import os
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import BIN, write_config
from vfrl.launcher.plot import read_metrics as metrics

pytestmark = pytest.mark.e2e


def watch_argv_for_the_key(proc: subprocess.Popen, key_file: Path, timeout: float) -> SimpleNamespace:
    """Until `proc` exits: read the run's API key once vf-rl has written it, and look for it in every
    process's command line (/proc/*/cmdline). Processes that live less than one scan can slip by."""
    seen = SimpleNamespace(key=None, scans=0, leaks=set())
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            raise TimeoutError(f"vf-rl still running after {timeout:.0f}s")
        if seen.key is None and key_file.exists():
            seen.key = key_file.read_text() or None  # created empty (0600), then written
        if seen.key:
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    argv = cmdline.read_bytes()
                except OSError:  # the process ended meanwhile
                    continue
                if seen.key.encode() in argv:
                    seen.leaks.add(argv.replace(b"\0", b" ").decode(errors="replace"))
            seen.scans += 1
        try:
            proc.wait(0.2)
        except subprocess.TimeoutExpired:
            pass
    return seen


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_model):
    tmp = tmp_path_factory.mktemp("run")
    socket_name = f"vfrl-e2e-{tmp.name}"
    # wandb offline: its run files are among those that must not hold the API key
    cfg = write_config(tmp / "cfg.toml", tiny_model, port=0, output_dir=tmp / "outputs", max_steps=4, report_to="wandb")
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    run_dir = tmp / "outputs" / "test"
    argv = [str(BIN / "vf-rl"), "@", str(cfg), "--no-attach", "--tmux-socket", socket_name]
    try:
        # output to files, not pipes: nobody reads a pipe while the watch runs, and a full one would stall vf-rl
        with open(tmp / "vf-rl.out", "w+") as out, open(tmp / "vf-rl.err", "w+") as err:
            running = subprocess.Popen(argv, stdout=out, stderr=err, text=True, cwd=tmp, env=env)
            key_watch = watch_argv_for_the_key(running, run_dir / ".api_key", timeout=600)
            out.seek(0)
            err.seek(0)
            proc = subprocess.CompletedProcess(argv, running.returncode, out.read(), err.read())
        yield proc, run_dir, socket_name, key_watch
    finally:
        subprocess.run(["tmux", "-L", socket_name, "kill-server"], capture_output=True)


def test_run_finishes_with_trainer_exit_code_zero(finished_run):
    proc, run_dir, *_ = finished_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (run_dir / "trainer.exitcode").read_text().strip() == "0"
    assert "step 4/4" in proc.stdout  # progress streamed to the caller
    assert len(metrics(run_dir)) == 4


def test_adapter_hot_loaded_into_vllm_every_step(finished_run):
    _, run_dir, *_ = finished_run
    server_log = (run_dir / "logs" / "inference.log").read_text()
    for version in range(0, 5):  # policy-0 (base) then one per optimizer step
        assert f"Loaded new LoRA adapter: name 'policy-{version}'" in server_log
    # and the next rollouts really used it: every batch after the first was sampled by a newer adapter
    used = [m["policy_version"] for m in metrics(run_dir)]
    assert used[0] == 0 and used[-1] >= 2, used
    rollouts = [json.loads(line) for line in (run_dir / "rollouts" / "step_4.jsonl").read_text().splitlines()]
    assert {r["policy"] for r in rollouts} == {f"policy-{used[-1]}"}


def test_generation_of_next_batch_overlaps_training(finished_run):
    _, run_dir, *_ = finished_run
    m = metrics(run_dir)
    for n in range(len(m) - 1):
        train, gen_next = m[n], m[n + 1]
        assert gen_next["gen_start"] < train["train_end"] and gen_next["gen_end"] > train["train_start"], (n, train, gen_next)


def test_no_batch_is_more_than_one_policy_version_stale(finished_run):
    _, run_dir, *_ = finished_run
    for rec in metrics(run_dir):
        trained_at = rec["step"] - 1  # weights version when this batch was trained
        assert trained_at - 1 <= rec["policy_version"] <= trained_at


def test_run_leaves_no_process_and_no_session(finished_run):
    _, run_dir, socket_name, _ = finished_run
    pid = int((run_dir / "inference.pid").read_text())
    assert not Path(f"/proc/{pid}").exists(), "vLLM server still running"
    left = subprocess.run(["pgrep", "-f", str(run_dir)], capture_output=True, text=True).stdout.split()
    assert left == [], f"processes still running for the run: {left}"
    sessions = subprocess.run(["tmux", "-L", socket_name, "ls"], capture_output=True, text=True)
    assert sessions.returncode != 0  # no server, no session
    assert not (run_dir / ".api_key").exists()


def test_api_key_never_in_argv_logs_config_metrics_rollouts_or_wandb(finished_run):
    proc, run_dir, _, key_watch = finished_run
    assert key_watch.key and key_watch.scans > 0, "the run's .api_key was never seen while it ran"
    assert key_watch.leaks == set(), f"the API key is in a command line: {key_watch.leaks}"
    key = key_watch.key.encode()
    # every file the run left (logs, config.toml, metrics.jsonl, rollouts, wandb, pane scripts, adapters)
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    for must_exist in ("logs/inference.log", "logs/trainer.log", "config.toml", "metrics.jsonl", "rollouts/step_4.jsonl"):
        assert run_dir / must_exist in files, must_exist
    assert any("wandb" in p.relative_to(run_dir).parts for p in files), "no wandb files to check"
    assert [p for p in files if key in p.read_bytes()] == []
    assert key.decode() not in proc.stdout + proc.stderr
