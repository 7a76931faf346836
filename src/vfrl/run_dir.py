"""The run directory: the one place that names the files in it, and reads and writes them.

    config.toml                    the resolved config every pane reads (config.before-resume-*.toml: older ones)
    .api_key  .environment         secrets the panes read at start, deleted once they have (pane_env.py)
    {inference,trainer}.sh         the pane scripts; {inference,trainer}.exitcode: their commands' exit codes
    inference.pid  trainer.pid     vf-vllm's supervisor and vf-train's rank 0
    inference.port                 the port vLLM bound (inference.port = 0), written by vf-vllm once it listens
    inference.restarts.jsonl       each time vf-vllm started a dead server again (inference.max_restarts)
    logs/{inference,trainer}.log   what each pane printed
    metrics.jsonl                  one line per step and per eval (metrics.discarded.jsonl: steps a resume redid)
    rollouts/                      step_N.jsonl and eval_step_N.jsonl
    adapters/  weights/            what the weight sync pushed into vLLM (LoRA / full fine-tuning)
    checkpoints/                   step-N (learner/checkpoint.py)
    curves.png  plots/             `vf-rl plot`
    wandb_run_id  wandb/           report_to = "wandb"
    tensorboard/                   report_to = "tensorboard" (`tensorboard --logdir <run_dir>/tensorboard`)

Users and tests rely on these exact names. Imports no torch: the launcher reads the same paths.
"""

from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator


# vf-train's --server-dir: the run directory of the vf-vllm a run shares with the other runs of a sweep
SERVER_DIR_ENV = "VFRL_SERVER_DIR"


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def config(self) -> Path:
        return self.path / "config.toml"

    def config_before_resume(self, stamp: str) -> Path:
        return self.path / f"config.before-resume-{stamp}.toml"

    @property
    def api_key(self) -> Path:
        return self.path / ".api_key"

    @property
    def environment(self) -> Path:
        return self.path / ".environment"

    def pane_script(self, role: str) -> Path:
        return self.path / f"{role}.sh"

    def exit_code(self, role: str) -> Path:
        """Where the `role` pane ("trainer", "inference") records its command's exit code."""
        return self.path / f"{role}.exitcode"

    @property
    def inference_pid(self) -> Path:
        return self.path / "inference.pid"

    @property
    def inference_port(self) -> Path:
        return self.path / "inference.port"

    @property
    def inference_restarts(self) -> Path:
        """One JSON line per restart of the vLLM server by vf-vllm (inference.max_restarts)."""
        return self.path / "inference.restarts.jsonl"

    def server_restarts(self) -> list[dict[str, Any]]:
        """The restarts recorded by the run's vf-vllm now (its pid file's): a resumed run's file keeps earlier ones."""
        try:
            since = self.inference_pid.stat().st_mtime
            return [r for r in read_jsonl(self.inference_restarts) if r.get("time", 0) >= since]
        except OSError:
            return []

    @property
    def inference_engines(self) -> Path:
        """`pid start` per line: each vLLM engine core vf-vllm saw (its title hides the run's marker; procs.py)."""
        return self.path / "inference.engines"

    @property
    def trainer_pid(self) -> Path:
        return self.path / "trainer.pid"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    def log(self, role: str) -> Path:
        return self.logs / f"{role}.log"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def discarded_metrics(self) -> Path:
        return self.path / "metrics.discarded.jsonl"

    @property
    def rollouts(self) -> Path:
        return self.path / "rollouts"

    def step_rollouts(self, step: int) -> Path:
        return self.rollouts / f"step_{step}.jsonl"

    def eval_rollouts(self, version: int) -> Path:
        return self.rollouts / f"eval_step_{version}.jsonl"

    @property
    def adapters(self) -> Path:
        return self.path / "adapters"

    @property
    def weights(self) -> Path:
        return self.path / "weights"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def curves(self) -> Path:
        return self.path / "curves.png"

    @property
    def plots(self) -> Path:
        return self.path / "plots"

    @property
    def wandb_run_id(self) -> Path:
        return self.path / "wandb_run_id"

    @property
    def tensorboard(self) -> Path:
        return self.path / "tensorboard"


def numbered(directory: Path, prefix: str) -> dict[int, Path]:
    """The folders `directory/<prefix>N` (adapters/policy-N, weights/step-N), by N."""
    if not directory.is_dir():
        return {}
    return {int(p.name.removeprefix(prefix)): p for p in directory.iterdir()
            if p.is_dir() and p.name.startswith(prefix) and p.name.removeprefix(prefix).isdigit()}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file (parse_jsonl)."""
    return parse_jsonl(path.read_text().splitlines())


def parse_jsonl(lines: Iterable[str | bytes]) -> list[dict[str, Any]]:
    """The records of JSON lines; blank lines and lines that do not parse (one being written, one a crash cut
    short) are skipped."""
    rows = []
    for line in lines:
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append `record` as one JSON line, whole or not at all: a write the disk cuts short (ENOSPC after part of
    the line) is taken back, so a reader (vf-rl plot, status, resume) never meets half a line, nor a later line
    glued to one. A file a crash left without its last newline gets one first, for the same reason."""
    line = (json.dumps(record) + "\n").encode()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        done = 0
        try:
            while done < len(line):
                done += os.write(fd, line[done:])
        except OSError:
            os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


def set_aside_after(metrics_path: Path, step: int) -> int:
    """On resume from checkpoint `step`: move lines of later steps (to be redone) to metrics.discarded.jsonl.

    Returns how many lines moved. Nothing is deleted; metrics.jsonl keeps steps <= `step` and is
    appended from there, so it holds each step once.
    """
    if not metrics_path.exists():
        return 0
    keep, later = [], []
    for line in metrics_path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            (later if json.loads(line).get("step", 0) > step else keep).append(line)
        except json.JSONDecodeError:  # a line cut by the crash
            later.append(line)
    if later:
        with open(RunDir(metrics_path.parent).discarded_metrics, "a") as f:
            f.write("\n".join(later) + "\n")
        tmp = metrics_path.with_name(f".{metrics_path.name}.tmp")
        tmp.write_text("".join(line + "\n" for line in keep))
        tmp.replace(metrics_path)
    return len(later)


@contextmanager
def atomic_directory(final: Path, reuse: Path | None = None) -> Iterator[Path]:
    """Write a directory whole or not at all: fill the yielded `.NAME.tmp` beside `final`; when the block
    ends it is renamed to `final` (replacing an older one). A reader never sees a half-written `final`
    that looks complete: a block that fails removes its tmp dir, a crash leaves only that (the next write
    of the same name removes it). `reuse`, an older directory that is no longer wanted, becomes the tmp dir,
    files and all, for a writer that overwrites them in place (safetensors_rewrite.py); it is gone either way."""
    tmp = final.with_name(f".{final.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    if reuse is not None and reuse.is_dir():
        reuse.rename(tmp)
    try:
        yield tmp
    except BaseException:  # a full disk, a kill: give the space back; an older `final` is untouched
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():  # e.g. a checkpoint step redone after resuming from an earlier one
        old = final.with_name(f".{final.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old)
    else:
        tmp.rename(final)
