"""A real full disk (issue 42, item 4): a small tmpfs mounted where the trainer writes, filled, and the trainer's
own writers run on it: ENOSPC comes from the kernel, cut-short writes included, not from a write hook.

- a rollout file: removed, said once, counted (`rollout_files_lost`); the run goes on;
- metrics.jsonl: each line whole or not at all; the line it cannot write stops the run;
- an adapter, a checkpoint: nothing half-written is left, the older ones are whole; the run stops in one line
  that names the newest whole checkpoint when the emergency checkpoint cannot be written either.

Mounting needs root (CI containers mostly refuse it: skipped there, with the reason; the write-hook tests in
test_checkpoint_resume.py and test_trainer_failure.py stay). The whole trainer on a full disk, against a real
vLLM, is benchmarks/full_disk.py (docs/reliability.md, "A real full disk").
"""

import errno
import http.server
import io
import json
import os
import subprocess
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from test_checkpoint_resume import lora_setup, pending_batch, state
from vfrl.config import TrainerArgs
from vfrl.run_dir import RunDir, read_jsonl
from vfrl.learner.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from vfrl.trainer.console import TrainerConsole
from vfrl.trainer.failure import EXIT_ERROR, RESUME_COMMAND_ENV
from vfrl.run_dir import append_jsonl
from vfrl.trainer.run_log import RunLog
from vfrl.trainer.trainer import RLTrainer
from vfrl.rollouts.weight_sync import write_adapter


@pytest.fixture
def small_disk(tmp_path):
    """mount(directory, size): a tmpfs of `size` (mount's syntax: 64k, 4m) over `directory`, inside tmp_path only;
    every one is unmounted when the test ends."""
    mounted = []

    def mount(directory: Path, size: str) -> Path:
        assert directory.resolve().is_relative_to(tmp_path.resolve())
        if os.geteuid() != 0:
            pytest.skip("mounting a small tmpfs needs root")
        directory.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"this machine does not let root mount a tmpfs: {done.stderr.strip()}")
        mounted.append(directory)
        return directory

    yield mount
    for directory in reversed(mounted):
        if subprocess.run(["umount", str(directory)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(directory)], capture_output=True)  # a file still open: detach it


