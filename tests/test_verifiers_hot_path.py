"""What vfrl changes under verifiers 0.4's path (verifiers_hot_path): here, renderers' model-length lock, which must
hold in every event loop a process runs (the Python API runs one per `train()` and `evaluate()`)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

pytest.importorskip("renderers")

_servers = itertools.count()


class ModelsEndpoint:
    """An OpenAI client whose GET /models answers after the loop has turned, so concurrent lookups meet the lock."""

    def __init__(self):
        self.base_url = f"http://server-{next(_servers)}/v1"  # a key renderers has not cached yet

    async def get(self, path, cast_to):
        await asyncio.sleep(0.01)
        return {"data": [{"id": "policy-1", "max_model_len": 64}, {"id": "policy-2", "max_model_len": 64}]}


def test_the_model_length_lookup_holds_in_a_second_event_loop():
    from renderers import client

    from vfrl.envs import verifiers_hot_path

    verifiers_hot_path.apply()
    server = ModelsEndpoint()

    async def lookups(model: str):
        return await asyncio.gather(*(client._resolve_max_prompt_len(server, model) for _ in range(4)))

    assert asyncio.run(lookups("policy-1")) == [64] * 4
    assert asyncio.run(lookups("policy-2")) == [64] * 4  # another loop, contended again: no "bound to a different loop"
