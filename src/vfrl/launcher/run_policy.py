"""Which trained policy of a run a command means: `--step N`, `--best eval` or the newest, found where the run keeps
it.

A LoRA run keeps its last adapters in adapters/policy-N (what vLLM served) and one in each checkpoint
(checkpoints/step-N/model); a full fine-tune keeps weights/step-N (a Hugging Face folder) and its checkpoints'
model/. Reads the run directory only; `vf-rl export` and `vf-rl eval` take what it finds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vfrl.learner.checkpoint import list_checkpoints, step_of
from vfrl.run_dir import RunDir, numbered, read_jsonl


class NoPolicy(LookupError):
    """The run holds no such policy; the message is one line."""

    worded_for_users = True


@dataclass(frozen=True)
class Policy:
    step: int
    path: Path  # a peft adapter folder (adapter_config.json) or a Hugging Face model folder
    adapter: bool


def policies(run_dir: Path) -> dict[int, Path]:
    """Every policy the run keeps, by step (an adapter or weights folder before a checkpoint's copy)."""
    rd = RunDir(run_dir)
    found = {step_of(path): path / "model" for path in list_checkpoints(rd.checkpoints) if (path / "model").is_dir()}
    return found | numbered(rd.weights, "step-") | numbered(rd.adapters, "policy-")


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


def best_evaluated_step(run_dir: Path) -> int:
    """The step of the kept policy with the highest eval reward the run logged (eval/reward_mean; the later step on a
    tie), or NoPolicy saying why there is none."""
    kept = policies(run_dir)
    metrics = RunDir(run_dir).metrics
    evals = {r["step"]: r["eval/reward_mean"] for r in (read_jsonl(metrics) if metrics.is_file() else [])
             if isinstance(r.get("eval/reward_mean"), (int, float)) and isinstance(r.get("step"), int)}
    scored = {step: reward for step, reward in evals.items() if step in kept}
    if not scored:
        why = ("it logged no eval (trainer.args.eval_strategy)" if not evals else
               f"it evaluated steps {', '.join(map(str, sorted(evals)))} and keeps "
               f"{', '.join(map(str, sorted(kept))) or 'none'}")
        raise NoPolicy(f"{run_dir}: no evaluated policy is kept: {why}; pass --step N")
    return max(scored, key=lambda step: (scored[step], step))
