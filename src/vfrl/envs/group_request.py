"""One request for the first turn of a whole group: `n` samples of one prompt in one vLLM call.

The rollouts of a group start from the same prompt and differ only in their sampling seed (sample j
draws with the group's seed + j, see `Environment.run_group`). vLLM's `n` does exactly that: child
j of a request with `seed = s` and `n` samples draws with seed s + j, so one request with `n`
returns the same tokens and logprobs as n requests with seeds s .. s+n-1 (measured: identical ids,
logprob difference 0.0), with one prefill and one HTTP round trip instead of n.

`run_group` opens a `GroupRequest` and makes each rollout's task a member of it (`join`);
`MultiTurnEnv.rollout_with_state` reads its membership (`group_member`) and hands it to its sampler, whose
first turn asks `claim`. The first claim sends the request for all n; the others wait for it. A rollout
whose first request differs from the group's (an environment that changes the prompt per rollout in
`setup_state`), a server that returns fewer choices than asked (not vLLM), or a second claim of the same
rollout, sends its own request, as before. Later turns of multi-turn rollouts are per rollout: their
conversations differ.

From `run_group` to `rollout_with_state` the membership travels in a context variable, not an argument:
`rollout_with_state(client, model, row, example_id, sampling, record_tokens)` is the method an
`Environment` subclass implements (and `EnvGroup` forwards), so its signature stays as environments
written against it have it. From there on it is an argument.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
from typing import Any, Awaitable, Callable

# (the group's request, this rollout's sample index)
GroupMember = tuple["GroupRequest", int]
# the running rollout's GroupMember: set in each rollout's own task by run_group, read by rollout_with_state
# (a context variable only because rollout_with_state's signature is fixed, see the module docstring)
_member: contextvars.ContextVar[GroupMember | None] = contextvars.ContextVar("group_request_member", default=None)


class GroupRequest:
    def __init__(self, n: int):
        self.n = n
        self.key: Any = None  # (messages, request arguments without the seed) of the shared request
        self.task: asyncio.Task | None = None
        self.claimed: set[int] = set()
        self.abandoned = False  # a waiter timed out on the request: later claims send their own

    def join(self, index: int) -> None:
        """Make the calling task sample index `index` of this group (call inside the rollout's task)."""
        _member.set((self, index))

    async def claim(self, index: int, key: Any, send: Callable[[int], Awaitable[Any]]) -> Any | None:
        """Choice `index` of the group's response, as a one-choice response; None: send your own request.

        `key` says what the request asks (equal keys: the same request but for the seed); `send(n)`
        sends it with `n` samples and the group's seed."""
        if index in self.claimed or self.abandoned or (self.key is not None and key != self.key):
            return None
        self.claimed.add(index)
        if self.task is None:
            self.key = copy.deepcopy(key)  # the rollout goes on to change its messages
            self.task = asyncio.ensure_future(send(self.n))
            # the request belongs to the group: if every waiter is cancelled (timeouts), nobody reads it
            self.task.add_done_callback(lambda t: t.cancelled() or t.exception())
        # shield: one rollout's timeout must not cancel the request the others wait on
        try:
            resp = await asyncio.shield(self.task)
        except asyncio.CancelledError:
            # a rollout ran out of time waiting: rollouts that get their slot later send their own
            # request, each with its own full time limit, rather than wait on a stalled one
            self.abandoned = not self.task.done()
            raise
        choice = next((c for c in resp.choices if getattr(c, "index", 0) == index), None)
        return None if choice is None else one_choice(resp, choice)


def one_choice(resp: Any, choice: Any) -> Any:
    """A shallow copy of `resp` whose choices are `choice` alone (the response of a one-sample request)."""
    if hasattr(resp, "model_copy"):
        return resp.model_copy(update={"choices": [choice]})
    single = copy.copy(resp)
    single.choices = [choice]
    return single


def group_member() -> GroupMember | None:
    """The running rollout's group request and sample index; None outside `run_group`."""
    return _member.get()
