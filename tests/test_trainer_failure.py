"""What the trainer keeps when the run cannot go on (trainer/failure.py, RLTrainer.keep_trained/stopped_by).

The real stack is in test_faults_e2e.py (vLLM killed and hung mid-run). Here the cases that cannot be
caused on cue there: a full disk while writing the emergency checkpoint (a write hook: save_pretrained
raises ENOSPC), a step that failed halfway, a checkpoint that already holds every step done.
"""

import errno
from pathlib import Path
from types import SimpleNamespace

import pytest

from test_checkpoint_resume import lora_setup, state
from vfrl.learner.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from vfrl.trainer.failure import EXIT_ERROR, EXIT_INFERENCE_LOST, RESUME_COMMAND_ENV, TrainingStopped, describe
from vfrl.run_dir import RunDir
from vfrl.trainer.inference_watch import InferenceLost
from vfrl.trainer.trainer import RLTrainer


class DiskFull:
    """A model whose save_pretrained finds the disk full half-way through."""

    def __init__(self, model):
        self.model = model

    def save_pretrained(self, path):
        Path(path).mkdir(parents=True)
        (Path(path) / "adapter_model.safetensors").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def trainer(tmp_path, tiny_model, monkeypatch):
    """The parts of an RLTrainer that keep_trained and stopped_by use, around a real LoRA model."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(RESUME_COMMAND_ENV, "vf-rl @ cfg.toml")
    model, opt, sched = lora_setup(tiny_model)
    run_dir = tmp_path / "outputs" / "run"
    (run_dir / "logs").mkdir(parents=True)
    learner = SimpleNamespace(policy=model, optimizer=opt, scheduler=sched, steps_done=0, in_step=False)
    t = SimpleNamespace(learner=learner, checkpoints_dir=run_dir / "checkpoints", run_dir=run_dir,
                        log_file=run_dir / "logs" / "trainer.log", base_url="http://127.0.0.1:9/v1",
                        inference_pid_file=run_dir / "inference.pid", server_paths=RunDir(run_dir),
                        training_state=state, restart_note={})
    t.keep_trained = lambda: RLTrainer.keep_trained(t)
    return t


def model_of(trainer):
    return trainer.learner.policy, trainer.learner.optimizer, trainer.learner.scheduler


def test_steps_trained_without_a_checkpoint_are_saved_with_the_command_that_continues(trainer, tiny_model):
    trainer.learner.steps_done = 3
    said = trainer.keep_trained()
    assert said == ("Training up to step 3 is saved in outputs/run/checkpoints/step-3; continue with: "
                    "vf-rl @ cfg.toml --resume outputs/run/checkpoints/step-3")
    model, opt, sched = lora_setup(tiny_model, seed=1)
    assert load_checkpoint(trainer.checkpoints_dir / "step-3", model, opt, sched)[0].step == 3


def test_a_checkpoint_of_every_step_done_is_not_written_again(trainer):
    trainer.learner.steps_done = 2
    made = save_checkpoint(trainer.checkpoints_dir, *model_of(trainer), state(2))
    before = made.stat().st_mtime_ns
    assert "Training up to step 2 is saved in outputs/run/checkpoints/step-2" in trainer.keep_trained()
    assert made.stat().st_mtime_ns == before


def test_a_step_that_failed_halfway_is_not_saved_and_the_newest_checkpoint_is_named(trainer):
    save_checkpoint(trainer.checkpoints_dir, *model_of(trainer), state(2))
    trainer.learner.steps_done, trainer.learner.in_step = 3, True
    assert trainer.keep_trained() == ("The failing step's state is not saved; the newest checkpoint is "
                                      "outputs/run/checkpoints/step-2, continue with: vf-rl @ cfg.toml --resume "
                                      "outputs/run/checkpoints/step-2")
    assert [p.name for p in list_checkpoints(trainer.checkpoints_dir)] == ["step-2"]


def test_a_full_disk_loses_no_checkpoint_and_is_said_in_one_sentence(trainer):
    good = save_checkpoint(trainer.checkpoints_dir, *model_of(trainer), state(2))
    trainer.learner.policy, trainer.learner.steps_done = DiskFull(trainer.learner.policy), 5
    said = trainer.keep_trained()
    assert said == ("The emergency checkpoint could not be written (the disk is full (OSError: [Errno 28] No space "
                    "left on device)); the newest checkpoint is outputs/run/checkpoints/step-2")
    assert latest_checkpoint(trainer.checkpoints_dir) == good
    assert not list(trainer.checkpoints_dir.glob(".*"))  # the half-written one gave its space back
    assert "No space left on device" in trainer.log_file.read_text()


def test_nothing_trained_nothing_to_keep(trainer):
    assert trainer.keep_trained() == "No step was trained, nothing to keep."


def test_the_one_line_names_a_lost_server_and_its_log_and_exits_3(trainer):
    trainer.learner.steps_done = 1
    stopped = RLTrainer.stopped_by(trainer, InferenceLost("the vLLM server (pid 42) exited"))
    assert isinstance(stopped, TrainingStopped) and stopped.code == EXIT_INFERENCE_LOST
    assert stopped.line.startswith("vf-train: the vLLM server (pid 42) exited (see outputs/run/logs/inference.log). "
                                   "Training up to step 1 is saved in outputs/run/checkpoints/step-1")
    assert "\n" not in stopped.line


def test_a_lost_remote_server_is_named_with_its_own_log_not_one_vf_rl_never_wrote(trainer):
    trainer.learner.steps_done = 1
    trainer.inference_pid_file = None  # inference.base_url: vf-rl started no server and has no inference.log
    stopped = RLTrainer.stopped_by(trainer, InferenceLost("the vLLM server at http://gpu-node-3:8000 does not answer"))
    assert stopped.code == EXIT_INFERENCE_LOST
    assert stopped.line.startswith("vf-train: the vLLM server at http://gpu-node-3:8000 does not answer (see its own "
                                   "log, where it runs). Training up to step 1 is saved in "
                                   "outputs/run/checkpoints/step-1")


def test_any_other_failure_is_named_with_the_server_still_checked(trainer):
    """The loop failed on its own; a server that is gone (nothing listens on port 9) is still named as the cause."""
    try:
        raise ValueError("boom")
    except ValueError as e:
        stopped = RLTrainer.stopped_by(trainer, e)
    assert stopped.code == EXIT_INFERENCE_LOST and "exited (connection refused)" in stopped.line
    assert "Traceback" in trainer.log_file.read_text() and "ValueError: boom" in trainer.log_file.read_text()


def test_errors_worded_for_users_are_shown_as_they_are():
    from vfrl.envs.loader import EnvironmentLoadError

    assert describe(EnvironmentLoadError("environment 'x' (package x 0.1): boom")) == (
        "environment 'x' (package x 0.1): boom")
    assert describe(KeyError("k")) == "KeyError: 'k'"
    assert EXIT_ERROR == 1


def test_a_batch_past_generation_timeout_stops_the_run_in_one_line():
    """The whole-batch limit (a stall every rollout shares, e.g. a server too slow for the batch); unit: a
    stand-in environment whose rollouts never finish, since a real server cannot be slowed on cue."""
    import asyncio

    from vfrl.config import TrainerArgs
    from vfrl.envs.environment import Environment
    from vfrl.rollouts.orchestrator import Orchestrator
    from vfrl.rollouts.step_faults import BatchTimedOut

    class Stalls(Environment):
        async def run_group(self, *args, **kwargs):
            await asyncio.sleep(3600)

    args = TrainerArgs(batch_size=4, rollouts_per_example=2, generation_timeout=0.2, rollout_timeout=0.1)
    orch = Orchestrator(Stalls(dataset=[{"question": "q", "answer": "a"}] * 4), client=None, gen=args.generation)
    with pytest.raises(BatchTimedOut) as e:
        asyncio.run(orch.generate(4, "policy-4", 4))
    assert str(e.value) == ("step 5: the batch's rollouts did not finish within generation_timeout = 0.2s; raise it, "
                            "or lower rollout_timeout, max_tokens or batch_size")
    assert describe(e.value) == str(e.value)


def test_the_no_attach_console_leaves_out_the_tracebacks_kept_for_the_log(tmp_path):
    """`vf-rl @ cfg --no-attach` streams trainer.log as the console: the one line shows, the traceback does not."""
    from vfrl.launcher.lifecycle import ConsoleStream
    from vfrl.trainer.failure import log_traceback

    log = tmp_path / "trainer.log"
    log.write_text("step 1/4 | reward 0.5\n")
    try:
        raise ValueError("boom")
    except ValueError as e:
        log_traceback(log, e, about="asyncio: Task exception was never retrieved")
    with open(log, "a") as f:
        f.write("vf-train: error: ValueError: boom (traceback in trainer.log)\nlast line, no newline yet")
    data = log.read_text()
    assert "Traceback (most recent call last)" in data and "asyncio: Task exception" in data
    shown = []
    console = ConsoleStream(shown.append)
    for i in range(0, len(data), 7):  # as follow() reads it: chunks cut anywhere
        console(data[i:i + 7])
    console.close()
    assert "".join(shown) == ("step 1/4 | reward 0.5\nvf-train: error: ValueError: boom (traceback in trainer.log)\n"
                              "last line, no newline yet")


def test_an_interrupt_nobody_retrieved_is_a_stop_not_a_logged_error(tmp_path):
    """A second Ctrl-C during the shutdown ends a task with KeyboardInterrupt (seen in CI): the log stays clean;
    a real error nobody retrieved still goes to the log, between the markers."""
    import asyncio

    from vfrl.trainer.failure import unretrieved_errors_to

    log = tmp_path / "trainer.log"
    handle = unretrieved_errors_to(log)
    loop = asyncio.new_event_loop()
    try:
        handle(loop, {"message": "Task exception was never retrieved", "exception": KeyboardInterrupt()})
        handle(loop, {"message": "Task exception was never retrieved", "exception": asyncio.CancelledError()})
        assert not log.exists()
        try:
            raise ConnectionError("refused")
        except ConnectionError as e:
            handle(loop, {"message": "Task exception was never retrieved", "exception": e})
    finally:
        loop.close()
    assert "ConnectionError: refused" in log.read_text() and "asyncio: Task exception" in log.read_text()


def test_an_error_collected_at_interpreter_exit_is_dropped_quietly(tmp_path, monkeypatch):
    """A task whose error nobody read is collected at interpreter exit, where the handler can no longer open its log
    (open is gone: NameError). asyncio would print the handler's own error on the console: it must not raise."""
    import asyncio

    from vfrl.trainer import failure

    def gone(*args, **kwargs):
        raise NameError("name 'open' is not defined")

    monkeypatch.setattr(failure, "log_traceback", gone)
    monkeypatch.setattr(failure, "open", gone, raising=False)  # a module global shadows the builtin
    handle = failure.unretrieved_errors_to(tmp_path / "trainer.log")
    loop = asyncio.new_event_loop()
    try:
        handle(loop, {"message": "Task exception was never retrieved", "exception": ConnectionError("refused")})
        handle(loop, {"message": "Future exception was never retrieved"})
    finally:
        loop.close()


