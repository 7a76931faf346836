"""verifiers 0.4 (`verifiers.v1`) environment packages, trained unchanged (vfrl/envs/verifiers_v1.py).

tests/v1_pkgs/v1_reverse is a small 0.4 package written only against verifiers' public API. The
light tests run it in-process against a fake of vLLM's `/inference/v1/generate` (tests/fake_generate.py);
the e2e test samples it through the real vLLM CPU server. Each needs verifiers 0.4 (vfrl's
`verifiers` extra) and uv (verifiers runs its agents as uv scripts), and is skipped, saying so, without.
"""

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from vfrl.envs.verifiers_v1 import DroppedEpisode, episode_rollout
from vfrl.inference.scale_out import find_uv, is_verifiers_package

from conftest import BIN, tmux_socket

PKGS = Path(__file__).parent / "v1_pkgs"
sys.path.insert(0, str(PKGS))

try:
    import verifiers.v1  # noqa: F401

    HAVE_V1 = True
except ImportError:
    HAVE_V1 = False

needs_v1 = pytest.mark.skipif(not HAVE_V1, reason="verifiers 0.4 is not installed (pip install -e '.[verifiers]')")
needs_uv = pytest.mark.skipif(find_uv() is None, reason="uv is not installed (verifiers runs its agents as uv scripts)")


# --- what becomes of an episode (no verifiers needed: episodes are duck-typed) ---

def branch(ids, mask, logprobs, trainable=True, messages=()):
    return SimpleNamespace(token_ids=ids, sampled_mask=mask, logprobs=logprobs, trainable=trainable,
                           messages=list(messages))


def episode(*traces, ok=True, errors=()):
    return SimpleNamespace(ok=ok, errors=list(errors), traces=list(traces))


def trace(*branches, reward=0.5, trainable=True, ok=True, errors=()):
    return SimpleNamespace(branches=list(branches), agent=SimpleNamespace(trainable=trainable), reward=reward,
                           rewards={"exact": SimpleNamespace(score=reward)}, metrics={"len": 3.0, "none": None},
                           is_truncated=False, ok=ok, errors=list(errors))


def test_a_multi_turn_branch_keeps_its_tokens_mask_and_logprobs():
    # prompt 3 tokens, a reply of 2, 2 environment tokens, a reply of 2
    b = branch([1, 2, 3, 10, 11, 4, 5, 12, 13], [0, 0, 0, 1, 1, 0, 0, 1, 1],
               [0.0, 0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.3, -0.4],
               messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                         {"role": "user", "content": "more"}, {"role": "assistant", "content": "b"}])
    r = episode_rollout(episode(trace(b, reward=0.75)), example_id=7, answer="x", policy="policy-3")
    assert r.prompt_ids == [1, 2, 3] and r.completion_ids == [10, 11, 4, 5, 12, 13]
    assert r.completion_mask == [1, 1, 0, 0, 1, 1]
    assert r.completion_logprobs == [-0.1, -0.2, 0.0, 0.0, -0.3, -0.4]
    assert r.turn_spans == [(0, 2), (4, 6)]
    assert r.reward == 0.75 and r.metrics == {"exact": 0.75, "len": 3.0}
    assert r.prompt == [{"role": "user", "content": "q"}] and len(r.completion) == 3
    assert (r.example_id, r.answer, r.policy) == (7, "x", "policy-3")


def test_traces_of_agents_that_do_not_train_are_left_out():
    judge = trace(branch([1, 9], [0, 1], [0.0, -1.0]), trainable=False)
    r = episode_rollout(episode(judge, trace(branch([1, 2, 3], [0, 1, 1], [0.0, -0.5, -0.6]))), 0, "", "p")
    assert r.completion_ids == [2, 3]


@pytest.mark.parametrize("ep, kind", [
    (episode(trace(branch([1, 2], [0, 1], [0, -1.0]), branch([1, 3], [0, 1], [0, -1.0]))), "unsupported"),
    (episode(trace(branch([1, 2], [0, 1], [0, -1.0])), trace(branch([1, 3], [0, 1], [0, -1.0]))), "unsupported"),
    (episode(trace(branch([1, 2], [0, 0], [0, 0.0]))), "failed"),
    (episode(trace(ok=False, errors=[SimpleNamespace(type="HarnessError", message="exit 1\nlog")]), ok=False),
     "failed"),
])
def test_episodes_it_cannot_train_are_dropped_with_a_one_line_reason(ep, kind):
    with pytest.raises(DroppedEpisode) as e:
        episode_rollout(ep, 0, "", "p")
    assert e.value.kind == kind and "\n" not in str(e.value)