def fill(directory: Path, leave: int = 0) -> Path:
    """Take every free byte but `leave` of `directory`'s filesystem with a file, which is returned (unlink it to
    free them): a write of more than `leave` bytes then stops part-way."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 65536)  # a short write takes the last bytes, the next one finds none
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    finally:
        os.close(fd)
    os.truncate(filler, filler.stat().st_size - leave)
    return filler


def run_log(run_dir: Path) -> tuple[RunLog, io.StringIO]:
    paths = RunDir(run_dir)
    paths.rollouts.mkdir(parents=True, exist_ok=True)
    console = io.StringIO()
    return RunLog(paths, TrainerArgs(), TrainerConsole(console), config=None), console


def test_a_rollout_file_on_a_full_disk_is_said_once_counted_and_the_run_goes_on(tmp_path, small_disk):
    log, console = run_log(tmp_path / "run")
    filler = fill(small_disk(log.paths.rollouts, "64k"))
    for step in (1, 2):
        log.step(step, {"step": step, "max_steps": 3, "loss": 0.1}, pending_batch())
    filler.unlink()
    log.step(3, {"step": 3, "max_steps": 3, "loss": 0.1}, pending_batch())
    lines = read_jsonl(log.paths.metrics)
    assert [(x["step"], x.get("rollout_files_lost")) for x in lines] == [(1, 1), (2, 2), (3, 2)]
    assert sorted(p.name for p in log.paths.rollouts.iterdir()) == ["step_3.jsonl"]  # no cut file left
    assert len(read_jsonl(log.paths.step_rollouts(3))) == 1
    said = console.getvalue()
    assert said.count("WARNING") == 1
    assert ("!!! WARNING: rollouts/step_1.jsonl could not be written (No space left on device); the run goes on "
            "without the rollout files it cannot write (rollout_files_lost in metrics.jsonl counts them)") in said


def test_metrics_jsonl_on_a_full_disk_is_never_left_with_half_a_line(tmp_path, small_disk):
    """A line the disk cuts short is taken back: the file keeps whole lines, and the next line, once there is
    room, is read like the others (a half line would have swallowed it)."""
    run_dir = small_disk(tmp_path / "run", "64k")
    metrics = RunDir(run_dir).metrics
    append_jsonl(metrics, {"step": 1, "note": "x" * 1500})
    filler = fill(run_dir)
    with pytest.raises(OSError) as full:
        for step in range(2, 10):  # each fits in the page the file has until one needs another: cut there
            append_jsonl(metrics, {"step": step, "note": "x" * 1500})
    assert full.value.errno == errno.ENOSPC
    text = metrics.read_text()
    assert text.endswith("\n") and all(json.loads(line) for line in text.splitlines())
    written = [x["step"] for x in read_jsonl(metrics)]
    assert written == list(range(1, written[-1] + 1)) and written[-1] < 9
    filler.unlink()
    append_jsonl(metrics, {"step": 99})
    assert [x["step"] for x in read_jsonl(metrics)] == [*written, 99]


def test_a_line_cut_by_a_crash_does_not_swallow_the_next_one(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1}\n{"step": 2, "lo')  # the trainer killed mid-write
    append_jsonl(metrics, {"step": 3})
    assert [x["step"] for x in read_jsonl(metrics)] == [1, 3]


def test_an_adapter_on_a_full_disk_leaves_the_older_one_whole_and_nothing_half_written(tmp_path, tiny_model,
                                                                                        small_disk):
    model, _, _ = lora_setup(tiny_model)
    adapters = small_disk(tmp_path / "adapters", "1m")
    first = write_adapter(model, adapters, 1)
    before = {p.name: p.read_bytes() for p in first.iterdir()}
    fill(adapters, leave=64 * 1024)  # the adapter's safetensors file is 130 KiB: cut half-way
    with pytest.raises(Exception, match="No space left on device|os error 28"):
        write_adapter(model, adapters, 2)
    assert sorted(p.name for p in adapters.iterdir()) == ["filler", "policy-1"]
    assert {p.name: p.read_bytes() for p in first.iterdir()} == before


class Healthy(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 -- http.server's name
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def healthy_server():
    """A vLLM stand-in whose /health answers: the failure is the disk's, not the server's (exit 1, not 3)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Healthy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_a_checkpoint_on_a_full_disk_stops_the_run_in_one_line_naming_the_newest_whole_one(
        tmp_path, tiny_model, small_disk, healthy_server, monkeypatch):
    """The save of step 4 finds the disk full; so does the emergency checkpoint: the line says so and names step 2,
    which loads."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(RESUME_COMMAND_ENV, "vf-rl @ cfg.toml")
    model, opt, sched = lora_setup(tiny_model)
    run_dir = tmp_path / "outputs" / "run"
    (run_dir / "logs").mkdir(parents=True)
    checkpoints = small_disk(run_dir / "checkpoints", "4m")
    good = save_checkpoint(checkpoints, model, opt, sched, state(2))
    fill(checkpoints, leave=64 * 1024)  # the adapter in model/ is 130 KiB: each save dies half-way through it
    learner = SimpleNamespace(policy=model, optimizer=opt, scheduler=sched, steps_done=4, in_step=False)
    trainer = SimpleNamespace(learner=learner, run_dir=run_dir, log_file=run_dir / "logs" / "trainer.log",
                              base_url=healthy_server, inference_pid_file=None, training_state=state)
    trainer.keep_trained = lambda: RLTrainer.keep_trained(trainer)
    try:
        save_checkpoint(checkpoints, model, opt, sched, state(4))  # the loop's save before step 5
    except Exception as e:  # noqa: BLE001 -- torch.save's RuntimeError or an OSError, whichever write found it full
        stopped = RLTrainer.stopped_by(trainer, e)
    else:
        pytest.fail("a full disk took a checkpoint")
    assert stopped.code == EXIT_ERROR and "\n" not in stopped.line
    assert stopped.line.startswith("vf-train: the disk is full (")  # said so, whichever library wrote the error
    assert "(traceback in outputs/run/logs/trainer.log)" in stopped.line
    assert "The emergency checkpoint could not be written (" in stopped.line
    assert stopped.line.endswith("; the newest checkpoint is outputs/run/checkpoints/step-2")
    assert list_checkpoints(checkpoints) == [good] and latest_checkpoint(checkpoints) == good
    assert sorted(p.name for p in checkpoints.iterdir()) == ["filler", "step-2"]  # the half-written ones are gone
    fresh, fresh_opt, fresh_sched = lora_setup(tiny_model, seed=1)
    assert load_checkpoint(good, fresh, fresh_opt, fresh_sched)[0].step == 2