def test_on_a_shared_gpu_the_trainer_loads_its_model_only_once_vllm_is_up(tmp_path, monkeypatch):
    """vLLM counts the GPU memory that disappears while it starts as its own: the trainer waits for /health
    before it builds its model (the plan sets VFRL_TRAINER_LOADS_AFTER_VLLM on a shared GPU)."""
    from vfrl.trainer import cli, inference_watch

    events = []
    monkeypatch.setattr(inference_watch, "wait_for_server",
                        lambda url, timeout, pid, key: events.append(("wait", url)) or 0.1)

    class Recorder:
        def __init__(self, cfg, run_dir, base_url, api_key, server_dir=None):
            events.append(("model", base_url))

        def train(self):
            events.append(("train", None))

    monkeypatch.setattr(cli, "RLTrainer", Recorder)
    monkeypatch.setattr(cli, "freeze_long_lived", lambda: None)  # vf-train's heap freeze, not this test process's
    inference = SimpleNamespace(url="http://h:1/v1", base_url=None, port=1, host="h")
    monkeypatch.setattr(cli, "load_config", lambda path: SimpleNamespace(inference=inference))
    monkeypatch.setenv("VFRL_TRAINER_LOADS_AFTER_VLLM", "1")
    cli.run(tmp_path / "config.toml", tmp_path, None)
    assert events == [("wait", "http://h:1/v1"), ("model", "http://h:1/v1"), ("train", None)]
    events.clear()
    inference.port = 0  # the port vLLM bound, which vf-vllm wrote to the run directory
    (tmp_path / "inference.port").write_text("4321")
    cli.run(tmp_path / "config.toml", tmp_path, None)
    assert events == [("wait", "http://h:4321/v1"), ("model", "http://h:4321/v1"), ("train", None)]
    events.clear()
    monkeypatch.delenv("VFRL_TRAINER_LOADS_AFTER_VLLM")
    cli.run(tmp_path / "config.toml", tmp_path, None)
    assert events == [("model", None), ("train", None)]  # GPUs of its own: _train finds the port and waits, later


