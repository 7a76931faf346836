"""No GPU: vLLM and the trainer keep to their own cores (vfrl/cpu_cores.py; the split: test_launcher_plan.py)."""

import os
import subprocess
import sys

import pytest

from vfrl.cpu_cores import parse, pin


def test_core_lists_parse_as_vllm_writes_them():
    assert parse("0") == {0} and parse("0-3") == {0, 1, 2, 3} and parse("0-1, 4,6-7") == {0, 1, 4, 6, 7}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to pin to one")
def test_pin_moves_the_process_and_what_it_starts_later():
    core = max(os.sched_getaffinity(0))
    code = ("import os, subprocess, sys; from vfrl.cpu_cores import pin; "
            f"print(sorted(pin('{core}'))); sys.stdout.flush(); "
            "subprocess.run([sys.executable, '-c', 'import os; print(sorted(os.sched_getaffinity(0)))'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:2] == [f"[{core}]", f"[{core}]"]  # the child inherits it (vLLM's engine core and workers)


def test_cores_it_may_not_use_or_no_list_mean_no_pinning():
    before = os.sched_getaffinity(0)
    assert pin(None) is None and pin("auto") is None and pin("100000") is None
    assert os.sched_getaffinity(0) == before


def test_freeing_the_api_server_gives_up_when_the_server_ends_before_it_serves():
    """free_api_server waits for /health; a server that exits first (a start-up failure) ends the wait, and the
    thread, instead of leaving it polling a dead port (the moving itself: test_e2e_run)."""
    from vfrl.cpu_cores import free_api_server

    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    thread = free_api_server(server.pid, os.sched_getaffinity(0), lambda: "http://127.0.0.1:9/health", poll_s=0.05)
    server.wait()
    thread.join(10)
    assert not thread.is_alive()
