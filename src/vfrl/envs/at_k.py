"""avg@k and pass@k of an evaluation with k rollouts of each example (vf-eval -r k, eval_rollouts_per_example)."""

from __future__ import annotations

from statistics import fmean
from typing import Any


def at_k(rollouts: list[Any]) -> dict[str, float]:
    """avg@k: the mean over examples of their rollouts' mean reward; pass@k: the mean over examples of their best
    reward (for 0/1 rewards, the fraction of examples solved at least once in k tries). k is the most rollouts an
    example has (faults may have dropped some); {} when it is 1."""
    by_example: dict[Any, list[float]] = {}
    for r in rollouts:
        by_example.setdefault(r.example_id, []).append(float(r.reward))
    k = max((len(v) for v in by_example.values()), default=0)
    if k < 2:
        return {}
    return {f"avg@{k}": fmean(fmean(v) for v in by_example.values()),
            f"pass@{k}": fmean(max(v) for v in by_example.values())}
