"""After an adapter sync, vLLM's logprobs of the tokens it sampled equal the trainer's (fp32, CPU).

Runs on the session's shared vf-vllm (conftest.py): the adapters it loads are named policy-N, which no
other test asks for."""

import asyncio

import pytest

from conftest import max_logprob_gap, trained_like_adapter

pytestmark = pytest.mark.e2e


def test_vllm_logprobs_match_trainer_after_sync(shared_vllm_server, tiny_model, tmp_path):
    from openai import AsyncOpenAI

    from vfrl import load_environment
    from vfrl.rollouts.weight_sync import AdapterSync

    base_url, api_key = shared_vllm_server.base_url, shared_vllm_server.api_key
    env = load_environment("reverse-text")
    sync = AdapterSync(base_url, api_key, tmp_path / "adapters")
    (tmp_path / "adapters").mkdir()
    base_logprobs = None
    for version in (1, 2):  # a second sync must replace the first, not be served stale
        model = trained_like_adapter(tiny_model, seed=version)
        name, _ = sync.push(model, version)
        assert name in sync.served_models()

        async def sample():
            client = AsyncOpenAI(base_url=base_url, api_key=api_key)
            return await asyncio.gather(*(
                env.rollout(client, name, env.dataset[i], i, {"temperature": 1.0, "max_tokens": 12, "seed": i})
                for i in range(8)
            ))

        rollouts = asyncio.run(sample())
        worst = max_logprob_gap(model, rollouts)
        assert worst < 1e-4, f"policy-{version}: max |vLLM - trainer| logprob = {worst:.2e}"
        first = rollouts[0].completion_logprobs
        if base_logprobs is not None:
            assert first != base_logprobs
        base_logprobs = first
