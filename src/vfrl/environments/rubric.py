"""Rubric: weighted reward functions. Each function receives only the arguments it names."""

from __future__ import annotations

import inspect
import logging
from typing import Any, Callable

log = logging.getLogger(__name__)

RewardFunc = Callable[..., float]
REWARD_ARGS = ("prompt", "completion", "answer", "state", "task", "info", "parser")


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

    async def score(self, **available: Any) -> tuple[float, dict[str, float]]:
        """Returns (weighted reward, {func name: score}). A function that raises scores 0 and is counted."""
        available.setdefault("parser", self.parser)
        metrics: dict[str, float] = {}
        errors = 0
        for func in self.funcs:
            names = inspect.signature(func).parameters
            takes_all = any(p.kind is p.VAR_KEYWORD for p in names.values())
            kwargs = {k: v for k, v in available.items() if takes_all or k in names}
            try:
                value = func(**kwargs)
                if inspect.isawaitable(value):
                    value = await value
                metrics[func.__name__] = float(value)
            except Exception as e:  # a broken reward function must not stop training
                log.warning("reward function %s raised %r; scored 0", func.__name__, e)
                metrics[func.__name__] = 0.0
                errors += 1
        reward = sum(w * metrics[f.__name__] for f, w in zip(self.funcs, self.weights))
        if errors:
            metrics["reward_errors"] = float(errors)
        return reward, metrics
