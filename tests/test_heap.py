"""vf-train keeps its start-up objects out of full garbage collections (trainer/heap.py), before its loop runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

# vf-train's entry with a trainer that reports what the collector holds when its loop would start
PROGRAM = """
import gc
from types import SimpleNamespace
from vfrl.trainer import cli

class Trainer:
    def __init__(self, *args, **kwargs):
        self.walked = len(gc.get_objects())  # what a full collection walks before the freeze
    def train(self):
        print(self.walked, gc.get_freeze_count(), len(gc.get_objects()))

cli.RLTrainer = Trainer
cli.load_config = lambda path: SimpleNamespace(inference=SimpleNamespace(url="http://127.0.0.1:1/v1", port=1,
                                                                         base_url=None))
cli.run("config.toml", "run", None)
"""


def test_vf_train_freezes_the_objects_of_its_start_up_before_its_loop():
    out = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    walked, frozen, left = map(int, out.stdout.split())
    assert frozen >= 0.9 * walked and left < 0.1 * walked  # the loop's collections walk what it makes, not those


def test_the_frozen_heap_is_freed_at_exit_so_no_extension_reports_a_leak():
    """triton's nanobind bindings (loaded with torch) count their objects at teardown: a heap still frozen at exit
    made them print a "nanobind: leaked ..." report under the run's summary."""
    pytest.importorskip("triton")
    program = "import torch, triton\nfrom vfrl.trainer.heap import freeze_long_lived\nfreeze_long_lived()\n"
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "leaked" not in out.stderr, out.stderr[-2000:]