def test_scale_out_is_on_for_a_verifiers_package_only():
    from vfrl.config import RLConfig
    from vfrl.inference.server import config_argv

    assert is_verifiers_package("v1-reverse") and is_verifiers_package("v1_reverse")
    assert not is_verifiers_package("reverse-text") and not is_verifiers_package("no-such-env")
    argv = lambda env, **inf: config_argv(RLConfig.model_validate({"model": "m", "env": {"id": env}, "inference": inf}))
    assert "--enable-scale-out" in argv("v1-reverse")
    assert "--enable-scale-out" not in argv("reverse-text")
    assert "--enable-scale-out" in argv("reverse-text", enable_scale_out=True)
    assert "--enable-scale-out" not in argv("v1-reverse", enable_scale_out=False)


def test_vf_vllm_serves_generate_in_the_shape_verifiers_reads():
    """vLLM 0.32 writes `token_id` alone; verifiers' client needs `token: "token_id:N"`: vf-vllm's
    middleware adds it on /inference/v1/generate and leaves every other response as it is."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from vfrl.config import RLConfig
    from vfrl.inference.generate_compat import COMPAT_MIDDLEWARE, TokenIdPlaceholders
    from vfrl.inference.server import AUTH_MIDDLEWARE, config_argv

    entry = {"token_id": 31, "logprob": -0.5, "top_logprobs": [{"token_id": 31, "logprob": -0.5}]}
    vllm_reply = {"choices": [{"index": 0, "token_ids": [31], "logprobs": {"content": [entry]}}]}
    app = Starlette(routes=[Route("/inference/v1/generate", lambda r: JSONResponse(vllm_reply), methods=["POST"]),
                            Route("/v1/other", lambda r: JSONResponse(vllm_reply), methods=["POST"])])
    with TestClient(TokenIdPlaceholders(app)) as http:
        got = http.post("/inference/v1/generate").json()["choices"][0]["logprobs"]["content"][0]
        assert got["token"] == "token_id:31" and got["top_logprobs"][0]["token"] == "token_id:31"
        assert got["logprob"] == -0.5 and got["token_id"] == 31
        assert http.post("/v1/other").json() == vllm_reply
    argv = config_argv(RLConfig.model_validate({"model": "m", "env": {"id": "v1-reverse"}}))
    # vLLM runs the last --middleware first: the API key is checked before the rewrite
    assert argv[-4:] == ["--middleware", COMPAT_MIDDLEWARE, "--middleware", AUTH_MIDDLEWARE]
    assert COMPAT_MIDDLEWARE not in config_argv(RLConfig.model_validate({"model": "m", "env": {"id": "reverse-text"}}))


def test_missing_uv_is_one_line_before_anything_starts(monkeypatch):
    from vfrl.inference import scale_out
    from vfrl.launcher.plan import environment_problem

    monkeypatch.setattr(scale_out, "find_uv", lambda: None)
    problem = environment_problem("v1-reverse")
    assert problem and "uv" in problem and "\n" not in problem
    assert environment_problem("reverse-text") is None


def test_a_verifiers_package_without_verifiers_installed_is_one_line(monkeypatch):
    from vfrl.envs.loader import EnvironmentLoadError, load_environment

    monkeypatch.setitem(sys.modules, "verifiers", None)  # import verifiers fails, as when it is not installed
    monkeypatch.delitem(sys.modules, "v1_reverse", raising=False)
    with pytest.raises(EnvironmentLoadError, match=r"verifiers extra") as e:
        load_environment("v1-reverse")
    assert "\n" not in str(e.value)


# --- the package itself, in-process, against the fake generate route ---

@needs_v1
def test_missing_uv_at_load_is_one_line(monkeypatch):
    from vfrl.envs import verifiers_v1
    from vfrl.envs.loader import EnvironmentLoadError, load_environment

    monkeypatch.setattr(verifiers_v1, "find_uv", lambda: None)
    with pytest.raises(EnvironmentLoadError, match=r"uv is not installed"):
        load_environment("v1-reverse")


@needs_v1
@needs_uv
def test_orchestrator_samples_a_v1_package_through_the_generate_route(tiny_model):
    """The trainer's own Orchestrator, unchanged, on a verifiers 0.4 package: every Rollout's ids are
    exactly what was sent to and returned by /inference/v1/generate, with its mask, logprobs and reward."""
    from openai import AsyncOpenAI

    from fake_generate import FakeGenerate
    from vfrl.config import TrainerArgs
    from vfrl.envs.loader import load_environment
    from vfrl.envs.verifiers_v1 import V1Environment
    from vfrl.trainer.orchestrator import Orchestrator

    env = load_environment("v1-reverse")
    assert isinstance(env, V1Environment) and len(env.dataset) == 6
    assert env.dataset[1]["prompt"] == [{"role": "system", "content": "Reverse the text."},
                                       {"role": "user", "content": "hello"}]

    async def run():
        async with FakeGenerate(str(tiny_model), adapter="policy-2") as fake:
            client = AsyncOpenAI(base_url=fake.base_url, api_key="the-key")
            args = TrainerArgs(batch_size=4, rollouts_per_example=2, max_tokens=16, eval_strategy="no",
                               rollout_timeout=240)
            batch = await Orchestrator(env, client, args).generate(0, "policy-2", 2)
            await env.aclose()
            return batch, fake.requests

    batch, requests = asyncio.run(run())
    assert len(batch.rollouts) == 4 and batch.sizes() == [2, 2] and batch.metrics["rollouts_dropped"] == 0
    assert len(requests) == 4
    assert {r["auth"] for r in requests} == {"Bearer the-key"}
    assert {r["body"]["model"] for r in requests} == {"policy-2"}  # the adapter, chosen by model name
    seeds = sorted(r["body"]["sampling_params"]["seed"] for r in requests)
    assert seeds[0] + 1 == seeds[1] and seeds[2] + 1 == seeds[3]  # the group's seed, + j per sample
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    for r in batch.rollouts:
        word = env.dataset[r.example_id]["prompt"][-1]["content"]
        sent = next(q["body"] for q in requests if q["body"]["token_ids"] == r.prompt_ids)  # the ids verifiers sent
        assert tok.decode(r.prompt_ids).endswith("\n") and word in tok.decode(r.prompt_ids)
        assert r.completion_ids == tok.encode(word[::-1], add_special_tokens=False) + [tok.eos_token_id]
        assert r.completion_mask == [1] * len(r.completion_ids)
        n = len(r.prompt_ids)
        assert r.completion_logprobs == pytest.approx([-1 - (n + i) / 1000 for i in range(len(r.completion_ids))])
        assert r.reward == 1.0 and r.metrics == {"exact": 1.0, "reply_len": float(len(word))}
        assert r.completion == [{"role": "assistant", "content": word[::-1]}]
        assert sent["sampling_params"]["max_tokens"] == 16


@needs_v1
@needs_uv
def test_a_failing_episode_is_dropped_and_counted(tiny_model, monkeypatch):
    """A server that refuses every generate request: each episode fails, is dropped and counted, and a
    batch with nothing left stops in one line."""
    from openai import AsyncOpenAI

    from fake_generate import FakeGenerate
    from vfrl.config import TrainerArgs
    from vfrl.envs.loader import load_environment
    from vfrl.trainer.orchestrator import Orchestrator
    from vfrl.trainer.step_faults import BatchLost

    env = load_environment("v1-reverse")

    async def run():
        async with FakeGenerate(str(tiny_model), refuse=True) as fake:
            client = AsyncOpenAI(base_url=fake.base_url, api_key="k")
            args = TrainerArgs(batch_size=2, rollouts_per_example=2, max_tokens=8, eval_strategy="no")
            try:
                return await Orchestrator(env, client, args).generate(0, "policy-0", 0)
            finally:
                await env.aclose()

    with pytest.raises(BatchLost, match=r"all 2 rollouts were dropped: 2 failed \(verifiers episode failed") as e:
        asyncio.run(run())
    assert "\n" not in str(e.value)


# --- the real vLLM CPU server ---

@needs_v1
@needs_uv
@pytest.mark.e2e
def test_v1_package_samples_through_the_real_vllm_server(shared_vllm_server, tiny_model, tmp_path, monkeypatch):
    """The trainer's Orchestrator samples a verifiers package through /inference/v1/generate of the session's
    vf-vllm (scale-out on; that vf-rl turns it on by itself is test_vf_rl_trains_a_v1_package_two_steps's).
    verifiers renders the prompt on its side: its ids must be the server's own rendering, and the trainer's
    logprobs of the sampled tokens must match vLLM's."""
    import httpx
    import torch
    from openai import AsyncOpenAI
    from transformers import AutoModelForCausalLM

    from conftest import max_logprob_gap
    from vfrl.config import TrainerArgs
    from vfrl.envs.loader import load_environment
    from vfrl.trainer.orchestrator import Orchestrator

    monkeypatch.setenv("PYTHONPATH", str(PKGS))  # vf-eval finds the package
    base_url, key = shared_vllm_server.base_url, shared_vllm_server.api_key
    env = load_environment("v1-reverse")

    async def run():
        client = AsyncOpenAI(base_url=base_url, api_key=key)
        args = TrainerArgs(batch_size=4, rollouts_per_example=2, max_tokens=12, eval_strategy="no",
                           rollout_timeout=240)
        try:
            return await Orchestrator(env, client, args).generate(0, str(tiny_model), 0)
        finally:
            await env.aclose()

    batch = asyncio.run(run())
    # vf-eval runs the same package against the same server
    evaluated = subprocess.run([str(BIN / "vf-eval"), "v1-reverse", "-b", base_url, "-k", "V1_TEST_KEY", "-n", "2",
                                "-r", "1", "-t", "12", "-o", str(tmp_path / "eval")], capture_output=True, text=True,
                               timeout=300, env={**os.environ, "V1_TEST_KEY": key})
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "eval" / "results.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["prompt_ids"] and r["completion_ids"] for r in records)
    with httpx.Client(base_url=base_url.removesuffix("/v1"), headers={"Authorization": f"Bearer {key}"}) as http:
        rendered = {}
        for r in batch.rollouts:
            if r.example_id not in rendered:
                got = http.post("/tokenize", json={"model": str(tiny_model), "messages": r.prompt,
                                                   "add_generation_prompt": True})
                assert got.status_code == 200, got.text
                rendered[r.example_id] = got.json()["tokens"]
    assert len(batch.rollouts) == 4 and batch.metrics["rollouts_dropped"] == 0
    for r in batch.rollouts:
        assert r.prompt_ids == rendered[r.example_id]  # verifiers' rendering is the server's
        assert 0 < len(r.completion_ids) <= 12 and r.completion_mask == [1] * len(r.completion_ids)
        assert len(r.completion_logprobs) == len(r.completion_ids) and all(lp <= 0 for lp in r.completion_logprobs)
        assert r.reward in (0.0, 1.0) and set(r.metrics) == {"exact", "reply_len"}
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32).eval()
    assert max_logprob_gap(model, batch.rollouts) < 1e-4


