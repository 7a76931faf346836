"""message_type="completion" environments (a model without a chat template): the prompt is one text, sent to
/v1/completions; the completion is the text after it, a str for the rubric, the parser, the console, the rollout
files and vf-eval; the training sequence holds vLLM's own ids, with mask 0 on the environment's text. Against the
fake vLLM server (tests/fake_openai.py), then once against the real one with the classic package
tests/classic_pkgs/classic_completion.py."""

import asyncio
import io
import json
import sys
from pathlib import Path

import openai
import pytest
from fake_openai import IM_END, FakeOpenAI, PlainOpenAI, encode, logprob_at
from typer.testing import CliRunner

import vfrl as vf
from vfrl.envs.cli.eval import app as eval_app
from vfrl.envs.sampling import probe_token_ids
from vfrl.trainer.console import TrainerConsole
from vfrl.trainer.run_log import write_rollouts

sys.path.insert(0, str(Path(__file__).parent / "classic_pkgs"))

SAMPLING = {"max_tokens": 50}


def run(coro):
    return asyncio.run(coro)


def group(env, client, n=1, row=0, sampling=SAMPLING, record_tokens=True):
    return run(env.run_group(client, "m", row, n, dict(sampling), asyncio.Semaphore(8), record_tokens=record_tokens))


class Again(vf.MultiTurnEnv):
    """Asks once more after each reply, as text."""

    def env_response(self, messages, state):
        assert isinstance(messages, str) and messages.endswith(state["completion"])
        return "\nAgain:"


# ---- the prompt text ----

def test_the_prompt_is_the_text_column_or_the_chat_prompt_joined_by_blank_lines():
    env = vf.SingleTurnEnv(dataset=[{"prompt": "Q: 1+1\nA:", "answer": "2"}], message_type="completion")
    assert env.dataset[0]["prompt"] == "Q: 1+1\nA:" and env.prompt_of(env.dataset[0]) == "Q: 1+1\nA:"

    shot = [{"role": "user", "content": "1+1"}, {"role": "assistant", "content": "2"}]
    env = vf.SingleTurnEnv(dataset=[{"question": "2+2"}, {"prompt": [{"role": "user", "content": "3+3"}]}],
                           system_prompt="Add.", few_shot=shot, message_type="completion")
    assert [r["prompt"] for r in env.dataset] == ["Add.\n\n1+1\n\n2\n\n2+2", "Add.\n\n3+3"]


def test_message_types_that_do_not_fit_are_one_line():
    with pytest.raises(ValueError, match=r"^message_type must be 'chat' or 'completion' .*got 'text'$"):
        vf.SingleTurnEnv(dataset=[{"question": "q"}], message_type="text")
    with pytest.raises(ValueError, match=r"^SingleTurnEnv: a row's prompt is text \('Q:'\), which a chat environment "
                                         r"cannot send; give it message_type='completion', or chat messages$"):
        vf.SingleTurnEnv(dataset=[{"prompt": "Q:"}]).dataset
    with pytest.raises(ValueError, match=r"^ToolEnv: tools need chat messages; message_type='completion' has none$"):
        vf.ToolEnv(dataset=[{"prompt": "Q:"}], tools=[len], message_type="completion")


# ---- requests, text and tokens ----

def test_a_single_turn_goes_to_v1_completions_and_the_rubric_reads_a_str():
    seen = {}

    def reward(prompt, completion, answer, state, parser) -> float:
        seen.update(prompt=prompt, completion=completion, trajectory=state["trajectory"])
        return float(parser.parse_answer(completion) == answer)

    parser = vf.XMLParser(["answer"])
    rubric = vf.Rubric(funcs=[reward, parser.get_format_reward_func()], parser=parser)
    env = vf.SingleTurnEnv(dataset=[{"prompt": "Q: 1+1\n", "answer": "2"}], message_type="completion",
                           parser=parser, rubric=rubric)
    client = FakeOpenAI(lambda text: "<answer>2</answer>" if text == "Q: 1+1\n" else "?")
    r, = group(env, client)
    assert (r.prompt, r.completion, r.reward) == ("Q: 1+1\n", "<answer>2</answer>", 2.0)
    assert r.metrics["format_reward_func"] == 1.0
    assert seen == {"prompt": "Q: 1+1\n", "completion": "<answer>2</answer>",
                    "trajectory": [{"prompt": "Q: 1+1\n", "completion": "<answer>2</answer>", "is_truncated": False}]}
    (kind, request), = client.calls
    assert kind == "completions" and request["prompt"] == "Q: 1+1\n"  # the text itself: vLLM tokenizes it
    reply = encode("<answer>2</answer>") + [IM_END]
    assert (r.prompt_ids, r.completion_ids, r.completion_mask) == (encode("Q: 1+1\n"), reply, [1] * len(reply))
    assert r.completion_logprobs == [logprob_at(len(r.prompt_ids) + i) for i in range(len(reply))]
    assert r.sequence_mode == "completion" and r.turn_spans == [(0, len(reply))]


