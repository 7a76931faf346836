"""Which trained policy of a run a command means: `--step N` or the newest, found where the run keeps it.

A LoRA run keeps its last adapters in adapters/policy-N (what vLLM served) and one in each checkpoint
(checkpoints/step-N/model); a full fine-tune keeps weights/step-N (a Hugging Face folder) and its checkpoints'
model/. Reads the run directory only; `vf-rl export` and `vf-rl eval` take what it finds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from vfrl.run_dir import RunDir


class NoPolicy(LookupError):
    """The run holds no such policy; the message is one line."""

    worded_for_users = True


@dataclass(frozen=True)
class Policy:
    step: int
    path: Path  # a peft adapter folder (adapter_config.json) or a Hugging Face model folder
    adapter: bool


def numbered(directory: Path, prefix: str) -> dict[int, Path]:
    """`directory/<prefix>N` by N."""
    if not directory.is_dir():
        return {}
    return {int(m.group(1)): p for p in directory.iterdir()
            if (m := re.fullmatch(re.escape(prefix) + r"(\d+)", p.name)) and p.is_dir()}


def policies(run_dir: Path) -> dict[int, Path]:
    """Every policy the run keeps, by step (an adapter or weights folder before a checkpoint's copy)."""
    rd = RunDir(run_dir)
    found = {step: path / "model" for step, path in numbered(rd.checkpoints, "step-").items()
             if (path / "COMPLETE").is_file() and (path / "model").is_dir()}
    found |= numbered(rd.weights, "step-")
    found |= numbered(rd.adapters, "policy-")
    return found


def find_policy(run_dir: Path, step: int | None = None) -> Policy:
    """The policy of `step` (None: the newest), or NoPolicy naming the steps there are."""
    if not RunDir(run_dir).config.is_file():
        raise NoPolicy(f"{run_dir}: no config.toml here; pass a run directory such as outputs/quickstart")
    kept = policies(run_dir)
    if not kept:
        raise NoPolicy(f"{run_dir}: no trained policy yet (no adapters/, weights/ or checkpoint in it)")
    if step is None:
        step = max(kept)
    if step not in kept:
        raise NoPolicy(f"{run_dir}: no policy of step {step}; it keeps steps {', '.join(map(str, sorted(kept)))} "
                       "(adapters/, weights/ and the checkpoints)")
    path = kept[step]
    return Policy(step, path, (path / "adapter_config.json").is_file())
