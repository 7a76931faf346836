"""A Ctrl-C or SIGTERM at any moment of vf-train's start-up is a stop: exit code 130, no traceback.

CI once saw `vf-rl stop`, sent a moment after launch, end vf-train with exit code 1: the KeyboardInterrupt
landed in the middle of an import and left asyncio half-made (stop_signals.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import tomli_w

from vfrl.run_dir import RunDir

BIN = os.path.dirname(sys.executable)


def test_signals_that_came_while_held_stop_at_release():
    script = (
        "import os, signal, sys\n"
        "from vfrl import stop_signals\n"
        "stop_signals.hold()\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "import json, asyncio  # imports go on undisturbed\n"
        "print('imported', flush=True)\n"
        "try:\n"
        "    stop_signals.release()\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(130)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130, done.stderr
    assert done.stdout.splitlines() == ["vf-train: stopping once start-up is done (a few seconds)", "imported"]


def test_after_release_every_stop_signal_raises_keyboard_interrupt():
    script = (
        "import os, signal, sys\n"
        "from vfrl import stop_signals\n"
        "stop_signals.hold(); stop_signals.release()\n"
        "try:\n    os.kill(os.getpid(), signal.{sig})\n    import time; time.sleep(30)\n"
        "except KeyboardInterrupt:\n    sys.exit(130)\n")
    for sig in ("SIGINT", "SIGTERM", "SIGUSR2"):
        done = subprocess.run([sys.executable, "-c", script.format(sig=sig)], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 130 and done.stdout == "", (sig, done.stdout, done.stderr)


def test_a_stop_signal_during_a_garbage_collector_callback_still_stops_the_loop():
    """CI saw a Slurm job train on for 100 s after `vf-rl stop`: its SIGUSR2 raised KeyboardInterrupt inside a
    weakref callback, where Python prints "Exception ignored" and drops it. Here the signal lands in one for
    sure, inside asyncio.Runner as vf-train's loop runs: the loop must still stop at once."""
    script = (
        "import asyncio, os, signal, sys, weakref\n"
        "from vfrl import stop_signals\n"
        "stop_signals.hold(); stop_signals.release()\n"
        "class Thing: pass\n"
        "def collected(ref):\n"
        "    os.kill(os.getpid(), signal.{sig})\n"
        "    for _ in range(1000): pass  # the handler runs here, inside the callback\n"
        "async def main():\n"
        "    thing = Thing(); ref = weakref.ref(thing, collected); del thing\n"
        "    await asyncio.sleep(30)\n"
        "try:\n"
        "    with asyncio.Runner() as runner: runner.run(main())\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(130)\n")
    for sig in ("SIGTERM", "SIGUSR2"):
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-c", script.format(sig=sig)], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 130 and "Exception ignored" not in done.stderr, (sig, done.stderr)
        assert time.monotonic() - t0 < 25, sig  # not the 30 s sleep's own end


@pytest.mark.parametrize("when", ["importing", "waiting for vLLM"])
def test_vf_train_stopped_during_start_up_exits_130_without_a_traceback(tmp_path, tiny_model, when):
    """The real console script, stopped while it imports torch and the trainer, and once it runs (its pid
    written: what `vf-rl stop` waits for) while it waits for a vLLM server that never comes."""
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "config.toml").write_text(tomli_w.dumps({
        "model": str(tiny_model), "env": {"id": "reverse-text"},
        "inference": {"port": 9},  # nothing listens there
        "trainer": {"gpus": 0, "args": {"output_dir": str(tmp_path), "max_tokens": 8, "max_seq_len": 64}}}))
    train = subprocess.Popen([os.path.join(BIN, "vf-train"), "@", str(run_dir / "config.toml")],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                             env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    if when == "importing":
        time.sleep(0.3)  # past the interpreter's own start-up (~40 ms), well before torch is imported
        assert not RunDir(run_dir).trainer_pid.exists()
    else:
        deadline = time.monotonic() + 240
        while not RunDir(run_dir).trainer_pid.exists():
            assert train.poll() is None and time.monotonic() < deadline, train.communicate()[0]
            time.sleep(0.05)
        assert int(RunDir(run_dir).trainer_pid.read_text()) == train.pid
    train.send_signal(signal.SIGINT)
    out, _ = train.communicate(timeout=240)
    assert train.returncode == 130, out
    assert "Traceback" not in out and "Aborted" not in out, out
    assert out.rstrip().endswith("vf-train: interrupted; the adapters in the run directory are complete"), out


def test_a_run_that_fails_after_a_sigterm_exits_130(tmp_path):
    """Slurm's scancel sends SIGTERM to every process of the job at once: vLLM may be gone before vf-train acts
    on its own signal, and the stop then reaches vf-train as a lost server (CI saw exit code 3). vf-train
    remembers the signal and exits 130, the failure's own line printed too. Here the KeyboardInterrupt of the
    SIGTERM is replaced by the failure of a cleanup, as a request to the stopped server fails."""
    config = tmp_path / "config.toml"
    config.write_text("")
    script = (
        "import os, signal, sys, time\n"
        "from vfrl.trainer import cli, entry\n"
        "from vfrl.trainer.failure import EXIT_INFERENCE_LOST, TrainingStopped\n"
        "def run(config_path, run_dir, base_url, server_dir):\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        time.sleep(30)\n"
        "    finally:\n"
        "        raise TrainingStopped(EXIT_INFERENCE_LOST, 'vf-train: the vLLM server (pid 1) exited. Kept.')\n"
        "cli.run = run\n"
        f"sys.argv = ['vf-train', '@', {str(config)!r}]\n"
        "entry.main()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stdout + done.stderr
    assert "vf-train: the vLLM server (pid 1) exited. Kept." in done.stderr
    assert done.stdout.strip().splitlines()[-1] == ("vf-train: interrupted (a SIGTERM came too: the line above is "
                                                    "part of the stop); the adapters in the run directory are complete")
    assert "Traceback" not in done.stderr
    # without a signal the same failure exits 3: test_faults_e2e.py, a real server lost mid-run