def test_a_vllm_that_dies_while_the_trainer_waits_to_load_is_one_line_and_exit_3(tmp_path):
    from vfrl.trainer.cli import wait_for_vllm_first

    (tmp_path / "inference.pid").write_text("999999")  # no such process: the server is gone
    own = SimpleNamespace(inference=SimpleNamespace(port=0, host="127.0.0.1", base_url=None))
    for url in ("http://127.0.0.1:9/v1", None):  # None: port 0, the port not yet written
        with pytest.raises(TrainingStopped) as e:
            wait_for_vllm_first(url, own, tmp_path, "key")
        assert e.value.code == EXIT_INFERENCE_LOST and "\n" not in e.value.line
        assert "during start-up" in e.value.line and "No step was trained" in e.value.line


class KeyedServer:
    """A stand-in vLLM on a free port: /health open, /v1/models only with `key` (vf-vllm's key check)."""

    def __init__(self, key: str):
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                ok = self.path == "/health" or self.headers.get("Authorization") == f"Bearer {key}"
                self.send_response(200 if ok else 401)
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *a):
                pass

        self.httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_another_runs_server_on_the_port_is_never_taken_for_this_runs(tmp_path):
    """A port named in the config can be held by another run's vLLM, bound before this run's, which then answers
    /health for this run (and 401 to its first request: seen under load when port 0 was picked and released). The
    run's own key decides: its server is waited for, and when its vLLM could not bind (its process gone) the run
    stops in one line saying so."""
    import subprocess
    import sys

    from vfrl.trainer.inference_watch import InferenceLost, wait_for_server

    other = KeyedServer("another-runs-key")
    try:
        assert wait_for_server(other.url, 5, api_key="another-runs-key") < 5  # its own run takes it
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        (tmp_path / "inference.pid").write_text(str(dead.pid))  # this run's vLLM, which could not bind the port
        with pytest.raises(InferenceLost) as e:
            wait_for_server(other.url, 30, tmp_path / "inference.pid", api_key="this-runs-key")
        assert f"another server answers at {other.url[:-3]} and refuses this run's API key" in str(e.value)
        alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            (tmp_path / "inference.pid").write_text(str(alive.pid))  # still starting: waited for, never taken
            with pytest.raises(InferenceLost, match="one that refuses this run's API key answers /health there"):
                wait_for_server(other.url, 2, tmp_path / "inference.pid", api_key="this-runs-key")
        finally:
            alive.kill()
    finally:
        other.close()


