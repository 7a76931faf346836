"""A verifiers 0.4 group's first turns as one /inference/v1/generate request with `n` (verifiers_group_request):
each episode reads its own choice, and whatever is not the group's request goes out on its own, as before."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from vfrl.envs import verifiers_group_request as grouped


class Recorder:
    """The train client's OpenAI client: records each POST and answers choice i with token ids [i, seed]."""

    def __init__(self):
        self.bodies: list[dict] = []
        self.base_url = "http://vllm/v1"

    async def post(self, path, *, cast_to, body, options=None):
        self.bodies.append(json.loads(json.dumps(body)))
        await asyncio.sleep(0)
        sp = body["sampling_params"]
        choices = [{"index": i, "token_ids": [i, (sp.get("seed") or 0) + i]} for i in range(sp.get("n", 1))]
        return httpx.Response(200, content=json.dumps({"request_id": "r", "choices": choices}))


def body(prompt=(1, 2, 3), seed=7, **sampling):
    return {"model": "m", "token_ids": list(prompt), "sampling_params": {"max_tokens": 4, "seed": seed, **sampling}}


async def member_posts(client, gid_bodies):
    """Each (group, index, body) POSTed through its member client at once; the choices each got."""
    async def one(group, index, b):
        reply = await grouped.GroupMemberClient(client, group, index).post(
            "/inference/v1/generate", cast_to=httpx.Response, body=b)
        (choice,) = json.loads(reply.content)["choices"]
        assert choice["index"] == 0  # a one-sample request's reply, as renderers reads it
        return choice["token_ids"]

    return await asyncio.gather(*(one(g, i, b) for g, i, b in gid_bodies))


def test_a_group_sends_one_request_with_n_and_the_group_seed_and_each_episode_reads_its_choice():
    client = Recorder()
    with grouped.open_group(3) as gid:
        group = grouped._groups[gid]
        got = asyncio.run(member_posts(client, [(group, j, body(seed=10 + j)) for j in (2, 0, 1)]))
    (sent,) = client.bodies
    assert sent["sampling_params"] == {"max_tokens": 4, "seed": 10, "n": 3}  # child j draws with 10 + j in vLLM
    assert got == [[2, 12], [0, 10], [1, 11]]  # episode j: choice j, the sample its own seed 10 + j gives
    assert not grouped._groups  # closed with the block


def test_what_is_not_the_groups_request_goes_out_on_its_own():
    client = Recorder()
    with grouped.open_group(4) as gid:
        group = grouped._groups[gid]
        got = asyncio.run(member_posts(client, [
            (group, 0, body(seed=20)),
            (group, 1, body(prompt=(9, 9), seed=21)),  # another prompt (an env that varies it per episode)
            (group, 2, body(seed=22, temperature=0.5)),  # other sampling
        ]))
        again = asyncio.run(member_posts(client, [(group, 0, body(seed=20))]))  # a retried episode: its own
    sent = sorted((b["sampling_params"]["seed"], b["sampling_params"].get("n", 1)) for b in client.bodies)
    assert sent == [(20, 1), (20, 4), (21, 1), (22, 1)]  # the group's, then three of their own
    assert got == [[0, 20], [0, 21], [0, 22]] and again == [[0, 20]]


def test_a_server_that_returns_fewer_choices_leaves_the_rest_to_their_own_requests():
    class OneChoice(Recorder):
        async def post(self, path, *, cast_to, body, options=None):
            reply = await super().post(path, cast_to=cast_to, body=body, options=options)
            data = json.loads(reply.content)
            return httpx.Response(200, content=json.dumps({**data, "choices": data["choices"][:1]}))

    client = OneChoice()
    with grouped.open_group(2) as gid:
        got = asyncio.run(member_posts(client, [(grouped._groups[gid], j, body(seed=5 + j)) for j in (0, 1)]))
    assert got == [[0, 5], [0, 6]] and len(client.bodies) == 2


@pytest.mark.parametrize("tagged", [True, False])
def test_the_tag_is_never_sent_and_an_ended_group_samples_alone(monkeypatch, tagged):
    """renderers' generate, as the train client calls it: the tag leaves the sampling before anything is sent."""
    calls = []

    async def renderers_generate(**kwargs):
        calls.append(kwargs)
        return {}

    monkeypatch.setattr(grouped, "renderers_generate", renderers_generate)
    client = Recorder()
    sampling = {"max_tokens": 4, "seed": 3}
    with grouped.open_group(2) as gid:
        pass  # ended before its episodes sample: each one asks alone
    if tagged:
        sampling = grouped.tag(sampling, gid, 1)
    asyncio.run(grouped.generate(client=client, sampling_params=sampling, prompt_ids=[1]))
    (call,) = calls
    assert call["sampling_params"] == {"max_tokens": 4, "seed": 3} and call["client"] is client


def test_a_group_request_the_server_refuses_leaves_each_episode_to_its_own():
    """vLLM's generate route refuses n over its max_num_seqs with a 400; each episode then asks alone."""
    import openai

    class UpToTwo(Recorder):
        async def post(self, path, *, cast_to, body, options=None):
            if body["sampling_params"].get("n", 1) > 2:
                self.bodies.append(body)
                reply = httpx.Response(400, request=httpx.Request("POST", "http://vllm" + path))
                raise openai.BadRequestError("sampling_params.n must be at most the server's max_num_seqs (2)",
                                             response=reply, body=None)
            return await super().post(path, cast_to=cast_to, body=body, options=options)

    client = UpToTwo()
    with grouped.open_group(4) as gid:
        got = asyncio.run(member_posts(client, [(grouped._groups[gid], j, body(seed=30 + j)) for j in range(4)]))
    assert got == [[0, 30], [0, 31], [0, 32], [0, 33]]
    assert sorted(b["sampling_params"].get("n", 1) for b in client.bodies) == [1, 1, 1, 1, 4]
