"""The embedded real model, SmolLM2-135M-Instruct, served by the real vLLM CPU build and trained for real.

What a tokenizer and a chat template written by someone else break, checked where it happens: a BPE
vocabulary of 49,152 tokens, a template that adds its own system prompt, `<|im_end|>` as both EOS and pad,
a reply cut at max_tokens, a multi-token stop string, BPE merges across the prompt/completion boundary,
vLLM's logprobs against the trainer's (fp32) for the base model and for a LoRA adapter, and tool calls from a
model whose template has no tool syntax (a classic ToolEnv, and a verifiers 0.4 MCP toolset through renderers'
default renderer and vfrl's hermes-text parser), and verifiers' own `textarena` taskset, whose game engine plays the
user. One vf-vllm serves every test here; one trains two steps with vf-train against it.

The model folder is the one scripts/install.sh made (python -m vfrl.make_smollm2).
"""

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest
import tomli_w

from conftest import BIN, ROOT, max_logprob_gap, trained_like_adapter
from vfrl.testing import free_port, vf_vllm

pytestmark = pytest.mark.e2e

API_KEY = "real-model-test-key"
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
ENV_ARGS = {"style": "bare", "operations": ["+"], "max_number": 20}


@pytest.fixture(scope="module")
def smollm2() -> Path:
    model = ROOT / "models" / "smollm2-135m-instruct"
    assert (model / "model.safetensors").exists(), "no models/smollm2-135m-instruct: scripts/install.sh makes it"
    return model


@pytest.fixture(scope="module")
def server(smollm2, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("smollm2-server")
    port = free_port()
    config = tmp / "config.toml"
    config.write_text(tomli_w.dumps({
        "model": str(smollm2), "env": {"id": "arithmetic", "args": ENV_ARGS},
        "inference": {"port": port, "enable_scale_out": True,  # verifiers 0.4's /inference/v1/generate too
                      "args": {"dtype": "float32", "max_model_len": 1024, "enforce_eager": True}},
        "trainer": {"args": {"lora_rank": 8}},
    }))
    with vf_vllm(config, port, API_KEY, tmp / "server.log") as base_url:
        yield base_url


@pytest.fixture(scope="module")
def tokenizer(smollm2):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2)


@pytest.fixture(scope="module")
def base_model(smollm2):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.float32).eval()


def sample(base_url: str, model: str, n: int = 6, **sampling):
    """`n` rollouts of the bare-sum task from `model` (a served name), as the trainer samples them."""
    from openai import AsyncOpenAI

    from vfrl import load_environment

    env = load_environment("arithmetic", **ENV_ARGS)
    sampling = {"temperature": 0.7, "max_tokens": 16, **sampling}

    async def run():
        client = AsyncOpenAI(base_url=base_url, api_key=API_KEY)
        return await asyncio.gather(*(env.rollout(client, model, env.dataset[i], i, {**sampling, "seed": i})
                                      for i in range(n)))
    return asyncio.run(run())


def test_the_made_model_is_the_same_bytes_everywhere(smollm2):
    from vfrl.make_smollm2 import WEIGHTS_SHA256, sha256_prefix

    assert sha256_prefix(smollm2 / "model.safetensors") == WEIGHTS_SHA256


def test_the_template_adds_its_own_system_prompt_and_training_sees_it(server, smollm2, tokenizer):
    rollouts = sample(server, str(smollm2), n=2)
    for r in rollouts:
        assert [m["role"] for m in r.prompt] == ["user"]  # the environment sent no system message
        assert DEFAULT_SYSTEM in tokenizer.decode(r.prompt_ids)  # the template put SmolLM's in, and vLLM's ids hold it


def test_eos_is_pad_and_still_gets_loss(server, smollm2, tokenizer):
    from vfrl.config import TrainerArgs
    from vfrl.learner.batch import make_train_batch

    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.pad_token_id == eos  # the case under test: padding and end of turn are one token
    rollouts = sample(server, str(smollm2), n=8, max_tokens=48)
    finished = [r for r in rollouts if not r.truncated]
    assert finished, "no reply of 48 tokens ended: nothing to check"
    for r in finished:
        assert r.completion_ids[-1] == eos
    for r in rollouts:
        r.reward = float(r.example_id % 2)
    args = TrainerArgs(batch_size=8, rollouts_per_example=2, max_tokens=48, max_seq_len=160)
    batch, _ = make_train_batch(rollouts, args.batch, pad_id=tokenizer.pad_token_id)
    for row, r in enumerate(rollouts):
        P, n = len(r.prompt_ids), len(r.completion_ids)
        # BPE across the boundary: the row is vLLM's ids as they are, never the texts tokenized again
        assert batch.input_ids[row, : P + n].tolist() == r.prompt_ids + r.completion_ids
        assert batch.loss_mask[row, P - 1 : P - 1 + n].tolist() == [1.0] * n  # the final <|im_end|> included
        assert batch.loss_mask[row, P - 1 + n :].sum() == 0  # the padding after it (same id) gets none


