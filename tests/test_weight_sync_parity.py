"""After an adapter sync, vLLM's logprobs of the tokens it sampled equal the trainer's (fp32, CPU)."""

import asyncio

import pytest
import torch

from conftest import free_port, max_logprob_gap, vf_vllm, write_config

pytestmark = pytest.mark.e2e

API_KEY = "test-key"


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory, tiny_model):
    tmp = tmp_path_factory.mktemp("server")
    port = free_port()
    cfg = write_config(tmp / "config.toml", tiny_model, port=port, output_dir=tmp)
    with vf_vllm(cfg, port, API_KEY, tmp / "server.log") as base_url:
        yield base_url, tmp


def trained_like_adapter(model_dir, seed: int):
    """The tiny model with a LoRA whose B matrices are non-zero, as after some training."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    torch.manual_seed(seed)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    return model.eval()


def test_vllm_logprobs_match_trainer_after_sync(vllm_server, tiny_model):
    from openai import AsyncOpenAI

    from vfrl import load_environment
    from vfrl.trainer.weight_sync import AdapterSync

    base_url, tmp = vllm_server
    env = load_environment("reverse-text")
    sync = AdapterSync(base_url, API_KEY, tmp / "adapters")
    (tmp / "adapters").mkdir(exist_ok=True)
    base_logprobs = None
    for version in (1, 2):  # a second sync must replace the first, not be served stale
        model = trained_like_adapter(tiny_model, seed=version)
        name, _ = sync.push(model, version)
        assert name in sync.served_models()

        async def sample():
            client = AsyncOpenAI(base_url=base_url, api_key=API_KEY)
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
