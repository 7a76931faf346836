"""vf-train: the trainer process. Reads the resolved run config and trains against the vLLM server."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from transformers.utils import logging as hf_logging

from vfrl.config import load_config
from vfrl.cpu_cores import TRAINER_CORES_ENV, pin
from vfrl.daemon_pool import exit_process
from vfrl.gpu_share import TRAINER_LOADS_AFTER_VLLM_ENV
from vfrl.inference.server import API_KEY_ENV
from vfrl.run_dir import SERVER_DIR_ENV, RunDir
from vfrl import stop_signals
from vfrl.trainer.failure import (
    EXIT_ERROR, EXIT_INFERENCE_LOST, EXIT_INTERRUPTED, TrainingStopped, describe, log_traceback,
)
from vfrl.trainer.heap import freeze_long_lived
from vfrl.trainer.trainer import RLTrainer  # all imported while vf-train holds Ctrl-C (stop_signals.py)

app = typer.Typer(add_completion=False, help=__doc__, pretty_exceptions_enable=False)


@app.command()
def train(
    at: Annotated[str, typer.Argument(metavar="@", help="Literal '@' followed by the resolved config file.")],
    config_path: Annotated[Path, typer.Argument(metavar="CONFIG", exists=True, dir_okay=False)],
    base_url: Annotated[str | None, typer.Option(
        envvar="VFRL_INFERENCE_URL",
        help="vLLM base URL of a server on another machine (a Slurm job's inference node): watched by /health only, "
             "never stopped; default: inference.base_url, else [inference] host/port.")] = None,
    server_dir: Annotated[Path | None, typer.Option(
        envvar=SERVER_DIR_ENV,
        help="The run directory of the vf-vllm this run shares with the other runs of a sweep (its pid, port, "
             "restarts and log); default: the run's own.")] = None,
) -> None:
    """Train the run described by CONFIG (as written by vf-rl into the run directory)."""
    if at != "@":
        raise typer.BadParameter("usage: vf-train @ CONFIG")
    run_dir = config_path.resolve().parent
    try:
        try:
            # `vf-rl stop` sends its Ctrl-C once this file is there. The rank comes from the launcher's environment
            # (accelerate sets RANK): the process group, and so Ranks.is_main, does not exist yet
            if os.environ.get("RANK", "0") == "0":
                RunDir(run_dir).trainer_pid.write_text(str(os.getpid()))
            # SIGTERM (Slurm's scancel, a job's time limit) is a stop like Ctrl-C: the step is finished or
            # dropped, the adapters on disk stay whole, and the exit code says interrupted
            stop_signals.release()
            pin(os.environ.get(TRAINER_CORES_ENV))  # no GPU: the cores vLLM does not use (cpu_cores.py)
            run(config_path, run_dir, base_url, server_dir)
        finally:  # on the way out: a late or second Ctrl-C must not raise inside an atexit hook (a traceback)
            stop_signals.quiet()
    except KeyboardInterrupt:  # Ctrl-C in the pane or `vf-rl stop`: adapters are written atomically, so whole
        print(INTERRUPTED.format(""), flush=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    except TrainingStopped as e:  # dealt with: steps kept, traceback logged
        with contextlib.suppress(OSError):  # a closed pane (the line is in the log file then, RLTrainer.train)
            print(e.line, file=sys.stderr, flush=True)
        raise typer.Exit(stopped_or(e.code))
    except Exception as e:  # before training began (model, environment, ...): one line, the story in the log
        log = RunDir(run_dir).log("trainer")
        log_traceback(log, e)
        print(f"vf-train: error: {describe(e)} (traceback in {log})", file=sys.stderr, flush=True)
        raise typer.Exit(stopped_or(EXIT_ERROR))


INTERRUPTED = "vf-train: interrupted{}; the adapters in the run directory are complete"


def stopped_or(code: int) -> int:
    """The exit code of a run that failed: 130 where a stop signal (stop_signals.requested) had come. Slurm's plain
    scancel sends SIGTERM to every process of the job, and vLLM may be gone before the trainer acts on its own:
    the run was stopped."""
    if not stop_signals.requested():
        return code
    print(INTERRUPTED.format(" (a SIGTERM came too: the line above is part of the stop)"), flush=True)
    return EXIT_INTERRUPTED


def run(config_path: Path, run_dir: Path, base_url: str | None, server_dir: Path | None = None) -> None:
    hf_logging.disable_progress_bar()  # save_pretrained's "Writing model shards" bar, every sync and checkpoint
    cfg = load_config(config_path)
    # the pane's VFRL_API_KEY: the key vf-rl made for its server, or inference.api_key_var's for a remote one
    api_key = os.environ.get(API_KEY_ENV, "EMPTY")
    # None: the run's own server on the port vLLM binds (inference.port = 0), read from the run directory
    url = base_url or (cfg.inference.url if cfg.inference.base_url or cfg.inference.port else None)
    if os.environ.get(TRAINER_LOADS_AFTER_VLLM_ENV) == "1":
        url = wait_for_vllm_first(url, cfg, server_dir or run_dir, api_key)
    trainer = RLTrainer(cfg, run_dir, url, api_key, server_dir=server_dir)
    KEPT.append(trainer)
    freeze_long_lived()  # the run's start-up objects out of every full collection's walk (heap.py)
    trainer.train()


def wait_for_vllm_first(base_url: str | None, cfg, server_dir: Path, api_key: str) -> str:
    """On a GPU shared with vLLM: load the model only once vLLM is up. vLLM sizes its KV cache by the drop in
    the GPU's free memory while it starts, so weights the trainer loaded meanwhile would count as vLLM's and
    could leave it no cache (and its start-up fails, or not, by timing)."""
    from vfrl.trainer.inference_watch import InferenceLost, own_server_url, wait_for_server

    print("vf-train: waiting for vLLM to start before loading the model (they share a GPU)", flush=True)
    t0 = time.time()
    try:
        base_url = base_url or own_server_url(cfg.inference, RunDir(server_dir), 900)
        wait_for_server(base_url, 900, RunDir(server_dir).inference_pid, api_key)
    except InferenceLost as e:
        raise TrainingStopped(EXIT_INFERENCE_LOST, f"vf-train: {e} (see {RunDir(server_dir).log('inference')}). "
                                                   "No step was trained, nothing to keep.") from e
    print(f"vf-train: vLLM is up (waited {time.time() - t0:.1f}s); loading the model", flush=True)
    return base_url


# The trainer of this process, kept until it exits. With several ranks its DDP model holds the gloo process
# group, and freeing it can deadlock: the group's destructor joins gloo's worker thread while holding the
# GIL, and that thread may still be freeing the last collective's tensors, which needs the GIL (seen in CI:
# rank 1 of a 2-node run hung there after its last step). Such a process leaves with os._exit instead.
KEPT: list = []


def main() -> None:
    try:
        app()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    several_ranks = any(t.ranks.world_size > 1 for t in KEPT)
    # a thread still in a reward function, a tool or a vLLM call must not abort the exit either
    exit_process(code, hard=several_ranks)
