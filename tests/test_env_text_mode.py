"""Text mode: environments against an OpenAI-compatible server that is not vLLM (PlainOpenAI in
tests/fake_openai.py), token mode's clear error there, vf-eval's choice between the two modes, and
vf-eval in text mode against the real vLLM server."""

import asyncio
import json
import os
import statistics
import subprocess

import openai
import pytest
from conftest import BIN
from fake_openai import FakeOpenAI, PlainOpenAI
from test_env_alphabet_sort import names_so_far
from typer.testing import CliRunner

import vfrl
from vfrl.envs.cli.eval import app as eval_app
from vfrl.envs.sampling import MissingTokenIds, probe_token_ids


def last_user(prompt: str) -> str:
    return prompt.split("<|im_start|>user\n")[-1].split("<|im_end|>")[0]


def reverse(prompt: str) -> str:
    return last_user(prompt)[::-1]


def group(env, client, n=1, row=0, sampling=None, record_tokens=False):
    sampling = dict(sampling or {"max_tokens": 300})
    return asyncio.run(env.run_group(client, "m", row, n, sampling, asyncio.Semaphore(4), record_tokens=record_tokens))


def assert_text_only(client, rollouts):
    """No ids recorded, and every request was a plain chat request: no logprobs, no vLLM fields."""
    for r in rollouts:
        assert r.prompt_ids == r.completion_ids == r.completion_logprobs == r.completion_mask == r.turn_spans == []
        assert r.sequence_mode == "text" and r.error is None
    assert {kind for kind, _ in client.calls} == {"chat"}
    assert all(body["logprobs"] is None and body["extra_body"] is None for _, body in client.calls)


# ---- the three kinds of environment, text mode, on a server that refuses vLLM's fields ----

def test_single_turn_env_on_a_plain_server():
    env = vfrl.load_environment("reverse-text", num_train_examples=4, num_eval_examples=2)
    client = PlainOpenAI(reverse, strict=True)
    rollouts = group(env, client, n=2, sampling={"max_tokens": 300, "temperature": 0.5})
    assert_text_only(client, rollouts)
    question = env.dataset[0]["prompt"][-1]["content"]
    for r in rollouts:
        assert r.prompt == env.dataset[0]["prompt"] and r.answer == env.dataset[0]["answer"]
        assert r.completion == [{"role": "assistant", "content": question[::-1]}]
        assert r.reward == 1.0 and r.metrics["lcs_reward"] == 1.0 and not r.truncated
    assert all(body["temperature"] == 0.5 and body["max_tokens"] == 300 for _, body in client.calls)


def test_text_mode_sends_only_the_sampling_args_the_user_gave():
    env = vfrl.SingleTurnEnv(dataset=[{"question": "abc", "answer": "cba"}])
    client = PlainOpenAI(reverse)  # lenient: extra fields are accepted (and ignored)
    group(env, client, sampling={"max_tokens": 2, "top_k": 5})
    (_, body), = client.calls
    assert body["extra_body"] == {"top_k": 5} and body["logprobs"] is None


def test_multi_turn_env_on_a_plain_server():
    env = vfrl.load_environment("alphabet-sort", num_train_examples=20, num_eval_examples=5, num_turns=3)
    client = PlainOpenAI(lambda prompt: "\n".join(sorted(names_so_far(prompt))), strict=True)
    r, = group(env, client, row=0)
    assert_text_only(client, [r])
    rounds = env.dataset[0]["info"]["rounds"]
    assert [m["role"] for m in r.completion] == ["assistant", "user", "assistant", "user", "assistant"]
    assert r.completion[1]["content"] == "Add:\n" + "\n".join(rounds[1]) + "\nSort all again."
    assert r.completion[-1]["content"] == r.answer
    assert r.reward == 1.0 and r.metrics["exact_turns"] == 1.0
    # the conversation went to the server as text, turn by turn
    assert [len(body["messages"]) for _, body in client.calls] == [len(r.prompt) + k for k in (0, 2, 4)]


class Echo(vfrl.MultiTurnEnv):
    def env_response(self, messages, state):
        return [{"role": "user", "content": "again " * 5}]