def test_a_groups_first_turns_are_one_completions_request_with_n():
    env = vf.SingleTurnEnv(dataset=[{"prompt": "P"}], message_type="completion")
    client = FakeOpenAI(["a", "bb", "ccc"])
    rollouts = group(env, client, n=3, sampling={"max_tokens": 5, "seed": 10})
    (kind, request), = client.calls
    assert kind == "completions" and request["n"] == 3 and request["seed"] == 10
    assert sorted(r.completion for r in rollouts) == ["a", "bb", "ccc"]
    assert all(r.completion_ids == encode(r.completion) + [IM_END] for r in rollouts)


def test_multi_turn_text_is_appended_and_gets_mask_0_from_token_ids():
    env = Again(dataset=[{"prompt": "Count:"}], message_type="completion", max_turns=3)
    client = FakeOpenAI([" 1", " 2", " 3"], eos=False)  # each reply ends on a stop string, as base models' do
    r, = group(env, client)
    assert r.completion == " 1\nAgain: 2\nAgain: 3" and r.sequence_mode == "completion" and r.error is None
    env_ids = encode("\nAgain:")
    assert r.prompt_ids == encode("Count:")
    assert r.completion_ids == encode(" 1") + env_ids + encode(" 2") + env_ids + encode(" 3")
    assert r.completion_mask == [1, 1] + [0] * 7 + [1, 1] + [0] * 7 + [1, 1]
    assert [lp for lp, m in zip(r.completion_logprobs, r.completion_mask) if m == 0] == [0.0] * 14
    assert r.turn_spans == [(0, 2), (9, 11), (18, 20)]
    # turn k > 0: the environment's text alone through /tokenize, then the sequence so far as token ids
    kinds = [kind for kind, _ in client.calls]
    assert kinds == ["completions", "tokenize", "completions", "tokenize", "completions"]
    assert client.calls[1][1] == {"model": "m", "prompt": "\nAgain:", "add_special_tokens": False}
    assert client.calls[2][1]["prompt"] == r.prompt_ids + encode(" 1") + env_ids


def test_env_response_of_the_wrong_type_is_one_line():
    class ReturnsMessages(vf.MultiTurnEnv):
        def env_response(self, messages, state):
            return [{"role": "user", "content": "again"}]

    class ReturnsText(vf.MultiTurnEnv):
        def env_response(self, messages, state):
            return "again"

    with pytest.raises(TypeError, match=r"^ReturnsMessages.env_response returned list; a message_type='completion' "
                                        r"environment returns the text to append \(a str\)$"):
        group(ReturnsMessages(dataset=[{"prompt": "P"}], message_type="completion", max_turns=2), FakeOpenAI(["a"]))
    with pytest.raises(TypeError, match=r"^ReturnsText.env_response returned str; a message_type='chat' environment "
                                        r"returns a list of messages$"):
        group(ReturnsText(dataset=[{"question": "q"}], max_turns=2), FakeOpenAI(["a"]))


def test_text_mode_sends_the_whole_text_each_turn_to_a_plain_server():
    env = Again(dataset=[{"prompt": "Count:"}], message_type="completion", max_turns=2)
    client = PlainOpenAI([" 1", " 2"], strict=True)
    r, = group(env, client, record_tokens=False)
    assert r.completion == " 1\nAgain: 2" and r.sequence_mode == "text" and r.completion_ids == []
    assert [(kind, body["prompt"], body["extra_body"], body["logprobs"]) for kind, body in client.calls] == [
        ("completions", "Count:", None, None), ("completions", "Count: 1\nAgain:", None, None)]


def test_probe_asks_the_completions_route():
    assert run(probe_token_ids(FakeOpenAI(["x"]), "m", completion=True)) is None
    assert "HTTP 400" in run(probe_token_ids(PlainOpenAI(["x"], strict=True), "m", completion=True))
    assert run(probe_token_ids(PlainOpenAI(["x"]), "m", completion=True)) == "its replies carry no prompt_token_ids"


# ---- the classic package: a str completion wherever rollouts are shown ----

