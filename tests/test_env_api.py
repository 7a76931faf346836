"""The verifiers-style environment API against a fake vLLM server (tests/fake_openai.py)."""

import asyncio
from types import SimpleNamespace

import pytest
from fake_openai import CHATML, IM_END, STRIPS_PAST_THINK, FakeOpenAI, PlainOpenAI, decode, encode, logprob_at

import vfrl
from vfrl.envs.rubric import Rubric

SAMPLING = {"temperature": 1.0, "max_tokens": 200}


def run(coro):
    return asyncio.run(coro)


def rollout(env, client, row=0, sampling=SAMPLING):
    return run(env.rollout_with_state(client, "m", env.dataset[row], row, dict(sampling)))


def scored(env, client, n=1, row=0):
    return run(env.run_group(client, "m", row, n, dict(SAMPLING), asyncio.Semaphore(8)))


# ---- datasets ----

def test_question_rows_get_system_prompt_and_few_shot():
    shot = [{"role": "user", "content": "1+1"}, {"role": "assistant", "content": "2"}]
    env = vfrl.SingleTurnEnv(dataset=[{"question": "2+2", "answer": "4"}], system_prompt="Add.", few_shot=shot)
    row = env.dataset[0]
    assert row["prompt"] == [{"role": "system", "content": "Add."}, *shot, {"role": "user", "content": "2+2"}]
    assert (row["answer"], row["info"], row["task"], row["example_id"]) == ("4", {}, "default", 0)


def test_chat_prompt_rows_are_kept_and_eval_dataset_is_separate():
    prompt = [{"role": "user", "content": "hi"}]
    env = vfrl.SingleTurnEnv(dataset=[{"prompt": prompt, "info": {"k": 1}, "task": "t", "example_id": 7}],
                             eval_dataset=[{"question": "e"}], system_prompt="first, as the prompt has none")
    assert env.dataset[0]["prompt"] == [{"role": "system", "content": "first, as the prompt has none"}, *prompt]
    assert env.dataset[0]["info"] == {"k": 1}
    assert env.dataset[0]["example_id"] == 7
    assert env.rows(eval=True)[0]["prompt"][-1]["content"] == "e"


def test_hf_dataset_like_objects_are_accepted():
    class FakeDataset:  # what matters of datasets.Dataset: to_list()
        def to_list(self):
            return [{"question": "q", "answer": "a"}]

    assert vfrl.SingleTurnEnv(dataset=FakeDataset()).dataset[0]["answer"] == "a"


def test_row_without_question_or_prompt_names_the_row():
    with pytest.raises(ValueError, match="dataset row 1 has neither 'question' nor 'prompt'"):
        vfrl.SingleTurnEnv(dataset=[{"question": "ok"}, {"text": "no"}])


# ---- rubric ----

def test_reward_functions_get_only_the_arguments_they_name_sync_or_async():
    seen = {}

    def exact(completion, answer):
        seen["exact"] = (completion, answer)
        return float(completion[-1]["content"] == answer)

    async def uses_info(info, task):
        seen["async"] = (info, task)
        return info["bonus"]

    def everything(**kwargs):
        seen["all"] = sorted(kwargs)
        return 0.0

    rubric = Rubric([exact, uses_info, everything], weights=[1.0, 0.5, 1.0])
    reward, metrics = run(rubric.score(prompt=[], completion=[{"role": "assistant", "content": "x"}], answer="x",
                                       state={}, task="t", info={"bonus": 0.4}))
    assert reward == pytest.approx(1.0 + 0.5 * 0.4)
    assert metrics == {"exact": 1.0, "uses_info": 0.4, "everything": 0.0, "reward_errors": 0.0}
    assert seen["async"] == ({"bonus": 0.4}, "t")
    assert seen["all"] == ["answer", "completion", "info", "parser", "prompt", "state", "task"]


def test_a_raising_reward_function_scores_zero_is_counted_and_the_rest_keep_their_weighted_scores():
    def broken(completion):
        raise KeyError("oops")

    rubric = Rubric([broken, lambda answer: 1.0], weights=[1.0, 2.0])
    state = {}
    reward, metrics = run(rubric.score(completion=[], answer="a", state=state))
    assert reward == 2.0  # 1 x 0 + 2 x 1, as verifiers' Rubric sums it
    assert metrics["broken"] == 0.0 and metrics["<lambda>"] == 1.0 and metrics["reward_errors"] == 1.0
    assert state["reward_errors"] == {"broken": "raised KeyError: 'oops'"}


def test_rubric_group_sums_rewards_and_merges_metrics():
    group = vfrl.RubricGroup([Rubric([lambda: 1.0]), Rubric([lambda answer: 0.25], weights=[2.0])])
    reward, metrics = run(group.score(answer="a"))
    assert reward == 1.5 and metrics["<lambda>"] == 1.25 and metrics["reward_errors"] == 0.0


