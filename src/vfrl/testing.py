"""A real vf-vllm and a small run config, for the test suite and the benchmarks (as numpy.testing serves
numpy's own): both start the real server the same way, so a benchmark measures what the tests check."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import tomli_w

BIN = Path(sys.executable).parent  # this environment's console scripts (vf-vllm, vf-rl, ...)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(path: Path, model: Path, port: int, output_dir: Path, **trainer_args) -> Path:
    """A reverse-text run of the tiny model: short completions, a few steps; `trainer_args` override."""
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


@contextmanager
def vf_vllm(config: Path, port: int, api_key: str, log: Path) -> Iterator[str]:
    """A real `vf-vllm @ config` (its own process group) until the block ends; yields the base URL. `port` 0: the
    port vLLM binds itself, read from inference.port beside `log`."""
    from vfrl.grpo import stop_server
    from vfrl.run_dir import RunDir
    from vfrl.trainer.inference_watch import START_TIMEOUT, listening_url, wait_for_server

    pid_file = log.with_name(log.stem + ".pid")
    pid_file.unlink(missing_ok=True)  # a stale one names a dead server: wait_for_server would give up at once
    with open(log, "w") as out:
        proc = subprocess.Popen([str(BIN / "vf-vllm"), "@", str(config), "--pid-file", str(pid_file)],
                                env={**os.environ, "VFRL_API_KEY": api_key, "CUDA_VISIBLE_DEVICES": ""},
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            url = f"http://127.0.0.1:{port}/v1"
            if not port:
                url = listening_url("127.0.0.1", RunDir(pid_file.parent).inference_port, pid_file, START_TIMEOUT)
            wait_for_server(url, timeout=300, inference_pid_file=pid_file, api_key=api_key)
            yield url
        finally:
            stop_server(proc)  # the Python API's own stop: the group, SIGKILL after 60 s
