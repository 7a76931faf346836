"""A sweep: the runs of one config with values of their own, all training against one vLLM.

`vf-rl @ base.toml --sweep trainer.args.learning_rate=1e-3,3e-3 --sweep trainer.args.seed=0,1` runs the product
of its axes (4 runs here). A LoRA run is a few MB of adapter on a base model: one vf-vllm holds the base model once
and serves every run's adapters under names of their own (`<run>/policy-N`, `--max-loras` sized for them all).
Each run is a run as `vf-rl @` starts one, less the server: its own directory, resolved config, metrics,
checkpoints, trainer pane and exit code, in a tmux session of its own, so that a run's fault or stop is its own.
The sweep's session holds vf-vllm and a metrics pane with one line per run; vf-vllm stops once every run's
trainer is gone, and starts a server that died while it served again for them all (each run heals as one does).

    outputs/<run_name>/      the sweep, and its server's run directory (config.toml, inference.*, logs/inference.log)
      sweep.json             the axes, and each run's name, values and tmux session
      <run>/                 each run's directory: vf-rl eval, export and plot take it as any run's
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vfrl.config import RLConfig
from vfrl.inference.lora_ranks import adapters_served
from vfrl.launcher.overrides import Override, parse_value
from vfrl.launcher.plan import Plan, make_plan
from vfrl.run_dir import SERVER_DIR_ENV, RunDir

# what the runs of one server cannot differ in, or what the sweep itself sets
FIXED = {"model", "trainer.gpus", "trainer.args.run_name", "trainer.args.output_dir", "trainer.args.use_lora",
         "trainer.args.lora_sync", "trainer.args.resume_from"}


class SweepError(ValueError):
    """A sweep that cannot run as asked: one line."""


@dataclass(frozen=True)
class Axis:
    key: str  # dotted, underscores
    values: tuple[Any, ...]
    texts: tuple[str, ...]  # as typed: they name the runs
    flag: str  # as typed, for messages


@dataclass
class SweepRun:
    name: str  # its run_name and directory name: the values that set it apart
    values: dict[str, Any]  # dotted key -> value
    config: RLConfig
    plan: Plan


@dataclass
class Sweep:
    name: str
    directory: Path
    server: Plan  # its inference pane is the sweep's vf-vllm
    runs: list[SweepRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def record(self) -> dict:
        return {"sweep": self.name, "session": self.server.session,
                "runs": [{"name": r.name, "session": r.plan.session, "run_dir": str(r.plan.run_dir),
                          "values": r.values} for r in self.runs]}


def parse_axis(spec: str) -> Axis:
    """`trainer.args.learning_rate=1e-3,3e-3` -> an axis of two values (TOML literals, as overrides are)."""
    key_text, eq, values_text = spec.partition("=")
    key = ".".join(part.strip().replace("-", "_") for part in key_text.removeprefix("--").split("."))
    texts = tuple(t.strip() for t in values_text.split(",")) if eq else ()
    if not key or not texts or not all(texts):
        raise SweepError(f"--sweep {spec}: expected KEY=VALUE,VALUE,... (e.g. --sweep trainer.args.learning_rate="
                         "1e-3,3e-3)")
    if key in FIXED or key == "inference" or key.startswith("inference."):
        raise SweepError(f"--sweep {spec}: {key} is the same for every run of a sweep (they share one vLLM, and the "
                         "sweep names and places the runs); sweep trainer.args keys such as learning_rate, seed, "
                         "loss_type or lora_rank")
    if len(set(texts)) != len(texts):
        raise SweepError(f"--sweep {spec}: a value is given twice")
    return Axis(key, tuple(parse_value(t) for t in texts), texts, f"--sweep {key}")


def run_name(axes: list[Axis], texts: tuple[str, ...]) -> str:
    """`learning_rate=1e-3,seed=0`: each axis's last key part and the value as typed (a path-safe name)."""
    name = ",".join(f"{axis.key.rsplit('.', 1)[-1]}={text}" for axis, text in zip(axes, texts))
    return re.sub(r"[^A-Za-z0-9._=,+-]", "_", name)


