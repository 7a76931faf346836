import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The embedded model: the one install.sh made, or a fresh one (same script, same seed)."""
    made = ROOT / "models" / "tiny-reverse"
    if (made / "model.safetensors").exists():
        return made
    out = tmp_path_factory.mktemp("model") / "tiny-reverse"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_tiny_model.py"), "--out", str(out)], check=True)
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
    body = "\n".join(f"{k} = {v!r}" if not isinstance(v, str) else f'{k} = "{v}"' for k, v in args.items())
    body = body.replace("True", "true").replace("False", "false")
    path.write_text(
        f'model = "{model}"\n\n[env]\nid = "reverse-text"\n\n[inference]\nport = {port}\n\n'
        f'[inference.args]\ndtype = "float32"\nmax_model_len = 256\nenforce_eager = true\n\n'
        f"[trainer.args]\n{body}\n"
    )
    return path


@pytest.fixture
def tmux_socket():
    name = f"vfrl-test-{os.getpid()}-{time.monotonic_ns()}"
    yield name
    subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True)


def wait_http(url: str, timeout: float = 300) -> None:
    import httpx

    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1)
    raise TimeoutError(url)
