"""Faults of one rollout: which ones drop it, and the time limit that bounds it.

The rule is "keep what the server sampled, drop what has nothing to keep":

- the server rejects the rollout's first request (a 4xx that is about this request: a prompt longer
  than `max_model_len`, arguments it refuses): nothing was sampled, the rollout is dropped;
- a later request of a multi-turn rollout is rejected: the rollout ends there and keeps its turns
  (`truncated`, the reason in `Rollout.error`), see multiturn.py;
- the rollout (its turns, the environment's replies and the scoring) is still running when its time
  limit is up: dropped. Its sequence is unfinished and nothing says whose fault the stall was, so a
  reward of 0 would teach the policy against an infrastructure hiccup; dropping keeps its group's
  baseline honest. A reward function that overruns the limit is the exception: the rollout is whole,
  so it is kept, that function scoring 0, like any other reward-function fault (rubric.py);
- connection errors, 5xx, 401/403 (the key), 404 (the model or adapter is not served), 408 and 429
  are about the server, not the request: they propagate, as every request would fail the same way.

`run_group(..., faults=RolloutFaults(timeout))` opts in; without it every error propagates.
"""

from __future__ import annotations

import contextvars
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import openai

# status codes that describe the server or the run, not the one request that got them
SERVER_SIDE_4XX = {401, 403, 404, 408, 429}

# when the running rollout must be done (time.monotonic()); set in each rollout's own task by run_group. run_group
# keeps to it with the deadline start_clock returns; the rubric (rubric.py) reads it here, because it is reached
# through Environment.score(rollout, state) and Rubric.score(**available), methods environments and rubrics
# override with these signatures (and every keyword of Rubric.score is offered to the reward functions)
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("rollout_deadline", default=None)


def is_rejected_request(e: BaseException) -> bool:
    """Did the server refuse this one request (as opposed to being down or misconfigured)?"""
    return (isinstance(e, openai.APIStatusError) and 400 <= e.status_code < 500
            and e.status_code not in SERVER_SIDE_4XX)


def one_line(text: str, limit: int = 240) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def request_error_text(e: BaseException) -> str:
    """`HTTP 400: <the server's message>`, on one line."""
    body = getattr(e, "body", None)
    message = body.get("message") if isinstance(body, dict) else None
    return one_line(f"HTTP {e.status_code}: {message or e.message}" if isinstance(e, openai.APIStatusError)
                    else f"{type(e).__name__}: {e}")


def seconds_left(deadline: float | None) -> float | None:
    """Seconds until `deadline` (time.monotonic(); <= 0: passed); None without one."""
    return None if deadline is None else deadline - time.monotonic()


def time_left() -> float | None:
    """Seconds until the running rollout's time limit (<= 0: used up); None without a limit."""
    return seconds_left(_deadline.get())


def start_clock(timeout: float | None) -> float | None:
    """Start the running task's rollout clock (None: no limit); it ends with the task. Returns the deadline."""
    deadline = None if timeout is None else time.monotonic() + timeout
    _deadline.set(deadline)
    return deadline


@dataclass
class RolloutFaults:
    """One batch's per-rollout fault handling: the time limit of each rollout, and what was dropped.

    `dropped` counts by kind ("rejected", "timed_out"); `first` keeps the first reason of each kind."""

    timeout: float | None = None
    dropped: Counter = field(default_factory=Counter)
    first: dict[str, str] = field(default_factory=dict)

    def drop(self, kind: str, reason: str) -> None:
        self.dropped[kind] += 1
        self.first.setdefault(kind, reason)

    @property
    def total(self) -> int:
        return sum(self.dropped.values())

    def describe(self) -> str:
        """`3 rejected (HTTP 400: ...), 1 timed out (...)`."""
        return ", ".join(f"{n} {kind.replace('_', ' ')} ({self.first[kind]})" for kind, n in self.dropped.items())


def reward_error_counts(rollouts: list) -> dict[str, int]:
    """Reward function name -> scored rollouts it failed on, for every function the rollouts report.

    Only rollouts scored by a vfrl rubric (rubric.py: their metrics hold `reward_errors`) name functions: a
    verifiers 0.4 rollout's metrics are its taskset's rewards and `@vf.metric`s, and a scoring function that
    raises there fails the whole episode, which is dropped with verifiers' reason (verifiers_v1.py)."""
    names = {n for r in rollouts if "reward_errors" in r.metrics or r.reward_errors
             for n in [*r.metrics, *r.reward_errors] if n != "reward_errors"}
    return {n: sum(n in r.reward_errors for r in rollouts) for n in sorted(names)}


def first_reason(rollouts: list, name: str) -> str:
    """Why reward function `name` failed, on the first rollout where it did."""
    return next(r.reward_errors[name] for r in rollouts if name in r.reward_errors)


class RolloutFailed(RuntimeError):
    """An environment's own code raised during a rollout; the message is one line naming the environment, the
    error and the package's line it came from (the traceback stays on `__cause__`, for the log)."""

    worded_for_users = True  # vf-train and vf-eval print the message alone


def own_line(e: BaseException, env: object) -> str | None:
    """`file.py:12`, the innermost frame of `e`'s traceback in the source of `env`'s own package (the module that
    defines its class, or that module's package folder); None when the error did not pass through it (vfrl's own,
    the server's)."""
    module = sys.modules.get(type(env).__module__)
    file = getattr(module, "__file__", None)
    if not file or type(env).__module__.split(".")[0] == "vfrl":
        return None
    home = Path(file).resolve()
    home = home.parent if home.name == "__init__.py" else home
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        path = Path(frame.filename).resolve()
        if path == home or home in path.parents:
            return f"{path.name}:{frame.lineno}"
    return None
