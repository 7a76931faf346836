"""Rubric: weighted reward functions. Each function receives only the arguments it names.

The reward is the weighted sum of the functions' scores; each score is also a metric under the
function's name. A function that fails (raises, returns NaN, infinity or something that is not a
number, or is still running when the rollout's time limit is up) scores 0 and the others keep their
scores, as in verifiers (its classic Rubric logs the error and scores that function 0.0), so a package
gives the same rewards in both. The failure is counted in the `reward_errors` metric, and why it failed
goes to `state["reward_errors"]` (name -> reason), which the environment copies onto the rollout (the
trainer warns, and stops a run where one function fails on most rollouts: rollouts/step_faults.py). The
other functions still run (those after one that used up the time limit do not), and training goes on.

Sync functions run in worker threads (vfrl/daemon_pool.py), so that one that never returns can be given
up on at the time limit; they may therefore run concurrently with other rollouts' functions.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from typing import Any, Callable

from vfrl.daemon_pool import DaemonPool
from vfrl.envs.faults import one_line, time_left

log = logging.getLogger(__name__)

RewardFunc = Callable[..., float]
SYNC_FUNCS = DaemonPool("reward-function", size=16)  # I/O-bound sync functions (an HTTP judge) overlap
REWARD_ARGS = ("prompt", "completion", "answer", "state", "task", "info", "parser")


def call_with_named_args(func: Callable[..., Any], available: dict[str, Any]) -> Any:
    """Call `func` with only the arguments it names (all of them if it takes **kwargs)."""
    params = inspect.signature(func).parameters
    takes_all = any(p.kind is p.VAR_KEYWORD for p in params.values())
    return func(**{k: v for k, v in available.items() if takes_all or k in params})


# verifiers' own scoring entry points: a subclass that overrides one scores its own way there, and vfrl's scoring
# (the reward functions, `score` below) never calls them, so such a rubric is refused rather than scored otherwise
SCORING_OVERRIDES = ("score_rollout", "score_rollouts", "score_group")


class Rubric:
    def __init__(self, funcs: list[RewardFunc] | None = None, weights: list[float] | None = None, parser=None,
                 parallelize_scoring: bool = True, **kwargs: Any):
        """`parallelize_scoring` (verifiers 0.1.x) is taken and not read: vfrl scores each rollout's functions in
        turn, rollouts side by side; other keywords are kept as attributes, as verifiers keeps them."""
        from vfrl.envs.parsers import Parser  # parsers.py is imported by users first; no cycle then

        if own := [name for name in SCORING_OVERRIDES if hasattr(type(self), name)]:
            raise NotImplementedError(
                f"vfrl does not support {type(self).__name__}.{own[0]}: vfrl scores with the rubric's reward "
                "functions and never calls verifiers' scoring methods, so a rubric that overrides one is not run")

        self.funcs = list(funcs or [])
        self.weights = list(weights) if weights is not None else [1.0] * len(self.funcs)
        if len(self.weights) != len(self.funcs):
            raise ValueError(f"Rubric got {len(self.funcs)} functions but {len(self.weights)} weights")
        # verifiers hands reward functions a plain Parser() when the rubric was given none
        self.parser = parser if parser is not None else Parser()
        self.class_objects: dict[str, Any] = {}  # more arguments reward functions may name (add_class_object)
        self.parallelize_scoring = parallelize_scoring
        for key, value in kwargs.items():
            setattr(self, key, value)

    def add_reward_func(self, func: RewardFunc, weight: float = 1.0) -> None:
        self.funcs.append(func)
        self.weights.append(weight)

    def add_metric(self, func: RewardFunc, weight: float = 0.0) -> None:
        """A function logged as a metric, not rewarded (weight 0)."""
        self.add_reward_func(func, weight)

    def add_class_object(self, name: str, obj: Any) -> None:
        """Reward functions that name `name` get `obj` (verifiers' way of handing them a client, a tool...)."""
        self.class_objects[name] = obj

    def scored_funcs(self) -> tuple[list[RewardFunc], list[float]]:
        """The functions that score a rollout and their weights."""
        return self.funcs, self.weights

    def metric_names(self) -> list[str]:
        """One name per function: its __name__, numbered when two functions share one (two lambdas)."""
        names: list[str] = []
        for func in self.scored_funcs()[0]:
            name = getattr(func, "__name__", type(func).__name__)
            names.append(name if name not in names else f"{name}_{names.count(name) + 1}")
        return names

    async def score(self, **available: Any) -> tuple[float, dict[str, float]]:
        """Returns (weighted reward, {func name: score, "reward_errors": count}); a failed function scores 0."""
        available.setdefault("parser", self.parser)
        for name, obj in self.class_objects.items():
            available.setdefault(name, obj)
        state = available.setdefault("state", {})
        metrics: dict[str, float] = {}
        errors: dict[str, str] = {}
        funcs, weights = self.scored_funcs()
        for func, name in zip(funcs, self.metric_names()):
            if errors and (left := time_left()) is not None and left <= 0:
                metrics[name] = 0.0  # not run: the function that used the time up is the one to blame
                continue
            metrics[name], error = await call_reward_func(func, available)
            if error is not None:
                log.debug("reward function %s %s; scored 0", name, error)
                errors[name] = error
        reward = sum(w * metrics[n] for n, w in zip(self.metric_names(), weights))
        metrics["reward_errors"] = float(len(errors))
        if errors:
            state.setdefault("reward_errors", {}).update(errors)
        return reward, metrics


async def call_reward_func(func: RewardFunc, available: dict[str, Any]) -> tuple[float, str | None]:
    """(score, None), or (0.0, why it failed) when the function raised, returned no finite number or
    overran the rollout's time limit."""
    try:
        async with asyncio.timeout(time_left()) as limit:
            if inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(getattr(func, "__call__", None)):
                value = call_with_named_args(func, available)
            else:
                value = await SYNC_FUNCS.run(lambda: call_with_named_args(func, available))
            if inspect.isawaitable(value):
                value = await value
    except Exception as e:  # a broken reward function must not stop training
        if isinstance(e, TimeoutError) and limit.expired():
            return 0.0, "did not return within the rollout's time limit"
        return 0.0, one_line(f"raised {type(e).__name__}: {e}")
    # numbers of any kind (bool, numpy, 0-d tensors) have __float__; a str would parse, but is a bug
    if isinstance(value, (str, bytes)) or not hasattr(type(value), "__float__"):
        return 0.0, one_line(f"returned {type(value).__name__} {value!r}, not a number", 120)
    try:
        score = float(value)
    except Exception as e:  # e.g. a tensor of several elements
        return 0.0, one_line(f"returned {type(value).__name__} that float() refused: {e}", 120)
    if not math.isfinite(score):
        return 0.0, f"returned {score}"
    return score, None


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
        available.setdefault("state", {})  # one dict for every rubric, so their reward_errors land together
        total, merged = 0.0, {}
        for rubric in self.rubrics:
            reward, metrics = await rubric.score(**{**available, "parser": rubric.parser})
            total += reward
            for name, value in metrics.items():
                merged[name] = merged.get(name, 0.0) + value
        return total, merged