def test_a_reply_cut_at_max_tokens_is_marked_truncated(server, smollm2):
    rollouts = sample(server, str(smollm2), n=4, max_tokens=3)
    assert all(r.truncated and len(r.completion_ids) == 3 for r in rollouts)


def test_a_multi_token_stop_string_keeps_ids_and_logprobs_aligned(server, smollm2, tokenizer, base_model):
    stop = " is the"
    assert len(tokenizer(stop, add_special_tokens=False)["input_ids"]) > 1
    rollouts = sample(server, str(smollm2), n=8, max_tokens=24, stop=[stop], temperature=1.0)
    for r in rollouts:
        assert len(r.completion_ids) == len(r.completion_logprobs) == len(r.completion_mask)
        assert stop not in r.completion[-1]["content"]
    assert max_logprob_gap(base_model, rollouts) < 1e-4


def test_vllm_logprobs_match_the_trainer_for_the_base_model_and_an_adapter(server, smollm2, base_model, tmp_path):
    from vfrl.rollouts.weight_sync import AdapterSync

    worst = max_logprob_gap(base_model, sample(server, str(smollm2), n=6), temperature=0.7)
    assert worst < 1e-4, f"base model: max |vLLM - trainer| logprob = {worst:.2e}"
    sync = AdapterSync(server, API_KEY, tmp_path / "adapters")
    (tmp_path / "adapters").mkdir()
    model = trained_like_adapter(smollm2, seed=1, scale=0.02)
    name, _ = sync.push(model, 1)
    rollouts = sample(server, name, n=6)
    worst = max_logprob_gap(model, rollouts, temperature=0.7)
    assert worst < 1e-4, f"{name}: max |vLLM - trainer| logprob = {worst:.2e}"
    assert max_logprob_gap(base_model, rollouts, temperature=0.7) > 1e-3  # and it is the adapter that vLLM served


