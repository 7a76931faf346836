"""What the trainer and vf-eval call on an environment: the one interface between them and envs/.

Every environment vfrl loads (envs/: SingleTurnEnv and the rest, a verifiers 0.4 package's V1Environment, an
EnvGroup) is an `Environment`, which implements it; the loader checks it (envs/loader.py `checked`), so an object
handed to the Python API that is not one fails there, in one line, not at the first rollout.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from vfrl.rollout_types import Rollout


class EnvironmentProtocol(Protocol):
    env_id: str
    dataset: Any  # the training rows (None: only an eval split)
    eval_dataset: Any  # the eval rows, or None: eval holds out the dataset's last rows
    score_rollouts: bool  # False: rollouts are left unscored (vf-eval's generation only; training refuses it)

    def rows(self, eval: bool = False) -> list[dict[str, Any]]:
        """The rows `run_group` samples from: the eval split's with `eval`, else the dataset (or the eval split)."""

    async def run_group(self, client, model: str, example_id: int, n: int, sampling: dict[str, Any],
                        semaphore: asyncio.Semaphore, eval: bool = False, record_tokens: bool = True,
                        faults=None) -> list[Rollout]:
        """Up to `n` scored rollouts of row `example_id`, sampled from `model` through the OpenAI `client`."""

    def limit_tasks(self, n: int, bounded_too: bool = False) -> None:
        """A run reads at most `n` rows (a taskset without end is read only that far)."""

    async def aclose(self) -> None:
        """Release what the environment holds (its @teardown methods, servers, sandboxes); once."""


def missing(env) -> list[str]:
    """What `env` lacks of the protocol, sorted; read off its class and its own attributes, so that a dataset built
    on first use (a property) is not built by the check (isinstance against the protocol would build it)."""
    methods = [name for name, value in vars(EnvironmentProtocol).items() if callable(value) and name[0] != "_"]
    names = [*EnvironmentProtocol.__annotations__, *methods]
    return sorted(name for name in names if not hasattr(type(env), name) and name not in getattr(env, "__dict__", {}))
