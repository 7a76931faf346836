"""EnvGroup: several environments as one; every row carries the `task` of the env that runs it."""

from __future__ import annotations

from typing import Any

from vfrl.envs.environment import Environment
from vfrl.rollout_types import Rollout


class EnvGroup(Environment):
    """`EnvGroup(envs=[a, b], env_names=["a", "b"])`: the datasets are concatenated with each row's
    `task` set to its env's name, and a row's rollout and scoring go to that env."""

    def __init__(self, envs: list[Environment], env_names: list[str] | None = None, **kwargs):
        if not envs:
            raise ValueError("EnvGroup needs at least one environment")
        names = list(env_names) if env_names is not None else [e.env_id for e in envs]
        if len(names) != len(envs) or len(set(names)) != len(names):
            raise ValueError(f"EnvGroup needs one distinct name per environment, got {names}")
        self.envs = list(envs)
        self.env_names = names
        self.env_map = dict(zip(names, envs))
        # builders, so that the envs' own builders run only when a split is read (see environment.py)
        super().__init__(
            dataset=lambda: self._tagged(lambda e: e.dataset),
            eval_dataset=lambda: self._tagged(lambda e: e.eval_dataset) if any(e.eval_dataset for e in envs) else None,
            **kwargs,
        )

    def _tagged(self, split) -> list[dict[str, Any]]:
        return [{**row, "task": name} for name, env in zip(self.env_names, self.envs) for row in (split(env) or [])]

    def format_dataset(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return rows  # each env formatted its own rows (prompts built with its own system prompt)

    async def aclose(self) -> None:
        for env in self.envs:
            await env.aclose()
        await super().aclose()

    def env_for(self, task: str) -> Environment:
        if task not in self.env_map:
            raise KeyError(f"no environment for task {task!r} in this EnvGroup (tasks: {', '.join(self.env_map)})")
        return self.env_map[task]

    async def rollout_with_state(self, client, model, row, example_id, sampling,
                                 record_tokens: bool = True) -> tuple[Rollout, dict[str, Any]]:
        return await self.env_for(row["task"]).rollout_with_state(client, model, row, example_id, sampling,
                                                                  record_tokens=record_tokens)

    async def score(self, rollout: Rollout, state: dict[str, Any] | None = None) -> Rollout:
        """Scored by its own env; the other envs' metrics are 0 so every rollout logs the same names."""
        rollout = await self.env_for(rollout.task).score(rollout, state)
        for env in self.envs:
            for name in env.rubric.metric_names():
                rollout.metrics.setdefault(name, 0.0)
        return rollout