class FakeJudge:
    def __init__(self, verdict):
        self.verdict, self.requests = verdict, []
        self.chat = type("C", (), {"completions": self})()

    async def create(self, model, messages, **kwargs):
        self.requests.append((model, messages[0]["content"]))
        return type("R", (), {"choices": [type("Ch", (), {"message": type("M", (), {"content": self.verdict})()})()]})()


@pytest.mark.parametrize("verdict,max_score,expected", [
    ("Yes, it is correct.", 1.0, 1.0), ("no", 1.0, 0.0), ("Score: 7", 10.0, 0.7), ("12", 10.0, 1.0), ("???", 1.0, 0.0),
])
def test_judge_rubric_asks_the_judge_once_and_parses_the_verdict(verdict, max_score, expected):
    judge = FakeJudge(verdict)
    rubric = vfrl.JudgeRubric(judge_client=judge, judge_model="judge-m", max_score=max_score)
    state = {}
    prompt = [{"role": "user", "content": "capital of France?"}]
    completion = [{"role": "assistant", "content": "Paris"}]
    reward, metrics = run(rubric.score(prompt=prompt, completion=completion, answer="Paris", state=state))
    assert reward == pytest.approx(expected) and metrics["judge_reward_func"] == pytest.approx(expected)
    run(rubric.judge(prompt, completion, "Paris", state))  # cached in state: no second request
    assert len(judge.requests) == 1
    model, text = judge.requests[0]
    assert model == "judge-m" and "capital of France?" in text and "Paris" in text


# ---- parsers ----

def test_xml_parser_fields_answer_and_format_reward():
    parser = vfrl.XMLParser(["think", ("answer", "final")])
    text = "<think>\nhmm\n</think>\n<final>42</final>"
    parsed = parser.parse(text)
    assert parsed.think == "hmm" and parsed.answer == "42"
    completion = [{"role": "assistant", "content": text}, {"role": "user", "content": "again"},
                  {"role": "assistant", "content": "no tags"}]
    assert parser.parse_answer(completion) == "42"  # latest message that has an answer
    fmt = parser.get_format_reward_func()
    assert fmt(completion[:1]) == 1.0 and fmt(completion) == 0.5
    assert parser.format(think="a", answer="b") == "<think>\na\n</think>\n<answer>\nb\n</answer>"


def test_think_parser_reads_after_think_and_checks_format():
    parser = vfrl.ThinkParser(extract_fn=vfrl.extract_boxed_answer)
    good = [{"role": "assistant", "content": "<think>2+2</think> so \\boxed{4}"}]
    assert parser.parse_answer(good) == "4"
    fmt = parser.get_format_reward_func()
    assert fmt(good) == 1.0 and fmt([{"role": "assistant", "content": "4"}]) == 0.0


# ---- single turn ----

def test_single_turn_records_vllm_token_ids_and_logprobs():
    env = vfrl.SingleTurnEnv(dataset=[{"question": "abc", "answer": "cba"}], system_prompt="Reverse.",
                             rubric=Rubric([lambda completion, answer: float(completion[-1]["content"] == answer)]))
    client = FakeOpenAI(["cba"])
    (r,) = scored(env, client)
    assert r.prompt_ids == encode(CHATML_RENDER(env.dataset[0]["prompt"]))
    assert r.completion_ids == encode("cba") + [IM_END] and r.completion_mask == [1, 1, 1, 1]
    assert r.completion_logprobs == [logprob_at(len(r.prompt_ids) + i) for i in range(4)]
    assert r.reward == 1.0 and r.turn_spans == [(0, 4)] and not r.truncated


def CHATML_RENDER(messages, gen=True):
    return FakeOpenAI([], template=CHATML).render(messages, gen)


def test_max_tokens_cut_marks_rollout_truncated():
    env = vfrl.SingleTurnEnv(dataset=[{"question": "q"}])
    r, state = rollout(env, FakeOpenAI(["a long reply"]), sampling={"max_tokens": 3})
    assert r.truncated and state["truncated"] and r.completion_ids == encode("a l")


# ---- multi turn ----

class Echo(vfrl.MultiTurnEnv):
    """Asks `rounds` follow-up questions, then stops."""

    def setup_state(self, state):
        state["rounds"] = state["info"].get("rounds", 2)
        return state

    async def is_completed(self, messages, state):
        return state["turn"] > state["rounds"]

    def env_response(self, messages, state):
        return [{"role": "user", "content": f"more {state['turn']}"}]


