"""A group's first turns as one vLLM request for verifiers 0.4 episodes too: `n` samples of one prompt in one call.

vfrl's own environments send the first turn of a whole group as one request with `n` (group_request.py: child j
of a request with seed s draws with seed s + j, so the samples are the ones n requests would give). verifiers'
train client sends one `/inference/v1/generate` per episode: on a small model most of a batch is then request
handling, on both sides of the wire, and the group's prompt is prefilled n times.

`V1Environment.run_group` opens a group (`open_group`) and tags the sampling of episode j with the group and j
(`tag`): an extra `SamplingConfig` key, which verifiers passes unread from the rollout's context to its train
client. The train client calls `renderers.client.generate`; `install` puts `generate` here in its place, which
takes the tag out of the sampling (it is never sent) and gives the call a client whose POST claims its choice of
the group's request (`GroupRequest.claim`): the first claim sends the request with `n` and the group's seed, the
others wait for it and read their own choice. A request that differs from the group's (another prompt, other
sampling, a later turn), a second claim by the same episode (verifiers retries an episode), a group already ended,
or a group request the server refused (vLLM's generate route takes `n` only up to its `max_num_seqs`) sends its own
request, as before. Every parse of the reply stays renderers' own.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, Iterator

import httpx
import openai

from vfrl.envs.group_request import GroupRequest

TAG = "vfrl_group_member"  # the sampling key that carries "<group>:<index>" to the train client; never sent
_groups: dict[int, GroupRequest] = {}  # the groups being sampled, by id
_ids = itertools.count(1)


@contextmanager
def open_group(n: int) -> Iterator[int]:
    """The id of a new group of `n` episodes, open while the block runs."""
    gid = next(_ids)
    _groups[gid] = GroupRequest(n)
    try:
        yield gid
    finally:
        del _groups[gid]


def tag(sampling: dict[str, Any], gid: int, index: int) -> dict[str, Any]:
    """`sampling` for episode `index` of group `gid`."""
    return {**sampling, TAG: f"{gid}:{index}"}


class GenerateReply:
    """A `/inference/v1/generate` reply as `GroupRequest.claim` reads one: `.choices`, each with its `.index`."""

    def __init__(self, data: dict[str, Any]):
        self.data = data
        self.choices = [SimpleNamespace(index=c.get("index", i), data=c) for i, c in enumerate(data["choices"])]

    def one(self) -> httpx.Response:
        """The reply to a one-sample request: this reply with its (single) choice as choice 0."""
        (choice,) = self.choices
        return httpx.Response(200, content=json.dumps({**self.data, "choices": [{**choice.data, "index": 0}]}))


class GroupMemberClient:
    """The train client's OpenAI client for episode `index` of `group`: its generate POST claims the group's
    request; everything else is the client's own."""

    def __init__(self, client, group: GroupRequest, index: int):
        self._client, self._group, self._index = client, group, index

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    async def post(self, path: str, *, cast_to, body: dict[str, Any], options: Any = None, **kwargs):
        client, index = self._client, self._index
        sampling = body.get("sampling_params") or {}
        seed = sampling.get("seed")
        if cast_to is not httpx.Response or kwargs or "n" in sampling:
            return await client.post(path, cast_to=cast_to, body=body, options=options, **kwargs)
        key = (path, {**body, "sampling_params": {k: v for k, v in sampling.items() if k != "seed"}})

        async def send_for_group(n: int) -> GenerateReply:
            group_sampling = {**sampling, "n": n} | ({"seed": seed - index} if seed is not None else {})
            reply = await client.post(path, cast_to=httpx.Response, body={**body, "sampling_params": group_sampling},
                                      options=copy.deepcopy(options))
            return GenerateReply(json.loads(reply.content))

        try:
            mine = await self._group.claim(index, key, send_for_group)
        except openai.BadRequestError:  # refused as a group (vLLM's generate takes n <= max_num_seqs only)
            mine = None
        if mine is None:
            return await client.post(path, cast_to=cast_to, body=body, options=options)
        return mine.one()


async def generate(**kwargs) -> dict[str, Any]:
    """renderers' `generate`, a tagged call's POST claiming its group's request."""
    sampling = kwargs.get("sampling_params") or {}
    member = sampling.get(TAG)
    if member is None:
        return await renderers_generate(**kwargs)
    kwargs["sampling_params"] = {k: v for k, v in sampling.items() if k != TAG}
    gid, index = (int(part) for part in str(member).split(":"))
    if (group := _groups.get(gid)) is not None:
        kwargs["client"] = GroupMemberClient(kwargs["client"], group, index)
    return await renderers_generate(**kwargs)


renderers_generate = None  # renderers' own generate, kept by install


@functools.cache  # once per process
def install() -> None:
    """verifiers' train client (which imports `generate` from renderers.client when it samples) calls ours."""
    global renderers_generate
    from renderers import client

    renderers_generate = client.generate
    client.generate = generate
