"""RLTrainer.push: the save, then vLLM's load with the sync's save_aside written meanwhile (weight_sync.py).

The real push, into a real vf-vllm, is test_full_ft_parity.py's (MergedLoraSync: `adapters/policy-N` written
every step); here a sync whose load waits for save_aside shows the two run at once, and what happens when
either fails.
"""

import asyncio
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from vfrl.trainer.torch_thread import TorchThread
from vfrl.trainer.trainer import RLTrainer


class Sync:
    """Records which thread did what; load waits (up to 10 s) for save_aside to have run."""

    def __init__(self, load_error: Exception | None = None, aside_error: Exception | None = None):
        self.aside_done = threading.Event()
        self.threads: dict[str, str] = {}
        self.load_saw_aside = None
        self.load_error, self.aside_error = load_error, aside_error

    def save(self, model, version):
        self.threads["save"] = threading.current_thread().name
        return Path(f"weights/step-{version}")

    def save_aside(self, model, version):
        self.threads["aside"] = threading.current_thread().name
        self.aside_done.set()
        if self.aside_error:
            raise self.aside_error

    def load(self, path, version):
        self.threads["load"] = threading.current_thread().name
        self.load_saw_aside = self.aside_done.wait(10)
        if self.load_error:
            raise self.load_error
        return f"policy-{version}"


def push(sync: Sync):
    trainer = SimpleNamespace(torch_thread=TorchThread(), sync=sync, served=None)
    try:
        return asyncio.run(RLTrainer.push(trainer, model=object(), version=3)), trainer
    finally:
        trainer.torch_thread.join()


def test_what_vllm_does_not_read_is_written_in_the_torch_thread_while_vllm_loads():
    sync = Sync()
    (name, seconds), trainer = push(sync)
    assert name == trainer.served == "policy-3" and seconds < 10
    assert sync.load_saw_aside  # the old push wrote it after the load returned: the load waited 10 s for it
    assert sync.threads["aside"] == sync.threads["save"] != sync.threads["load"]


def test_a_failed_load_is_the_error_reported_even_when_the_write_aside_fails_too():
    with pytest.raises(RuntimeError, match="vLLM refused"):
        push(Sync(load_error=RuntimeError("vLLM refused adapter policy-3"), aside_error=OSError("disk full")))


def test_a_failed_write_aside_fails_the_push():
    with pytest.raises(OSError, match="disk full"):
        push(Sync(aside_error=OSError("disk full")))
