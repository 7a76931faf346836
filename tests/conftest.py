import socket
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The embedded model: the one install.sh made, or a fresh one (same script, same seed)."""
    made = ROOT / "models" / "tiny-reverse"
    if (made / "model.safetensors").exists():
        return made
    out = tmp_path_factory.mktemp("model") / "tiny-reverse"
    subprocess.run([sys.executable, "-m", "vfrl.make_tiny_model", "--out", str(out)], check=True)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(path: Path, model: Path, port: int, output_dir: Path, **trainer_args) -> Path:
    args = {
        "run_name": "test", "output_dir": str(output_dir), "learning_rate": 2e-3, "rollouts_per_example": 4,
        "micro_batch_size": 8, "batch_size": 16, "max_steps": 4, "max_tokens": 12, "max_seq_len": 96,
        "log_completions": False, **trainer_args,
    }
    path.write_text(tomli_w.dumps({
        "model": str(model),
        "env": {"id": "reverse-text"},
        "inference": {"port": port, "args": {"dtype": "float32", "max_model_len": 256, "enforce_eager": True}},
        "trainer": {"args": args},
    }))
    return path


class SharedServer:
    """A real vLLM CPU server (vf-vllm) serving the tiny model, shared by every test of the session."""

    api_key = "shared-test-key"

    def __init__(self, base_url: str, model: str, log: Path):
        self.base_url, self.model, self.log = base_url, model, log


@pytest.fixture(scope="session")
def shared_vllm_server(tmp_path_factory, tiny_model):
    """One vf-vllm for the session: fp32, max_model_len 1024 (the tiny model's position limit; its
    tokenizer spends one token per character), API key `SharedServer.api_key`."""
    import os
    import signal

    from vfrl.trainer.trainer import wait_for_server

    tmp = tmp_path_factory.mktemp("shared-server")
    port = free_port()
    (tmp / "config.toml").write_text(tomli_w.dumps({
        "model": str(tiny_model), "env": {"id": "reverse-text"},
        "inference": {"port": port, "args": {"dtype": "float32", "max_model_len": 1024, "enforce_eager": True}},
    }))
    env = {**os.environ, "VFRL_API_KEY": SharedServer.api_key, "CUDA_VISIBLE_DEVICES": ""}
    log = tmp / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(BIN / "vf-vllm"), "@", str(tmp / "config.toml"), "--pid-file", str(tmp / "pid")],
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_server(f"http://127.0.0.1:{port}/v1", timeout=300, inference_pid_file=tmp / "pid")
        yield SharedServer(f"http://127.0.0.1:{port}/v1", str(tiny_model), log)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
