"""What the classic API's base hooks return: a value that is read as it is or awaited, as a package's code asks.

verifiers' classic hooks changed shape across its releases: `setup_state`, `is_completed`, the stop conditions
(`max_turns_reached`, `has_error`, ...) and `update_tool_args` were plain methods, then coroutines. Packages of
both ages live side by side on the community hub: one writes `state = super().setup_state(state)` in a `def`,
another `state = await super().setup_state(state, **kwargs)` in an `async def`, a third `if
self.max_turns_reached(state):`. vfrl's base hooks do no waiting, so each returns its result in a form both kinds
of caller read: the rollout's `State` (a dict), a `Verdict` (an int that is 0 or 1, as True and False are), and
`Returned` dicts. Awaiting one gives the plain value; reading it needs no await.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable


async def maybe_await(value: Any) -> Any:
    """`value`, awaited when it is awaitable (a hook may be sync or async)."""
    return await value if inspect.isawaitable(value) else value


def _itself(value: Any):
    """The iterator `__await__` returns: it finishes at once with `value` (nothing is waited for)."""
    return value
    yield  # the yield makes this a generator: __await__ must return an iterator


class State(dict):
    """One rollout's state: a dict that `await` hands back as itself, so `await super().setup_state(state)` and
    `super().setup_state(state)` both give the same dict (verifiers' State is a dict subclass too)."""

    def __await__(self):
        return _itself(self)


class Returned(dict):
    """A dict a base hook returns (`update_tool_args`' arguments), readable with or without `await`."""

    def __await__(self):
        return _itself(dict(self))


class Verdict(int):
    """A base hook's yes or no (`is_completed`, the stop conditions): an int 0 or 1, as bool's are, so `if`, `not`,
    `==`, `or` read it, and `await` gives the bool."""

    def __new__(cls, value: Any) -> "Verdict":
        return super().__new__(cls, bool(value))

    def __await__(self):
        return _itself(bool(self))

    def __repr__(self) -> str:
        return repr(bool(self))

    __str__ = __repr__


def messages_and_state(args: tuple, kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """`is_completed`'s (messages, state) however it was called: `(messages, state)` as verifiers' early releases
    and vfrl's own environments call it, `(state)` as its later ones do, or by name."""
    if "state" in kwargs:
        return kwargs.get("messages", args[0] if args else None), kwargs["state"]
    if len(args) >= 2:
        return args[0], args[1]
    return kwargs.get("messages"), args[0]


def positional_params(func: Callable[..., Any]) -> float:
    """How many positional arguments `func` takes (infinity with *args): which of a hook's calling conventions
    a package's override was written for (`is_completed(messages, state)` or `(state)`, `call_tool` with or
    without verifiers' `tool_call_id`)."""
    params = inspect.signature(func).parameters.values()
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return math.inf
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
