"""Multi-turn rollouts against the real vLLM CPU server with the tiny model (ChatML template).

The training sequence built from vLLM's per-turn token ids must be exactly the conversation as
the server tokenizes it, and its model-token logprobs must be what the trainer computes on that
sequence: then the masks and logprobs line up with the tokens that get the loss.
"""

import asyncio

import httpx
import pytest
import torch

from vfrl import load_environment

pytestmark = pytest.mark.e2e

SAMPLING = {"temperature": 1.0, "max_tokens": 24}


@pytest.fixture(scope="module")
def server(shared_vllm_server):
    """(root URL, model, API key) of the session's vLLM server (tests/conftest.py), ChatML template."""
    srv = shared_vllm_server
    return srv.base_url.removesuffix("/v1"), srv.model, srv.api_key


def rollouts(env, server, n=4):
    from openai import AsyncOpenAI

    root, model, api_key = server

    async def go():
        client = AsyncOpenAI(base_url=f"{root}/v1", api_key=api_key)
        return await asyncio.gather(*(
            env.rollout_with_state(client, model, env.dataset[i], i, {**SAMPLING, "seed": i}) for i in range(n)))

    return asyncio.run(go())


def server_tokens(server, messages) -> list[int]:
    root, model, api_key = server
    resp = httpx.post(f"{root}/tokenize", json={"model": model, "messages": messages, "add_generation_prompt": False},
                      headers={"Authorization": f"Bearer {api_key}"})
    return resp.json()["tokens"]


def check_against_server_and_trainer(server, pairs):
    from transformers import AutoModelForCausalLM

    from vfrl.learner.logprobs import sequence_logprobs

    model = AutoModelForCausalLM.from_pretrained(server[1], dtype=torch.float32).eval()
    for r, state in pairs:
        assert not r.truncated, r.error
        assert len(r.turn_spans) == state["turn"] >= 2
        seq = r.prompt_ids + r.completion_ids
        rendered = server_tokens(server, r.prompt + r.completion)
        # rendered ends with "<|im_end|>\n" after the last reply; the sampled sequence stops at <|im_end|>
        assert seq == rendered[:-1]
        ids = torch.tensor([seq])
        with torch.no_grad():
            trainer_lp = sequence_logprobs(model, ids, torch.ones_like(ids))[0, len(r.prompt_ids) - 1:]
        mask = torch.tensor(r.completion_mask, dtype=torch.bool)
        diff = (trainer_lp[mask] - torch.tensor(r.completion_logprobs)[mask]).abs().max().item()
        assert diff < 1e-4, f"model-token logprobs differ from the trainer's by {diff:.2e}"
        assert all(lp == 0.0 for lp, m in zip(r.completion_logprobs, r.completion_mask) if m == 0)


def test_chatml_multi_turn_ids_extend_each_turn(server):
    env = load_environment("alphabet-sort", num_train_examples=4, num_eval_examples=1)
    pairs = rollouts(env, server)
    assert [r.sequence_mode for r, _ in pairs] == ["chat"] * 4  # the prefix check held on every turn
    assert not env.sampler_flags.get("template_rewrites_history")
    check_against_server_and_trainer(server, pairs)


def test_token_id_path_gives_the_same_sequence_as_chat(server):
    """Forced onto the fallback (/tokenize delta + /v1/completions with token ids), ChatML must give
    the very sequence the chat path gives."""
    env = load_environment("alphabet-sort", num_train_examples=4, num_eval_examples=1)
    env.sampler_flags["template_rewrites_history"] = True
    pairs = rollouts(env, server)
    assert [r.sequence_mode for r, _ in pairs] == ["tokens"] * 4
    check_against_server_and_trainer(server, pairs)


def test_tool_env_runs_on_a_server_without_tool_parser(server):
    env = load_environment("calculator", num_train_examples=2, num_eval_examples=1)
    pairs = rollouts(env, server, n=2)
    assert env.sampler_flags["tool_choice"] == "none"  # vLLM refused auto tool choice; text parsing took over
    for r, state in pairs:
        assert state["turn"] >= 1 and r.completion[0]["role"] == "assistant"
        assert len(r.completion_ids) == len(r.completion_mask) == len(r.completion_logprobs)


def test_the_plain_chat_post_reads_what_the_openai_client_reads(server):
    """Token mode sends chat requests with `post_chat` (plain JSON, no pydantic models): the same seeded
    group request of n samples, sent both ways, must give the same ids, logprobs and text."""
    from openai import AsyncOpenAI

    from vfrl.envs.sampling import post_chat, sampling_request

    root, model, api_key = server
    messages = [{"role": "user", "content": "Reverse the text: abcdef"}]
    kwargs = sampling_request({**SAMPLING, "seed": 7, "n": 4})

    async def both():
        client = AsyncOpenAI(base_url=f"{root}/v1", api_key=api_key)
        return (await client.chat.completions.create(model=model, messages=messages, **kwargs),
                await post_chat(client, model, messages, kwargs))

    typed, plain = asyncio.run(both())
    assert plain.prompt_token_ids == typed.prompt_token_ids
    assert len(plain.choices) == len(typed.choices) == 4
    for a, b in zip(typed.choices, plain.choices):
        assert (b.index, b.token_ids, b.message.content, b.finish_reason, b.stop_reason) == (
            a.index, a.token_ids, a.message.content, a.finish_reason, a.stop_reason)
        assert [t.logprob for t in b.logprobs.content] == [t.logprob for t in a.logprobs.content]
