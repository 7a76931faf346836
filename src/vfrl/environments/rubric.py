"""Rubric: weighted reward functions. Each function receives only the arguments it names.

The reward is the weighted sum of the functions' scores; each score is also a metric under the
function's name. A function that raises scores 0, is counted in the `reward_errors` metric, and the
rollout goes on: a broken reward function must never stop training.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Callable

log = logging.getLogger(__name__)

RewardFunc = Callable[..., float]
REWARD_ARGS = ("prompt", "completion", "answer", "state", "task", "info", "parser")


def call_with_named_args(func: Callable[..., Any], available: dict[str, Any]) -> Any:
    """Call `func` with only the arguments it names (all of them if it takes **kwargs)."""
    params = inspect.signature(func).parameters
    takes_all = any(p.kind is p.VAR_KEYWORD for p in params.values())
    return func(**{k: v for k, v in available.items() if takes_all or k in params})


class Rubric:
    def __init__(self, funcs: list[RewardFunc] | None = None, weights: list[float] | None = None, parser=None):
        self.funcs = list(funcs or [])
        self.weights = list(weights) if weights is not None else [1.0] * len(self.funcs)
        if len(self.weights) != len(self.funcs):
            raise ValueError(f"Rubric got {len(self.funcs)} functions but {len(self.weights)} weights")
        self.parser = parser

    def add_reward_func(self, func: RewardFunc, weight: float = 1.0) -> None:
        self.funcs.append(func)
        self.weights.append(weight)

    def metric_names(self) -> list[str]:
        """One name per function: its __name__, numbered when two functions share one (two lambdas)."""
        names: list[str] = []
        for func in self.funcs:
            name = getattr(func, "__name__", type(func).__name__)
            names.append(name if name not in names else f"{name}_{names.count(name) + 1}")
        return names

    async def score(self, **available: Any) -> tuple[float, dict[str, float]]:
        """Returns (weighted reward, {func name: score, "reward_errors": count})."""
        available.setdefault("parser", self.parser)
        available.setdefault("state", {})
        metrics: dict[str, float] = {}
        errors = 0
        for func, name in zip(self.funcs, self.metric_names()):
            try:
                value = call_with_named_args(func, available)
                if inspect.isawaitable(value):
                    value = await value
                metrics[name] = float(value)
            except Exception as e:  # a broken reward function must not stop training
                log.warning("reward function %s raised %r; scored 0", name, e)
                metrics[name] = 0.0
                errors += 1
        reward = sum(w * metrics[n] for n, w in zip(self.metric_names(), self.weights))
        metrics["reward_errors"] = float(errors)
        return reward, metrics


class RubricGroup(Rubric):
    """Several rubrics as one: the reward is the sum of theirs, metrics are merged (summed by name)."""

    def __init__(self, rubrics: list[Rubric]):
        if not rubrics:
            raise ValueError("RubricGroup needs at least one rubric")
        super().__init__(parser=rubrics[0].parser)
        self.rubrics = list(rubrics)

    def add_reward_func(self, func: RewardFunc, weight: float = 1.0) -> None:
        self.rubrics[0].add_reward_func(func, weight)

    def metric_names(self) -> list[str]:
        return list(dict.fromkeys(n for r in self.rubrics for n in r.metric_names()))

    async def score(self, **available: Any) -> tuple[float, dict[str, float]]:
        total, merged = 0.0, {}
        for rubric in self.rubrics:
            reward, metrics = await rubric.score(**{**available, "parser": rubric.parser})
            total += reward
            for name, value in metrics.items():
                merged[name] = merged.get(name, 0.0) + value
        return total, merged
