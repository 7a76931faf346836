"""What a finished run hands its user, said at its end: steps, time, reward and eval first -> last,
where the trained policy is, and the commands that plot or evaluate it.

    vf-train: done: 50 steps in 12m14s
      reward (mean of the first and last 5 steps)  0.287 -> 0.859  (+0.572)
      eval reward (step 0 -> step 50)  0.240 -> 0.840  (+0.600)
      policy: outputs/smollm2/adapters/policy-50 (a peft LoRA adapter of ./models/smollm2-135m-instruct)
      evaluate it: vf-rl eval outputs/smollm2  (its eval split, as training ran it; --step N for another)
      export it: vf-rl export outputs/smollm2  (a Hugging Face folder, the adapter merged)
      curves: vf-rl plot outputs/smollm2

The time is from launch (vf-rl writes the run's config.toml then) when the caller gives it.

Reads only the run directory (metrics.jsonl, adapters/, weights/, checkpoints/): the same lines can be made
for any run, finished or not.
"""

from __future__ import annotations

from pathlib import Path

from vfrl.run_dir import RunDir, numbered, read_jsonl
from vfrl.learner.checkpoint import latest_checkpoint


def newest(directory: Path, prefix: str) -> Path | None:
    """`directory/<prefix>N` with the largest N, or None."""
    found = numbered(directory, prefix)
    return found[max(found)] if found else None


def first_last(values: list[float], k: int) -> tuple[int, float, float] | None:
    """(k', mean of the first k', mean of the last k'): k' is k, or half of a shorter run (at least 1)."""
    if not values:
        return None
    k = max(1, min(k, len(values) // 2 or 1))
    return k, sum(values[:k]) / k, sum(values[-k:]) / k


def duration(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def summary(run_dir: Path, model: str, env_id: str, seconds: float | None = None, window: int = 5) -> list[str]:
    """The lines that end a run (see the module docstring)."""
    rd = RunDir(run_dir)
    rows = read_jsonl(rd.metrics)
    steps = [r for r in rows if "reward_mean" in r]
    evals = [r for r in rows if "eval/reward_mean" in r]
    took = f" in {duration(seconds)}" if seconds is not None else ""
    lines = [f"vf-train: done: {steps[-1]['step'] if steps else 0} steps{took}"]
    if (fl := first_last([r["reward_mean"] for r in steps], window)) is not None:
        k, first, last = fl
        lines.append(f"  reward (mean of the first and last {k} steps)  {first:.3f} -> {last:.3f}  "
                     f"({last - first:+.3f})")
    if len(evals) >= 2:
        a, b = evals[0], evals[-1]
        lines.append(f"  eval reward (step {a['step']} -> step {b['step']})  {a['eval/reward_mean']:.3f} -> "
                     f"{b['eval/reward_mean']:.3f}  ({b['eval/reward_mean'] - a['eval/reward_mean']:+.3f})")
    elif evals:
        lines.append(f"  eval reward (step {evals[0]['step']})  {evals[0]['eval/reward_mean']:.3f}")
    adapter, weights = newest(rd.adapters, "policy-"), newest(rd.weights, "step-")
    checkpoint = latest_checkpoint(rd.checkpoints)  # complete ones only
    if adapter is not None:
        lines.append(f"  policy: {adapter} (a peft LoRA adapter of {model})")
    elif weights is not None:
        lines.append(f"  policy: {weights} (full weights, a Hugging Face folder)")
    if adapter is not None or weights is not None:
        lines.append(f"  evaluate it: vf-rl eval {run_dir}  (its eval split, as training ran it; --step N for another)")
        lines.append(f"  export it: vf-rl export {run_dir}  (a Hugging Face folder, the adapter merged)")
    if checkpoint is not None:
        lines.append(f"  checkpoint: {checkpoint}")
    lines.append(f"  curves: vf-rl plot {run_dir}")
    return lines