def test_a_later_turn_that_no_longer_fits_ends_the_rollout_and_a_failing_first_request_raises():
    env = Echo(dataset=[{"question": "hello"}], max_turns=10)
    client = PlainOpenAI(lambda prompt: "hi", max_model_len=120)
    r, = group(env, client)
    assert r.truncated and "maximum context length" in r.error
    assert 1 < sum(m["role"] == "assistant" for m in r.completion) < 10
    with pytest.raises(openai.BadRequestError):
        group(env, PlainOpenAI(lambda prompt: "hi", max_model_len=5))


def test_tool_env_on_a_plain_server():
    pytest.importorskip("calculator")
    env = vfrl.load_environment("calculator", num_train_examples=10, num_eval_examples=2)
    row = env.dataset[0]
    expression = row["prompt"][-1]["content"].removeprefix("What is ").removesuffix("?")

    def call(expr):
        return "<tool_call>" + json.dumps({"name": "calculate", "arguments": {"expression": expr}}) + "</tool_call>"

    client = PlainOpenAI([call(expression), f"So it is \\boxed{{{row['answer']}}}."], strict=True)
    r, = group(env, client)
    assert_text_only(client, [r])
    assert r.completion[0]["tool_calls"][0]["function"]["name"] == "calculate"  # the server's native tool call
    assert r.completion[1] == {"role": "tool", "tool_call_id": "srv0", "content": row["answer"]}
    assert r.reward == 1.0 and r.metrics["tool_calls"] == 1.0
    assert all(body["tools"] == env.oai_tools for _, body in client.calls)

    client = PlainOpenAI([call("import os"), "\\boxed{0}"], strict=True)
    r, = group(env, client)
    assert r.completion[1]["content"].startswith("Error: ValueError") and r.metrics["tool_errors"] == 1.0


def test_env_group_routes_text_mode_to_its_envs():
    a = vfrl.SingleTurnEnv(dataset=[{"question": "abc"}], env_id="a")
    b = vfrl.SingleTurnEnv(dataset=[{"question": "xyz"}], env_id="b")
    client = PlainOpenAI(reverse, strict=True)
    rollouts = [group(vfrl.EnvGroup([a, b]), client, row=i)[0] for i in (0, 1)]
    assert_text_only(client, rollouts)
    assert [(r.task, r.completion[0]["content"]) for r in rollouts] == [("a", "cba"), ("b", "zyx")]


# ---- token mode (training) on such a server: a clear error ----

def test_token_mode_on_a_plain_server_is_a_clear_error():
    env = vfrl.load_environment("reverse-text", num_train_examples=4, num_eval_examples=2)
    with pytest.raises(MissingTokenIds, match=r"no `prompt_token_ids`.*return_token_ids"):
        group(env, PlainOpenAI(reverse), record_tokens=True)
    with pytest.raises(openai.BadRequestError, match="Unrecognized request argument supplied: return_token_ids"):
        group(env, PlainOpenAI(reverse, strict=True), record_tokens=True)


def test_probe_tells_vllm_from_other_servers():
    run = asyncio.run
    assert run(probe_token_ids(FakeOpenAI(reverse), "m")) is None
    refused = run(probe_token_ids(PlainOpenAI(reverse, strict=True), "m"))
    assert "HTTP 400" in refused and "return_token_ids" in refused
    assert run(probe_token_ids(PlainOpenAI(reverse), "m")) == "its replies carry no prompt_token_ids"


# ---- vf-eval's choice, against fakes ----

def vf_eval(monkeypatch, tmp_path, client, *flags):
    """vf-eval reverse-text in this process, its AsyncOpenAI replaced by `client`."""
    monkeypatch.setattr(openai, "AsyncOpenAI", lambda **kwargs: client)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    result = CliRunner().invoke(eval_app, ["reverse-text", "-a", '{"num_eval_examples": 3}', "-n", "2", "-r", "2",
                                           "-t", "100", "-o", str(out), *flags])
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()] if out.exists() else []
    metadata = json.loads((out / "metadata.json").read_text()) if (out / "metadata.json").exists() else None
    return result, lines, metadata


