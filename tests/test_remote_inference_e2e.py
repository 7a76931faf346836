"""Training against a real vLLM server vf-rl did not start: the session's shared vf-vllm (conftest.py), started
by the test, no extra vLLM start-up. `vf-rl @ configs/rl/quickstart.toml` with inference.base_url pointing at it
checks the server, starts only the trainer (real tmux, real peft), trains 3 steps of 32 rollouts with its
adapters hot-loaded into that server, and leaves the server running and answering."""

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from conftest import log_since, tmux_socket
from vfrl.launcher.plot import read_metrics
from vfrl.proc_table import pid_alive

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]
VF_RL = str(Path(sys.executable).parent / "vf-rl")


@pytest.fixture(scope="module")
def remote_run(shared_vllm_server, tiny_model, tmp_path_factory):
    srv = shared_vllm_server
    tmp = tmp_path_factory.mktemp("remote")
    socket_name = tmux_socket("remote-e2e", tmp)
    server_log_start = srv.log.stat().st_size
    argv = [VF_RL, "@", str(ROOT / "configs/rl/quickstart.toml"), "--model", str(tiny_model),
            "--inference.base_url", srv.base_url, "--inference.api_key_var", "REMOTE_VLLM_KEY",
            "--trainer.args.max_steps", "3", "--trainer.args.batch_size", "32", "--trainer.args.micro_batch_size", "32",
            "--trainer.args.output_dir", str(tmp / "outputs"),
            "--trainer.args.lora_sync", "adapter",  # the shared server serves runtime LoRA; the quick start merges
            "--no-attach", "--tmux-socket", socket_name]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp, timeout=600,
                              env={**os.environ, "REMOTE_VLLM_KEY": srv.api_key})
        yield proc, tmp / "outputs" / "quickstart", srv, log_since(srv.log, server_log_start)
    finally:
        subprocess.run(["tmux", "-L", socket_name, "kill-server"], capture_output=True)


def test_vf_rl_trains_against_the_remote_server(remote_run):
    proc, run_dir, srv, _ = remote_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"vf-rl: checking the vLLM server at {srv.base_url}" in proc.stdout
    assert f"(the trainer only, on cpu; vLLM at {srv.base_url}, not started by vf-rl)" in proc.stdout
    assert "step 3/3" in proc.stdout
    steps = [m for m in read_metrics(run_dir) if "loss" in m]
    assert [m["step"] for m in steps] == [1, 2, 3]
    assert all(isinstance(m["reward_mean"], float) for m in steps)
    assert (run_dir / "trainer.exitcode").read_text().strip() == "0"
    # vf-rl started no server: no inference pane script, log or pid, and no key of its own
    assert not {"inference.sh", "inference.pid", "inference.exitcode"} & {p.name for p in run_dir.iterdir()}
    assert not (run_dir / "logs" / "inference.log").exists() and not (run_dir / ".api_key").exists()


def test_every_adapter_was_hot_loaded_into_the_remote_server_from_the_run_dir(remote_run):
    _, run_dir, _, server_log = remote_run
    for version in range(4):  # policy-0 (base) then one per optimizer step, read from the trainer's own path
        assert (f"Loaded new LoRA adapter: name 'policy-{version}', path '{run_dir / 'adapters' / f'policy-{version}'}'"
                in server_log), server_log[-3000:]
    used = [m["policy_version"] for m in read_metrics(run_dir) if "loss" in m]
    assert used[-1] >= 1, used
    rollouts = [json.loads(line) for line in (run_dir / "rollouts" / "step_3.jsonl").read_text().splitlines()]
    assert {r["policy"] for r in rollouts} == {f"policy-{used[-1]}"}


def test_the_remote_server_is_left_running_and_answering(remote_run):
    proc, run_dir, srv, _ = remote_run
    pid = int((srv.log.with_name(srv.log.stem + ".pid")).read_text())  # vf-vllm, as the fixture started it
    assert pid_alive(pid)
    root = srv.base_url.removesuffix("/v1")
    assert httpx.get(f"{root}/health", timeout=10).status_code == 200
    models = httpx.get(f"{srv.base_url}/models", headers={"Authorization": f"Bearer {srv.api_key}"}, timeout=10)
    assert models.status_code == 200
    # the final policy stays served (for vf-eval -m policy-3); the next run against the server clears it
    assert "policy-3" in {m["id"] for m in models.json()["data"]}
    trainer_log = (run_dir / "logs" / "trainer.log").read_text()
    assert "inference server stopped" not in proc.stdout + trainer_log