def check_sequence(r, full_text_ids):
    """The rollout's sequence is exactly `full_text_ids`; mask 1 and real logprobs only on model turns."""
    assert r.prompt_ids + r.completion_ids == full_text_ids
    assert len(r.completion_ids) == len(r.completion_mask) == len(r.completion_logprobs)
    model_positions = {i for a, b in r.turn_spans for i in range(a, b)}
    for i, (m, lp) in enumerate(zip(r.completion_mask, r.completion_logprobs)):
        if i in model_positions:
            assert m == 1 and lp == logprob_at(len(r.prompt_ids) + i)
        else:
            assert m == 0 and lp == 0.0


def test_multi_turn_sequence_masks_environment_tokens():
    env = Echo(dataset=[{"question": "start", "info": {"rounds": 2}}], max_turns=10)
    client = FakeOpenAI(["one", "two", "three"])
    r, state = rollout(env, client)
    assert state["turn"] == 3 and [m["content"] for m in r.completion] == ["one", "more 1", "two", "more 2", "three"]
    expected = encode(CHATML_RENDER([{"role": "user", "content": "start"}, *r.completion], gen=False))
    # the rendered text ends with "<|im_end|>\n" after the last reply; the sampled sequence stops at <|im_end|>
    check_sequence(r, expected[:-1])
    env_tokens = [t for t, m in zip(r.completion_ids, r.completion_mask) if m == 0]
    assert decode(env_tokens) == ("\n<|im_start|>user\nmore 1<|im_end|>\n<|im_start|>assistant\n"
                                  "\n<|im_start|>user\nmore 2<|im_end|>\n<|im_start|>assistant\n")
    assert r.sequence_mode == "chat" and client.count("chat") == 3 and client.count("completions") == 0


def test_max_turns_stops_the_conversation():
    env = Echo(dataset=[{"question": "s", "info": {"rounds": 99}}], max_turns=2)
    r, state = rollout(env, FakeOpenAI(["a", "b", "c"]))
    assert state["turn"] == 2 and len(r.turn_spans) == 2


def test_template_that_rewrites_history_falls_back_to_token_ids():
    """Qwen3-like template: past <think> is dropped, so vLLM's turn-2 prompt does not extend the
    sampled sequence. The sample is discarded; the turn goes through /v1/completions with our ids."""
    env = Echo(dataset=[{"question": "start", "info": {"rounds": 1}}])
    client = FakeOpenAI(["<think>secret</think>one", "<think>more</think>two"], template=STRIPS_PAST_THINK)
    client.policy = lambda prompt: "<think>x</think>" + str(prompt.count("<think>"))
    r, state = rollout(env, client)
    # the second reply saw the first one's think block: the model's context kept the sampled tokens
    assert [m["content"] for m in r.completion] == ["<think>x</think>0", "more 1", "<think>x</think>1"]
    full = r.prompt_ids + r.completion_ids
    assert decode(full) == ("<|im_start|>user\nstart<|im_end|>\n<|im_start|>assistant\n<think>x</think>0<|im_end|>"
                            "\n<|im_start|>user\nmore 1<|im_end|>\n<|im_start|>assistant\n<think>x</think>1<|im_end|>")
    check_sequence(r, full)
    (_, request), = [c for c in client.calls if c[0] == "completions"]
    assert request["prompt"] == full[: len(r.prompt_ids) + r.turn_spans[1][0]]
    assert r.sequence_mode == "tokens" and client.count("chat") == 2  # turn 0 + the discarded turn-1 sample
    # the env remembers: the next rollout sends later turns as token ids without trying chat first
    r2, _ = rollout(env, client)
    assert r2.sequence_mode == "tokens" and client.count("chat") == 3 and client.count("completions") == 2
    check_sequence(r2, r2.prompt_ids + r2.completion_ids)


def test_reply_without_end_of_turn_token_ends_the_rollout_on_the_token_path():
    env = Echo(dataset=[{"question": "s", "info": {"rounds": 2}}])
    env.sampler_flags["template_rewrites_history"] = True
    r, state = rollout(env, FakeOpenAI(["a", "b", "c"], eos=False))
    assert r.truncated and "end-of-turn token" in r.error and state["turn"] == 1


def test_context_overflow_on_a_later_turn_ends_the_rollout_truncated():
    env = Echo(dataset=[{"question": "s", "info": {"rounds": 5}}])
    client = FakeOpenAI(["a" * 20] * 5, max_model_len=60)
    r, state = rollout(env, client)
    assert r.truncated and "maximum context length" in r.error and state["turn"] == 1


def test_first_turn_errors_are_raised():
    env = Echo(dataset=[{"question": "x" * 100}])
    with pytest.raises(Exception, match="maximum context length"):
        rollout(env, FakeOpenAI(["a"], max_model_len=10))