@pytest.mark.parametrize("strict, why", [(True, "Unrecognized request argument"), (False, "no prompt_token_ids")])
def test_vf_eval_auto_falls_back_to_text_on_a_plain_server(monkeypatch, tmp_path, strict, why):
    client = PlainOpenAI(reverse, strict=strict)
    result, lines, metadata = vf_eval(monkeypatch, tmp_path, client)
    assert result.exit_code == 0, result.output
    notices = [x for x in result.stderr.splitlines() if "evaluating on text" in x]
    assert len(notices) == 1 and why in notices[0]
    assert len(lines) == 4 and all(x["reward"] == 1.0 and x["completion_ids"] == [] for x in lines)
    assert (metadata["token_ids"] is False and metadata["completion_tokens"] is None
            and metadata["reward"]["mean"] == 1.0)
    probe, *rollout_calls = [body for _, body in client.calls]
    assert probe["extra_body"] == {"return_token_ids": True} and len(rollout_calls) == 4
    assert all(body["extra_body"] is None and body["logprobs"] is None for body in rollout_calls)


def test_vf_eval_auto_keeps_token_ids_on_vllm(monkeypatch, tmp_path):
    result, lines, metadata = vf_eval(monkeypatch, tmp_path, FakeOpenAI(reverse))
    assert result.exit_code == 0, result.output
    assert "evaluating on text" not in result.stderr
    assert len(lines) == 4 and all(x["completion_ids"] and x["sequence_mode"] == "chat" for x in lines)
    assert metadata["token_ids"] is True and metadata["completion_tokens"] > 0


def test_vf_eval_token_ids_on_and_off(monkeypatch, tmp_path):
    result, lines, _ = vf_eval(monkeypatch, tmp_path, PlainOpenAI(reverse), "--token-ids", "on")
    errors = [x for x in result.stderr.splitlines() if x.startswith("vf-eval: error:")]
    assert result.exit_code == 1 and not isinstance(result.exception, MissingTokenIds)
    assert len(errors) == 1 and "--token-ids on" in errors[0] and "prompt_token_ids" in errors[0], result.stderr
    assert lines == [] and not (tmp_path / "out").exists()  # nothing half-written left behind

    client = PlainOpenAI(reverse, strict=True)
    result, lines, metadata = vf_eval(monkeypatch, tmp_path, client, "--token-ids", "off")
    assert result.exit_code == 0 and "evaluating on text" not in result.stderr  # no probe, no notice
    assert len(client.calls) == 4 and metadata["token_ids"] is False and len(lines) == 4


# ---- vf-eval in text mode against the real vLLM server ----

@pytest.mark.e2e
@pytest.mark.parametrize("env_id", ["reverse-text", "alphabet-sort"])
def test_vf_eval_text_mode_against_real_vllm(env_id, shared_vllm_server, tmp_path):
    srv = shared_vllm_server
    out = tmp_path / "eval"
    done = subprocess.run(
        [str(BIN / "vf-eval"), env_id, "-m", srv.model, "-b", srv.base_url, "-k", "VFRL_TEST_KEY", "-n", "2",
         "-r", "2", "-t", "24", "-T", "1.0", "-S", '{"seed": 0}', "--token-ids", "off", "-o", str(out)],
        env={**os.environ, "VFRL_TEST_KEY": srv.api_key}, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\nserver log: {srv.log}"
    assert "reward mean" in done.stdout and "completion tokens" not in done.stdout

    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(line["example_id"] for line in lines) == [0, 0, 1, 1]
    for line in lines:
        assert line["prompt"] and line["completion"][0]["role"] == "assistant" and line["error"] is None
        assert (line["prompt_ids"] == line["completion_ids"] == line["completion_logprobs"] == line["completion_mask"]
                == [])
        assert line["sequence_mode"] == "text" and isinstance(line["reward"], float) and line["metrics"]
    if env_id == "alphabet-sort":  # the environment's messages went back to the server as text
        assert any(m["role"] == "user" for line in lines for m in line["completion"])
    metadata = json.loads((out / "metadata.json").read_text())
    assert metadata["token_ids"] is False and metadata["completion_tokens"] is None
    assert metadata["reward"]["mean"] == pytest.approx(statistics.fmean(line["reward"] for line in lines))