def test_vf_train_trains_two_steps_of_the_real_model(server, smollm2, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config = run_dir / "config.toml"
    config.write_text(tomli_w.dumps({
        "model": str(smollm2), "env": {"id": "arithmetic", "args": ENV_ARGS},
        "inference": {"base_url": server},
        "trainer": {"args": {"run_name": "smollm2-test", "output_dir": str(tmp_path), "lora_rank": 8,
                             "learning_rate": 3e-4, "temperature": 0.7, "rollouts_per_example": 4, "batch_size": 8,
                             "micro_batch_size": 8, "max_steps": 2, "max_tokens": 16, "max_seq_len": 96,
                             "log_completions": False}},
    }))
    done = subprocess.run([str(BIN / "vf-train"), "@", str(config)], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "VFRL_API_KEY": API_KEY, "CUDA_VISIBLE_DEVICES": ""}, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [s for s in steps if "loss" in s]
    assert [s["step"] for s in steps] == [1, 2]
    assert steps[0]["mismatch_kl"] < 1e-6  # batch 1 came from policy 0, which the trainer holds at step 1
    assert steps[1]["adapter_loaded"] == "policy-2" and (run_dir / "adapters" / "policy-2").is_dir()
    assert "vf-train: done: 2 steps" in done.stdout and "adapters/policy-2" in done.stdout


def tool_batch(env, base_url: str, model: str):
    """16 rollouts (8 products x 2) of a tool environment, sampled by the trainer's Orchestrator."""
    from conftest import sample_batch

    return asyncio.run(sample_batch(env, base_url, API_KEY, model, 0, max_tokens=48, examples=8)).rollouts


def check_tool_rollouts(rollouts, tokenizer, answer_of, result_of):
    """Every rollout's reward is what its final reply's last number says; each one that called the tool holds the
    call, the result of running it on the arguments the model wrote (`result_of(arguments)`), whose tokens get no
    loss, and at least one rollout of the 16 called it."""
    import re

    from vfrl.envs.sampling import parse_tool_calls

    called = 0
    for r in rollouts:
        final = r.completion[-1].get("content") or ""
        numbers = re.findall(r"-?\d+", final)
        assert r.reward == float(bool(numbers) and numbers[-1] == answer_of(r))
        calls = [c for m in r.completion if m["role"] == "assistant" for c in parse_tool_calls(m)]  # or its text's
        tools = [m for m in r.completion if m["role"] == "tool"]
        if not calls or not tools or tools[0]["content"].lower().startswith("error"):  # none, or refused (a wrong name)
            continue
        called += 1
        call, tool = calls[0], tools[0]
        arguments = (call.get("function") or call)["arguments"]
        assert tool["content"] == result_of(json.loads(arguments) if isinstance(arguments, str) else arguments)
        context = [t for t, m in zip(r.completion_ids, r.completion_mask) if m == 0]
        sampled = [t for t, m in zip(r.completion_ids, r.completion_mask) if m == 1]
        assert tool["content"] in tokenizer.decode(context)  # the result is environment text: no loss
        assert "<tool_call>" in tokenizer.decode(sampled)  # the call is the model's own tokens
    assert called, "no rollout of 16 called the tool"


def test_a_classic_tool_env_calls_its_tool_with_the_real_model(server, smollm2, tokenizer):
    """calculator style="bare": SmolLM2's template has no tool syntax; the worked example shows a <tool_call> block
    in the reply text, and the ToolEnv reads it there (the server has no tool-call parser)."""
    import calculator

    from vfrl import load_environment

    env = load_environment("calculator", style="bare", num_train_examples=8, num_eval_examples=1, max_turns=3)
    rollouts = tool_batch(env, server, str(smollm2))
    answers = {i: row["answer"] for i, row in enumerate(env.dataset)}
    check_tool_rollouts(rollouts, tokenizer, lambda r: answers[r.example_id],
                        lambda arguments: calculator.calculate(**arguments))


def test_a_verifiers_mcp_toolset_calls_its_tool_with_the_real_model(server, smollm2, tokenizer, monkeypatch):
    """tests/v1_pkgs/v1_products, a verifiers 0.4 taskset whose vf.Toolset verifiers runs as an MCP server: the
    train client renders with SmolLM2's template extended for tool calls and reads the call with hermes-text."""
    import sys

    from vfrl.envs.verifiers_v1 import V1Environment

    pkgs = str(ROOT / "tests" / "v1_pkgs")
    monkeypatch.setenv("PYTHONPATH", pkgs)  # verifiers starts the tool server as `python -m v1_products.tools`
    monkeypatch.syspath_prepend(pkgs)
    env = V1Environment("v1_products", {"num_tasks": 8})
    env.use_renderer({"name": "default", "tool_parser": "hermes-text",
                      "chat_template": str(ROOT / "configs" / "templates" / "smollm2_tool_calls.jinja")})
    rollouts = tool_batch(env, server, str(smollm2))
    products = {i: str(t.data.product) for i, t in enumerate(env.tasks)}
    check_tool_rollouts(rollouts, tokenizer, lambda r: products[r.example_id],
                        lambda arguments: str(arguments["a"] * arguments["b"]))
    assert all(r.prompt[-1]["content"].startswith("What is") for r in rollouts)  # the worked example is prompt
    sys.modules.pop("v1_products", None)


def test_verifiers_own_textarena_taskset_plays_wordle_with_the_real_model(server, smollm2, tokenizer, monkeypatch,
                                                                         nltk_data_folder):
    """`textarena`, a taskset verifiers 0.4 ships (verifiers/v1/tasksets/textarena, none of the project's), loaded by
    the id verifiers gives it (the game package of the same name is not it): textarena's real Wordle engine plays the
    user, so every turn between the model's is the game's feedback, and gets no loss."""
    import nltk

    from conftest import sample_batch
    from vfrl import load_environment
    from vfrl.envs.verifiers_v1 import V1Environment

    monkeypatch.setattr(nltk.data, "path", [str(nltk_data_folder)])  # the words it needs (conftest)
    env = load_environment("textarena", game="Wordle-v0")
    assert isinstance(env, V1Environment) and "You are Playing Wordle" in env.dataset[0]["prompt"][-1]["content"]
    rollouts = asyncio.run(sample_batch(env, server, API_KEY, str(smollm2), 0, max_tokens=16, examples=1)).rollouts
    assert len(rollouts) == 2
    for r in rollouts:
        roles = [m["role"] for m in r.completion]
        assert roles[0] == "assistant" and set(roles) <= {"assistant", "user"} and "user" in roles, roles
        assert r.reward == r.metrics["game_reward"], (r.reward, r.metrics)  # the engine's score is the reward
        (branch,) = r.sequences()
        game = tokenizer.decode([t for t, m in zip(branch.completion_ids, branch.completion_mask) if not m])
        model = tokenizer.decode([t for t, m in zip(branch.completion_ids, branch.completion_mask) if m])
        first_feedback = next(m["content"] for m in r.completion if m["role"] == "user")
        assert first_feedback[:40] in game and first_feedback[:40] not in model