def test_rollouts_respect_the_concurrency_limit():
    env = vfrl.SingleTurnEnv(dataset=[{"question": str(i)} for i in range(6)])
    client = FakeOpenAI(lambda p: "ok", delay=0.02)
    rollouts = run(env.evaluate(client, "m", num_examples=6, rollouts_per_example=1, max_concurrent=3))
    assert len(rollouts) == 6 and client.max_in_flight == 3
    assert [r.example_id for r in rollouts] == [0, 1, 2, 3, 4, 5]
    # groups: one request per example (its first turns), still at most 3 rollouts, so 3 requests, at once
    client = FakeOpenAI(lambda p: "ok", delay=0.02)
    rollouts = run(env.evaluate(client, "m", num_examples=6, rollouts_per_example=2, max_concurrent=3))
    assert [r.example_id for r in rollouts] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert client.count("chat") == 6 and client.max_in_flight <= 3


# ---- one request per group (group_request.py) ----

def test_a_groups_first_turns_are_one_request_with_n_and_sample_j_is_rollout_j():
    env = vfrl.SingleTurnEnv(dataset=[{"question": "abc"}])
    client = FakeOpenAI(["r0", "r1", "r2", "r3"])
    rollouts = run(env.run_group(client, "m", 0, 4, {"max_tokens": 9, "seed": 10}, asyncio.Semaphore(8)))
    ((kind, request),) = client.calls
    assert kind == "chat" and request["n"] == 4 and request["seed"] == 10  # vLLM: sample j uses seed 10 + j
    assert [r.completion[-1]["content"] for r in rollouts] == ["r0", "r1", "r2", "r3"]
    assert all(r.completion_ids == encode(f"r{j}") + [IM_END] and r.completion_mask == [1] * 3
               for j, r in enumerate(rollouts))
    assert len({tuple(r.prompt_ids) for r in rollouts}) == 1


def test_later_turns_of_a_group_are_sent_per_rollout_with_their_own_seed():
    env = Echo(dataset=[{"question": "q", "info": {"rounds": 1}}])
    client = FakeOpenAI(lambda p: "a")
    rollouts = run(env.run_group(client, "m", 0, 3, {"seed": 5}, asyncio.Semaphore(8)))
    seeds = [(request.get("n"), request["seed"]) for _, request in client.calls]
    assert seeds[0] == (3, 5) and sorted(seeds[1:]) == [(None, 5), (None, 6), (None, 7)]
    assert all(len(r.turn_spans) == 2 for r in rollouts)


def test_a_server_that_ignores_n_gets_one_request_per_rollout():
    env = vfrl.SingleTurnEnv(dataset=[{"question": "abc"}])
    client = PlainOpenAI(lambda p: "ok")  # answers one choice, whatever n says
    rollouts = run(env.run_group(client, "m", 0, 3, {"seed": 1}, asyncio.Semaphore(8), record_tokens=False))
    assert [r.completion[-1]["content"] for r in rollouts] == ["ok"] * 3 and client.count("chat") == 3


def test_a_rollout_whose_first_request_differs_sends_its_own():
    from vfrl.envs.group_request import GroupRequest

    async def claims():
        group, sent = GroupRequest(2), []

        async def send(n):
            sent.append(n)
            return SimpleNamespace(choices=[SimpleNamespace(index=j, text=f"c{j}") for j in range(n)])

        first = await group.claim(0, (["hi"], {"t": 1}), send)
        other = await group.claim(1, (["hello"], {"t": 1}), send)  # another prompt: not the same request
        again = await group.claim(0, (["hi"], {"t": 1}), send)  # a second sampler in the same rollout
        return sent, first, other, again

    sent, first, other, again = run(claims())
    assert sent == [2] and [c.text for c in first.choices] == ["c0"] and other is None and again is None


# ---- env group ----

def test_env_group_routes_rows_by_task():
    a = vfrl.SingleTurnEnv(dataset=[{"question": "qa"}], system_prompt="A",
                           rubric=Rubric([lambda completion: float(completion[-1]["content"] == "ra")]))
    b = Echo(dataset=[{"question": "qb", "info": {"rounds": 1}}], eval_dataset=[{"question": "eb"}],
             rubric=Rubric([lambda state: state["turn"]]))
    group = vfrl.EnvGroup([a, b], env_names=["a", "b"])
    assert [row["task"] for row in group.dataset] == ["a", "b"]
    assert group.dataset[0]["prompt"][0] == {"role": "system", "content": "A"}
    ra, = scored(group, FakeOpenAI(["ra"]), row=0)
    rb, = scored(group, FakeOpenAI(["x", "y"]), row=1)
    assert (ra.task, ra.reward, len(ra.turn_spans)) == ("a", 1.0, 1)
    assert (rb.task, rb.reward, len(rb.turn_spans)) == ("b", 2.0, 2)
    assert set(ra.metrics) == set(rb.metrics)  # the same metric names whichever env ran
    assert [row["task"] for row in group.rows(eval=True)] == ["b"]
    with pytest.raises(ValueError, match="distinct name"):
        vfrl.EnvGroup([a, b], env_names=["x", "x"])
