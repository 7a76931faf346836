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
    path.write_text(tomli_w.dumps({
        "model": str(model),
        "env": {"id": "reverse-text"},
        "inference": {"port": port, "args": {"dtype": "float32", "max_model_len": 256, "enforce_eager": True}},
        "trainer": {"args": args},
    }))
    return path