def test_classic_package_scores_its_str_completion_and_every_display_prints_it(monkeypatch, tmp_path):
    env = vf.load_environment("classic_completion")
    # reverses the last user turn of the text; vf-eval's probe ("Hi") gets "iH"
    client = FakeOpenAI(lambda text: text.rsplit("user\n", 1)[-1].split("<|im_end|>")[0][::-1])
    r, = group(env, client, row=2)
    assert r.prompt == "<|im_start|>system\nReverse the text.<|im_end|>\n<|im_start|>user\nstone<|im_end|>\n" \
                       "<|im_start|>assistant\n"
    assert r.completion == "enots\n<|im_start|>user\nriver<|im_end|>\n<|im_start|>assistant\nrevir"
    assert r.reward == 1.0 and r.metrics["last_reply_reversed"] == 1.0 and not r.reward_errors
    # the reply's <|im_end|> is in the sequence, not in the text; the environment's turn follows it with mask 0
    env_text = "\n<|im_start|>user\nriver<|im_end|>\n<|im_start|>assistant\n"
    assert r.completion_ids == encode("enots") + [IM_END] + encode(env_text) + encode("revir") + [IM_END]

    out = io.StringIO()
    monkeypatch.setenv("COLUMNS", "4000")
    TrainerConsole(out).completions(1, [r], limit=1)
    assert repr(r.completion) in out.getvalue()
    write_rollouts(tmp_path / "step_1.jsonl", [r])
    assert json.loads((tmp_path / "step_1.jsonl").read_text())["completion"] == r.completion

    monkeypatch.setattr(openai, "AsyncOpenAI", lambda **kwargs: client)
    monkeypatch.chdir(tmp_path)
    before = len(client.calls)
    result = CliRunner().invoke(eval_app, ["classic_completion", "-n", "2", "-r", "2", "-o", str(tmp_path / "eval")])
    assert result.exit_code == 0, result.output
    assert client.calls[before] == ("completions", {"prompt": "Hi"})  # vf-eval's probe: the completions route
    lines = [json.loads(x) for x in (tmp_path / "eval" / "results.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and all(isinstance(x["completion"], str) and x["reward"] == 1.0 for x in lines)
    assert json.loads((tmp_path / "eval" / "metadata.json").read_text())["token_ids"] is True


# ---- the real vLLM server ----

@pytest.mark.e2e
def test_classic_completion_package_on_real_vllm_trains_on_vllms_ids(shared_vllm_server, tiny_model):
    """classic_completion sampled by the trainer's Orchestrator from the session's vf-vllm (the tiny model): the
    prompt ids are vLLM's tokens of the prompt text, each environment turn is the server's tokens of its text with
    mask 0 between two replies, and the trainer's logprobs of every sampled token are vLLM's within 1e-4. A group's
    one request with `n` gives sample j what a request of its own with seed + j gives."""
    import httpx
    import torch
    from transformers import AutoModelForCausalLM

    from conftest import max_logprob_gap, served_batch

    srv = shared_vllm_server
    env = vf.load_environment("classic_completion")
    turn = sys.modules["classic_completion"].turn
    batch = served_batch(env, srv.base_url, srv.api_key, srv.model, 0, max_tokens=24)

    def server_ids(text: str, special: bool) -> list[int]:
        resp = httpx.post(f"{srv.base_url.removesuffix('/v1')}/tokenize",
                          headers={"Authorization": f"Bearer {srv.api_key}"},
                          json={"model": srv.model, "prompt": text, "add_special_tokens": special})
        return resp.json()["tokens"]

    assert len(batch.rollouts) == 4 and batch.metrics["rollouts_dropped"] == 0
    for r in batch.rollouts:
        assert isinstance(r.prompt, str) and isinstance(r.completion, str) and r.sequence_mode == "completion"
        assert r.prompt_ids == server_ids(r.prompt, special=True)
        assert len(r.completion_ids) == len(r.completion_mask) == len(r.completion_logprobs)
        if len(r.turn_spans) == 2:  # the first reply ended on its own (one cut at max_tokens ends the rollout)
            (a, b), (c, _) = r.turn_spans
            env_text = "\n" + turn(env.dataset[r.example_id]["info"]["words"][1])
            assert r.completion_ids[b:c] == server_ids(env_text, special=False)
            assert r.completion_mask[:c] == [1] * (b - a) + [0] * (c - b) and env_text in r.completion
    assert sum(len(r.turn_spans) == 2 for r in batch.rollouts) >= 2, [r.completion for r in batch.rollouts]
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()
    assert max_logprob_gap(model, batch.rollouts) < 1e-4

    async def group_and_alone():
        client = openai.AsyncOpenAI(base_url=srv.base_url, api_key=srv.api_key)
        sampling = {"max_tokens": 8, "temperature": 1.0, "seed": 3}
        rollouts = await env.run_group(client, srv.model, 0, 2, sampling, asyncio.Semaphore(2))
        alone = await client.completions.create(model=srv.model, prompt=env.dataset[0]["prompt"], max_tokens=8,
                                                temperature=1.0, seed=4, logprobs=0,
                                                extra_body={"return_token_ids": True})
        return rollouts, alone.choices[0]

    (_, second), alone = run(group_and_alone())
    end = second.turn_spans[0][1]
    assert second.completion_ids[:end] == alone.token_ids
    assert second.completion_logprobs[:end] == pytest.approx(alone.logprobs.token_logprobs, abs=1e-6)
