"""The rejected-request row against the real vLLM server (the session's shared one, max_model_len 1024):
vLLM answers a prompt longer than its context with HTTP 400, and the step goes on without that group."""

import asyncio

import pytest

import vfrl
from vfrl.config import TrainerArgs
from vfrl.learner.batch import make_train_batch
from vfrl.rollouts.orchestrator import Orchestrator

pytestmark = pytest.mark.e2e


def test_an_overlong_prompt_is_rejected_by_vllm_and_only_its_group_is_dropped(shared_vllm_server):
    from openai import AsyncOpenAI

    srv = shared_vllm_server
    # the tiny model's tokenizer spends one token per character: 1100 characters do not fit in 1024
    questions = ["abc", "x" * 1100, "de", "fgh"]
    env = vfrl.SingleTurnEnv(
        dataset=[{"question": q, "answer": q[::-1]} for q in questions],
        rubric=vfrl.Rubric([lambda completion, answer: float(completion[-1]["content"] == answer)]))
    args = TrainerArgs(rollouts_per_example=2, batch_size=8, micro_batch_size=4, max_tokens=8, max_seq_len=64,
                       rollout_timeout=120, generation_timeout=120)

    async def generate():
        client = AsyncOpenAI(base_url=srv.base_url, api_key=srv.api_key, max_retries=0)
        try:
            return await Orchestrator(env, client, args.generation).generate(0, srv.model, 0)
        finally:
            await client.close()

    batch = asyncio.run(generate())
    lost = batch.example_ids.index(1)
    assert batch.sizes() == [0 if i == lost else 2 for i in range(4)]
    assert batch.metrics["rollouts_rejected"] == 2 and batch.metrics["rollouts_dropped"] == 2
    assert batch.warning.startswith("step 1: 2 of 8 rollouts dropped: 2 rejected (HTTP 400: ")
    assert "1024" in batch.warning  # vLLM's message names its context length
    tb, _ = make_train_batch(batch.rollouts, args.batch, pad_id=0, group_sizes=batch.sizes())
    assert len(tb) == 8 and tb.loss_mask[:6].sum(-1).min() > 0 and tb.loss_mask[6:].sum() == 0