@needs_v1
@needs_uv
@pytest.mark.e2e
def test_vf_rl_trains_a_v1_package_two_steps(tiny_model, tmp_path):
    """`vf-rl @ config` with `env.id` a verifiers 0.4 package: scale-out on by itself, two steps trained
    from its rollouts, exit code 0, no traceback (the environment's serving closes in its loop)."""
    import tomli_w
    import tomllib

    from conftest import write_config

    cfg = write_config(tmp_path / "cfg.toml", tiny_model, port=0, output_dir=tmp_path / "outputs", max_steps=2,
                       batch_size=8, rollouts_per_example=2, eval_strategy="no")
    config = tomllib.loads(cfg.read_text())
    config["env"]["id"] = "v1-reverse"
    cfg.write_text(tomli_w.dumps(config))
    socket_name = tmux_socket("v1", tmp_path)
    try:
        done = subprocess.run([str(BIN / "vf-rl"), "@", str(cfg), "--no-attach", "--tmux-socket", socket_name],
                              capture_output=True, text=True, cwd=tmp_path, timeout=600,
                              env={**os.environ, "PYTHONPATH": str(PKGS)})
    finally:
        subprocess.run(["tmux", "-L", socket_name, "kill-server"], capture_output=True)
    run_dir = tmp_path / "outputs" / "test"
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in (run_dir / "logs" / "trainer.log").read_text()
    assert "--enable-scale-out" in (run_dir / "logs" / "inference.log").read_text()
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2] and all(s["rollouts_dropped"] == 0 for s in steps)
    rollouts = [json.loads(line) for line in (run_dir / "rollouts" / "step_1.jsonl").read_text().splitlines()]
    assert len(rollouts) == 8 and set(rollouts[0]["metrics"]) == {"exact", "reply_len"}