def expand(load, axes: list[Axis], directory: Path, session: str, machine, workdir: Path) -> Sweep:
    """The sweep's runs and its server's plan. `load(extra_overrides)`: the base config with the command line's
    overrides and `extra_overrides`, validated (ConfigError, one line per problem, naming the flags)."""
    if len(axes) != len({a.key for a in axes}):
        raise SweepError("--sweep: the same key is swept twice; give it one --sweep with all its values")
    notes = []
    combos = list(itertools.product(*(range(len(a.values)) for a in axes)))
    runs = []
    for number, combo in enumerate(combos, 1):
        texts = tuple(axis.texts[i] for axis, i in zip(axes, combo))
        name = run_name(axes, texts)
        sets = [Override(axis.key, axis.values[i], axis.flag) for axis, i in zip(axes, combo)]
        cfg = load(sets + [Override("trainer.args.run_name", name, "--sweep"),
                           Override("trainer.args.output_dir", str(directory), "--sweep")])
        if cfg.inference.base_url:
            raise SweepError("a sweep starts its own vLLM for its runs; leave inference.base_url out")
        if not cfg.args.use_lora:
            raise SweepError("a sweep shares one vLLM between its runs by serving each run's LoRA adapter: set "
                             "trainer.args.use_lora = true (full fine-tuning needs a server per run)")
        if cfg.args.lora_sync != "adapter":
            if number == 1:
                notes.append('the runs of a sweep serve their adapters side by side on one vLLM: lora_sync = '
                             '"adapter" for each (a merged adapter would replace the weights the others sample from)')
            cfg.args.lora_sync = "adapter"
        plan = make_plan(cfg, directory / name, f"{session}-{number}", machine, workdir)
        runs.append(SweepRun(name, {axis.key: axis.values[i] for axis, i in zip(axes, combo)}, cfg, plan))
    server_cfg = runs[0].config.model_copy(deep=True)
    server_cfg.args.run_name, server_cfg.args.output_dir = session, str(directory.parent)
    server_cfg.args.lora_rank = max(r.config.args.lora_rank for r in runs)  # vLLM's --max-lora-rank fits them all
    # every run's adapters at once: one per policy its batches in flight sample from, and the one just loaded
    server_cfg.inference.args.setdefault(
        "max_loras", sum(adapters_served(r.config.args.loop.num_batches_ahead) for r in runs))
    server = make_plan(server_cfg, directory, session, machine, workdir)
    server.inference.command += [arg for r in runs
                                 for arg in ("--trainer-pid", str(RunDir(r.plan.run_dir).trainer_pid))]
    share_trainer_side(runs, directory, notes)
    return Sweep(session, directory, server, runs, notes + [n for n in server.notes if n not in notes])


def share_trainer_side(runs: list[SweepRun], directory: Path, notes: list[str]) -> None:
    """Each run's trainer against the sweep's server, no server of its own; on the CPU the trainer's threads split
    between the runs (the cores vLLM does not use, as one run's trainer gets them)."""
    for run in runs:
        plan = run.plan
        plan.inference, plan.server_dir = None, directory
        plan.trainer.env[SERVER_DIR_ENV] = str(directory)
        if plan.device == "cpu" and "OMP_NUM_THREADS" in plan.trainer.env:
            threads = int(plan.trainer.env["OMP_NUM_THREADS"])
            plan.trainer.env["OMP_NUM_THREADS"] = str(max(1, threads // len(runs)))
    if runs and runs[0].plan.device == "cuda" and runs[0].plan.shared_devices:
        notes.append(f"{len(runs)} trainers share GPU {','.join(runs[0].plan.shared_devices)} with vLLM; each holds "
                     "the base model: GPU memory is checked for one trainer only")


def write_record(sweep: Sweep) -> Path:
    path = sweep.directory / "sweep.json"
    path.write_text(json.dumps(sweep.record(), indent=1) + "\n")
    return path


def read_record(directory: Path) -> dict | None:
    """The sweep.json of a sweep's directory; None for a run's own directory."""
    try:
        return json.loads((directory / "sweep.json").read_text())
    except (OSError, ValueError):
        return None