def test_a_closed_terminal_keeps_the_steps_trained(trainer):
    """SIGHUP (the tmux server killed, the pane closed) used to end vf-train on the spot, losing every step since
    the last checkpoint. Now the loop ends as on Ctrl-C and the trainer keeps what it trained, saying so in the
    log file (no pane shows its line any more). The real signal, sent to this process while the loop waits."""
    import asyncio
    import os
    import signal
    import threading

    from vfrl import stop_signals

    async def waits(torch_thread):
        await asyncio.sleep(60)

    trainer.learner.steps_done = 2
    trainer.ranks = SimpleNamespace(is_main=True)
    trainer._train_watched = waits
    trainer.stopped_by = lambda e: RLTrainer.stopped_by(trainer, e)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2, signal.SIGHUP)}
    stop_signals.release()
    try:
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGHUP)).start()
        with pytest.raises(TrainingStopped) as e:
            RLTrainer.train(trainer)
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
        stop_signals._hung_up.clear()
    assert e.value.code == EXIT_ERROR
    assert e.value.line.startswith("vf-train: the trainer's terminal was closed (SIGHUP: its tmux pane or the tmux "
                                   "server is gone). Training up to step 2 is saved in outputs/run/checkpoints/step-2")
    assert e.value.line in trainer.log_file.read_text()
    assert latest_checkpoint(trainer.checkpoints_dir).name == "step-2"


def test_a_second_ctrl_c_that_breaks_the_loops_close_is_still_a_ctrl_c(trainer, monkeypatch):
    """The second Ctrl-C can land as the loop's main task ends on the first, leaving the loop stopped: asyncio's
    Runner then fails to close it (RuntimeError: Event loop stopped before Future completed, seen in CI's
    test_ctrl_c_twice_in_the_trainer_pane_stops_the_run). That is the user's stop (exit 130), not a failure."""
    import asyncio

    class ClosedAfterTheInterrupt(asyncio.Runner):
        def run(self, coro, **kwargs):
            coro.close()
            raise KeyboardInterrupt

        def close(self):
            super().close()
            raise RuntimeError("Event loop stopped before Future completed.")

    async def waits(torch_thread):
        await asyncio.sleep(60)

    monkeypatch.setattr(asyncio, "Runner", ClosedAfterTheInterrupt)
    trainer.ranks = SimpleNamespace(is_main=True)
    trainer._train_watched = waits
    trainer.stopped_by = lambda e: RLTrainer.stopped_by(trainer, e)
    with pytest.raises(KeyboardInterrupt):
        RLTrainer.train(trainer)
