"""verifiers' classic API on vfrl: a package written for it loads unchanged and scores the same.

tests/classic_pkgs/ holds small package-like modules written against the classic API's public names
(`import verifiers as vf`); vfrl's loader reads their verifiers imports as vfrl's.
"""

import asyncio
import sys
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI

import vfrl as vf
from vfrl.rollout_types import Rollout
from vfrl.run_dir import RunDir, read_jsonl

sys.path.insert(0, str(Path(__file__).parent / "classic_pkgs"))
vf.load_environment("classic_quiz")  # imports it the way vf-train does
classic_quiz = sys.modules["classic_quiz"]

SAMPLING = {"max_tokens": 50}


def run(coro):
    return asyncio.run(coro)


def score(env, completion, answer="", info=None, task="default", state=None):
    r = Rollout(example_id=0, prompt=[{"role": "user", "content": "q"}], completion=completion, answer=answer,
                prompt_ids=[], completion_ids=[], completion_logprobs=[], completion_mask=[], policy="m",
                task=task, info=info or {})
    return run(env.score(r, state or {}))


# ---- datasets given as builder functions ----

def test_builder_dataset_is_built_on_first_use_only_once():
    classic_quiz.BUILDS.clear()
    env = vf.load_environment("classic_quiz")
    assert classic_quiz.BUILDS == []  # loading must not need the data (often on the network)
    assert env.dataset[0]["answer"] == 42 and env.dataset[0]["prompt"][0]["role"] == "system"
    env.dataset, env.rows()
    assert classic_quiz.BUILDS == [1]


def test_builder_that_raises_is_one_line_naming_the_builder():
    def build_dataset():
        raise ConnectionError("hub unreachable\nretry later")

    env = vf.SingleTurnEnv(dataset=build_dataset)
    with pytest.raises(vf.DatasetBuildError, match=r"^SingleTurnEnv: building its dataset \(.*build_dataset\(\)\) "
                                                   r"raised ConnectionError: hub unreachable retry later "
                                                   r"\(at test_env_classic_api.py:49\)$"):
        env.dataset


def test_env_group_of_builder_envs_builds_nothing_until_read():
    calls = []

    def builder(name):
        def build():
            calls.append(name)
            return [{"question": name}]
        return build

    group = vf.EnvGroup([vf.SingleTurnEnv(dataset=builder("a")), vf.SingleTurnEnv(dataset=builder("b"))],
                        env_names=["a", "b"])
    assert calls == []
    assert [r["task"] for r in group.dataset] == ["a", "b"] and calls == ["a", "b"]
    assert group.eval_dataset is None


# ---- module paths and names ----

def test_classic_module_paths_and_names_import():
    from vfrl.rubrics.judge_rubric import JudgeRubric
    from vfrl.rubrics.math_rubric import MathRubric
    from vfrl.types import Messages, State  # noqa: F401
    from vfrl.utils.data_utils import BOXED_SYSTEM_PROMPT, extract_boxed_answer, load_example_dataset  # noqa: F401

    assert MathRubric is vf.MathRubric and JudgeRubric is vf.JudgeRubric
    assert vf.utils.data_utils.extract_boxed_answer("x \\boxed{7}") == "7"
    assert "\\boxed{}" in BOXED_SYSTEM_PROMPT
    assert vf.SystemMessage("be brief") == {"role": "system", "content": "be brief"}


def test_messages_read_as_objects_and_tool_calls_flat():
    m = vf.Message({"role": "assistant", "content": "", "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "add", "arguments": "{}"}}]})
    assert (m.role, m.tool_calls[0].name, m.tool_calls[0].arguments, m.tool_call_id) == ("assistant", "add", "{}", None)
    assert m["tool_calls"][0]["function"]["name"] == "add"  # still the OpenAI dict underneath


def test_unsupported_classes_fail_in_one_line(monkeypatch):
    monkeypatch.delenv("VFRL_SANDBOX", raising=False)
    for cls in (vf.SandboxEnv, vf.PythonEnv):  # without env.sandbox = "local"
        with pytest.raises(NotImplementedError, match=f"^vfrl does not run Prime Intellect's hosted sandboxes, which "
                                                      f"{cls.__name__} creates; set env.sandbox = \"local\""):
            cls(dataset=[{"question": "q"}])
    with pytest.raises(NotImplementedError, match="^vfrl does not support BrowserEnv: it needs a hosted browser"):
        vf.BrowserEnv(dataset=[{"question": "q"}])


def test_reasoning_gym_env_scores_the_tasks_own_answer():
    env = vf.ReasoningGymEnv(gym="leg_counting", num_train_examples=3, num_eval_examples=1)
    row = env.dataset[0]
    right = score(env, [{"role": "assistant", "content": f"<answer>{row['answer']}</answer>"}], row["answer"],
                  row["info"])
    wrong = score(env, [{"role": "assistant", "content": "<answer>-1</answer>"}], row["answer"], row["info"])
    assert (right.reward, wrong.reward) == (1.0, 0.0)


# ---- semantics ----

def test_classic_package_rollout_stops_on_vf_stop_and_scores_with_int_answer_and_columns():
    env = vf.load_environment("classic_quiz", rounds=2)
    client = FakeOpenAI(["\\boxed{42}", "\\boxed{41}", "never asked"])
    [r] = run(env.run_group(client, "m", 0, 1, dict(SAMPLING), asyncio.Semaphore(1)))
    assert [m["role"] for m in r.completion] == ["assistant", "user", "assistant"]  # stopped by @vf.stop
    assert r.reward == 0.5 and r.metrics["answer_is_int"] == 1.0 and not r.reward_errors
    assert client.calls[0][1]["temperature"] == 0.25  # the env's sampling_args reach the request


def test_run_sampling_wins_over_env_sampling_args():
    env = vf.load_environment("classic_quiz", rounds=1)
    client = FakeOpenAI(["\\boxed{42}"])
    run(env.run_group(client, "m", 0, 1, {"temperature": 0.9, "max_tokens": 5}, asyncio.Semaphore(1)))
    assert client.calls[0][1]["temperature"] == 0.9


def test_rubric_without_parser_hands_a_default_parser():
    def uses_parser(parser, completion) -> float:
        return float(parser.parse_answer(completion) == "hi")

    env = vf.SingleTurnEnv(dataset=[{"question": "q"}], rubric=vf.Rubric(funcs=[uses_parser]))
    assert score(env, [{"role": "assistant", "content": "hi"}]).reward == 1.0


class FakeJudge:
    def __init__(self, verdict):
        async def create(**kwargs):
            self.asked += 1
            return type("R", (), {"choices": [type("C", (), {"message": type("M", (), {"content": verdict})})]})
        self.asked = 0
        self.chat = type("Chat", (), {"completions": type("Comp", (), {"create": staticmethod(create)})})


def test_judge_rubric_with_own_function_scores_that_function_alone():
    judge = FakeJudge("7")
    rubric = vf.JudgeRubric(judge_client=judge, judge_prompt="{question} {answer} {response}")

    async def graded(judge, prompt, completion, answer, state) -> float:  # names `judge`, as in verifiers
        return float(await judge(prompt, completion, answer, state)) / 10

    rubric.add_reward_func(graded)
    env = vf.SingleTurnEnv(dataset=[{"question": "q"}], rubric=rubric)
    r = score(env, [{"role": "assistant", "content": "a"}], answer="a")
    assert r.reward == pytest.approx(0.7) and list(r.metrics) == ["graded", "reward_errors"]


def test_judge_rubric_without_functions_still_scores_the_verdict():
    env = vf.SingleTurnEnv(dataset=[{"question": "q"}], rubric=vf.JudgeRubric(judge_client=FakeJudge("yes")))
    assert score(env, [{"role": "assistant", "content": "a"}], answer="a").reward == 1.0


def test_math_rubric_default_parser_reads_the_box():
    rubric = vf.MathRubric()
    env = vf.SingleTurnEnv(dataset=[{"question": "q"}], parser=rubric.parser, rubric=rubric)
    assert score(env, [{"role": "assistant", "content": "so \\boxed{42}"}], answer=42).reward == 1.0
    assert score(env, [{"role": "assistant", "content": "42"}], answer="42").reward == 0.0


def test_parser_helpers():
    completion = [{"role": "assistant", "content": "a"}, {"role": "user", "content": "u"},
                  {"role": "tool", "content": "t", "tool_call_id": "1"}]
    p = vf.XMLParser(["think", ("answer", "code")])
    assert [m["content"] for m in p.get_assistant_messages(completion)] == ["a"]
    assert [m["content"] for m in p.get_user_messages(completion)] == ["u"]
    assert [m["content"] for m in p.get_tool_messages(completion)] == ["t"]
    assert p.get_format_str() == "<think>\n...\n</think>\n<[ answer | code ]>\n...\n</[ answer | code ]>\n"


# ---- loaded unchanged: the package's verifiers imports read as vfrl's, nobody else's ----

def test_a_classic_package_loads_unchanged_and_leaves_verifiers_alone(tmp_path, monkeypatch):
    import importlib

    from vfrl.inference.scale_out import is_verifiers_package
    from vfrl.verifiers_compat import ClassicSourceLoader, verifiers_api

    assert verifiers_api("classic_quiz") == "classic" and verifiers_api("reverse_text") is None
    assert classic_quiz.vf is vf and classic_quiz.State is vf.State  # `import verifiers as vf` in its source
    assert isinstance(classic_quiz.__spec__.loader, ClassicSourceLoader)
    assert not is_verifiers_package("classic_quiz")  # no scale-out, no uv: it samples as a vfrl environment
    try:
        real = importlib.import_module("verifiers")  # installed with the verifiers extra: still verifiers 0.4
        assert real is not vf and "vfrl" not in real.__name__
    except ImportError:
        pass
    # a package and its submodules, with a lazy import inside load_environment
    pkg = tmp_path / "classic_pkg_lazy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import verifiers as vf\nfrom .rubric import make_rubric\n\n"
                                     "def load_environment():\n"
                                     "    from verifiers.utils.data_utils import extract_boxed_answer\n"
                                     "    return vf.SingleTurnEnv(dataset=[{'question': 'q', 'answer': '1'}],\n"
                                     "                            parser=vf.Parser(extract_fn=extract_boxed_answer),\n"
                                     "                            rubric=make_rubric())\n")
    (pkg / "rubric.py").write_text("from verifiers import Rubric\n\n"
                                   "def make_rubric():\n    return Rubric(funcs=[lambda completion, **kw: 1.0])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    env = vf.load_environment("classic-pkg-lazy")
    assert isinstance(env, vf.SingleTurnEnv) and env.dataset[0]["answer"] == "1"
    assert not (pkg / "__pycache__").exists()  # compiled from source each time: no bytecode a plain import could use


@pytest.mark.parametrize("line, asked", [
    ("from verifiers.envs.experimental.gym_env import GymEnv", "imports verifiers.envs.experimental.gym_env"),
    ("from verifiers.types import GenerateOutputs", "imports GenerateOutputs from verifiers.types"),
    ("GymEnv = vf.GymEnv", "uses verifiers.GymEnv"),
])
def test_a_classic_package_needing_what_vfrl_lacks_is_one_line(tmp_path, monkeypatch, line, asked):
    (tmp_path / "classic_gym.py").write_text(f"import verifiers as vf\n{line}\n\n"
                                             "def load_environment():\n    return GymEnv()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from vfrl.envs.loader import EnvironmentLoadError

    with pytest.raises(EnvironmentLoadError) as e:
        vf.load_environment("classic-gym")
    assert str(e.value) == (
        "environment 'classic-gym' is written for verifiers' classic API, which vfrl runs with its own classes, "
        f"and it {asked}, which vfrl does not have (at classic_gym.py:2); see "
        "docs/environments.md, 'Porting from verifiers', for what vfrl has")


def test_a_classic_package_needing_a_sandbox_is_refused_in_one_line_when_built(tmp_path, monkeypatch):
    (tmp_path / "classic_sandbox.py").write_text("import verifiers as vf\n"
                                                 "from verifiers.envs.sandbox_env import SandboxEnv\n\n"
                                                 "def load_environment():\n    return SandboxEnv()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("VFRL_SANDBOX", raising=False)
    from vfrl.envs.loader import EnvironmentLoadError

    with pytest.raises(EnvironmentLoadError) as e:
        vf.load_environment("classic-sandbox")
    assert ("load_environment() raised NotImplementedError: vfrl does not run Prime Intellect's hosted sandboxes, "
            "which SandboxEnv creates; set env.sandbox = \"local\"") in str(e.value)
    assert "(at classic_sandbox.py:5)" in str(e.value)  # the package's line


@pytest.mark.e2e
@pytest.mark.parametrize("package", ["classic_quiz", "classic_reverse"])
def test_vf_rl_trains_an_unchanged_classic_package_two_steps(tiny_model, tmp_path, shared_vllm_server, package):
    """`vf-rl @ config` with a package as verifiers 0.3 users wrote it, against the session's vf-vllm:
    classic_quiz (multi-turn: the environment's "Are you sure?" turn between the replies) and classic_reverse
    (single-turn, an XMLParser). Each trains as a vfrl environment (no verifiers episode; that it needs no
    scale-out: test_a_classic_package_loads_unchanged_and_leaves_verifiers_alone) with its own rubric's scores,
    the loss on the sampled tokens only, and the trainer's logprobs those vLLM sampled with (mismatch_kl, where
    both held the same weights: assert_served_is_trained)."""
    from conftest import assert_served_is_trained, train_package_two_steps

    env = {"id": package, "args": {"rounds": 2}} if package == "classic_quiz" else {"id": package}
    # the quiz's boxed-answer system prompt alone is ~100 tokens (one a character): room for its three turns, each
    # reply long enough to end on its own (one cut at max_tokens ends the conversation)
    _, run_dir, steps = train_package_two_steps(tmp_path, tiny_model, env, Path(__file__).parent / "classic_pkgs",
                                                examples_per_step=1, server=shared_vllm_server, max_seq_len=384,
                                                max_tokens=48)
    rewards = []
    for s in steps:
        rollouts = read_jsonl(RunDir(run_dir).step_rollouts(s['step']))
        for r in rollouts:
            roles = [m["role"] for m in r["completion"]]
            if package == "classic_quiz":
                assert roles == ["assistant", "user", "assistant"] and r["completion"][1]["content"] == "Are you sure?"
                assert set(r["metrics"]) >= {"every_reply_right", "answer_is_int"}
            else:
                assert roles == ["assistant"] and set(r["metrics"]) >= {"similarity", "format_reward_func"}
            assert r["reward_errors"] == {}
            rewards.append(r["reward"])
        assert s["loss_tokens"] == sum(r["sampled_tokens"] for r in rollouts) > 0  # no sequence cut short
    assert_served_is_trained(steps)
    if package == "classic_reverse":
        assert max(rewards) > 0.3  # the tiny model reverses text: the package's own reward scores it


@pytest.mark.e2e
@pytest.mark.parametrize("package", ["classic_calc", "classic_calc_late"])
def test_vf_rl_trains_an_unchanged_classic_tool_package_two_steps(tmp_path, tool_server, package):
    """`env.id = "classic_calc"`, a `vf.ToolEnv` package as verifiers 0.3 users wrote it (and `classic_calc_late`,
    the same tool offered as `tool_defs` by a MultiTurnEnv that runs the calls itself, its rubric in a package
    of its own beside it, as the community's packages are written), on the tiny model that
    calls tools (tests/tool_model.py) against the tool tests' vf-vllm, whose Hermes parser reads the call: the
    environment runs the python tool and sends its result back as a tool message that gets no loss (the
    loss tokens are the sampled ones), the package's own rubric scores, each step's adapter is loaded, and the
    trainer's logprobs of the sampled tokens are vLLM's (mismatch_kl where both held the same weights; after a
    sync: test_a_classic_tool_package_sampled_after_a_sync_matches_the_trainer)."""
    import json

    from transformers import AutoTokenizer

    from conftest import assert_served_is_trained, train_package_two_steps
    from tool_model import call_text

    _, run_dir, steps = train_package_two_steps(tmp_path, Path(tool_server.model), {"id": package},
                                                Path(__file__).parent / "classic_pkgs", examples_per_step=1,
                                                server=tool_server, max_tokens=64, max_seq_len=192)
    tok = AutoTokenizer.from_pretrained(tool_server.model)
    # what the model samples in a rollout that calls as it was taught and answers right, each part ended by
    # <|im_end|>; the tool message and the template's tokens between the turns are not sampled
    taught = (len(tok.encode(call_text(2, 3), add_special_tokens=False)) + 1
              + len(tok.encode("5", add_special_tokens=False)) + 1)
    called, sampled = 0, []
    for s in steps:
        rollouts = read_jsonl(RunDir(run_dir).step_rollouts(s['step']))
        assert s["loss_tokens"] == sum(r["sampled_tokens"] for r in rollouts) > 0  # no sequence cut short
        for r in rollouts:
            assert set(r["metrics"]) >= {"says_the_sum", "called_add"}
            assert r["metrics"].get("cleaned_up", 1.0) == 1.0  # classic_calc_late's @vf.cleanup ran before scoring
            if r["metrics"]["called_add"] == 0:
                continue  # a sampled call the parser could not read is a plain reply, scored by the rubric
            called += 1
            call, result, reply = r["completion"]
            assert call["tool_calls"][0]["function"]["name"] == "add"
            assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == {"a": 2, "b": 3}
            assert result["role"] == "tool" and result["content"] == "5"
            assert result["tool_call_id"] == call["tool_calls"][0]["id"]
            assert r["reward"] == float(reply["content"].strip() == "5")
            sampled.append(r["sampled_tokens"])
    assert taught in sampled, (taught, sampled)
    assert called >= 2  # the model calls the tool in most of its 4 rollouts
    assert_served_is_trained(steps)
    if package == "classic_calc_late":  # its @vf.teardown ran once, when vf-train closed the environment
        assert (run_dir / "logs" / "trainer.log").read_text().count("classic_calc_late: teardown ran") == 1


# ---- sampled from a pushed adapter on a real server: the trainer's logprobs are vLLM's ----

@pytest.mark.e2e
def test_a_classic_multi_turn_package_sampled_after_a_sync_matches_the_trainer(
        tiny_model, tmp_path, shared_vllm_server):
    """classic_quiz through the session's vf-vllm, sampled from an adapter just pushed as vf-train pushes it
    (AdapterSync): each rollout's two replies mask 1, the environment's "Are you sure?" turn between them mask 0,
    and the trainer's logprobs (the same LoRA, in peft) of every sampled token are vLLM's within 1e-4. (The
    two-step vf-rl runs above cannot show this: with one step off-policy, their second batch is sampled by the
    base model while the trainer already holds step 1's adapter.)"""
    from conftest import assert_reply_turn_reply, batch_from_pushed_adapter, max_logprob_gap

    model, policy, batch = batch_from_pushed_adapter(shared_vllm_server, tiny_model,
                                                     vf.load_environment("classic_quiz", rounds=2), tmp_path,
                                                     seed=41, scale=0.05, max_tokens=48)
    assert len(batch.rollouts) == 2 and batch.metrics["rollouts_dropped"] == 0
    for r in batch.rollouts:
        assert_reply_turn_reply(r)  # two replies, the environment's turn between them
        assert r.policy == policy and [m["role"] for m in r.completion] == ["assistant", "user", "assistant"]
    assert max_logprob_gap(model, batch.rollouts) < 1e-4


@pytest.mark.e2e
def test_a_classic_tool_package_sampled_after_a_sync_matches_the_trainer(tmp_path, tool_server):
    """classic_calc through the tool tests' vf-vllm, sampled from a pushed adapter: the call and the answer mask
    1, the tool message between them mask 0, and the trainer's logprobs of every sampled token are vLLM's."""
    from conftest import assert_reply_turn_reply, batch_from_pushed_adapter, max_logprob_gap

    # a small adapter: the model still calls the tool
    model, _, batch = batch_from_pushed_adapter(tool_server, tool_server.model, vf.load_environment("classic_calc"),
                                                tmp_path, seed=43, scale=0.01, max_tokens=64)
    assert len(batch.rollouts) == 2 and batch.metrics["rollouts_dropped"] == 0
    called = [r for r in batch.rollouts if r.metrics["called_add"] == 1.0]
    assert called, [r.completion for r in batch.rollouts]
    for r in called:
        assert_reply_turn_reply(r)  # the call, the tool's result, the answer
        assert r.completion[1]["role"] == "tool" and r.completion[1]["content"] == "5"
    assert max_logprob_gap(model, batch.rollouts) < 1e-4


# ---- shapes the hub population benchmark found (benchmarks/hub_population.py) ----

@pytest.mark.parametrize("info", ['{"k": 1, "tags": ["a"]}', {"k": 1, "tags": ["a"]}, ""])
def test_a_rows_info_may_be_a_json_string_as_verifiers_reads_it(info):
    """prime-environments' agent_dojo stores each row's info as a JSON string (a hub column of strings); verifiers
    parses it, and vfrl stopped at `dict(info)`."""
    env = vf.SingleTurnEnv(dataset=[{"question": "q", "answer": "a", "info": info}],
                           rubric=vf.Rubric(funcs=[lambda info: float(info.get("k", 0))]))
    [r] = run(env.run_group(FakeOpenAI(["a"]), "m", 0, 1, dict(SAMPLING), asyncio.Semaphore(1)))
    assert r.info == ({} if info == "" else {"k": 1, "tags": ["a"]}) and r.reward == (0.0 if info == "" else 1.0)
    with pytest.raises(ValueError, match="a row's info is a string that is not a JSON object"):
        vf.SingleTurnEnv(dataset=[{"question": "q", "info": "not json"}]).dataset


def test_message_types_are_classes_packages_test_with_isinstance():
    """fh_aviary: `isinstance(item, (vf.SystemMessage, vf.UserMessage, vf.AssistantMessage, vf.ToolMessage))`; vfrl's
    were functions, and isinstance raised TypeError."""
    made = [vf.SystemMessage(content="s"), vf.UserMessage(content="u"), vf.AssistantMessage(content="a"),
            vf.ToolMessage(content="t", tool_call_id="c")]
    kinds = (vf.SystemMessage, vf.UserMessage, vf.AssistantMessage, vf.ToolMessage)
    assert [type(m) for m in made] == list(kinds) and all(isinstance(m, kinds) for m in made)
    assert not isinstance({"role": "user", "content": "u"}, kinds)
    assert [m.role for m in made] == ["system", "user", "assistant", "tool"] and made[3].tool_call_id == "c"
    assert made[1] == {"role": "user", "content": "u"} and vf.UserMessage("u") == made[1]


def test_a_rubric_takes_verifiers_parallelize_scoring():
    """kernelbench, coconot and wildjailbreak pass `parallelize_scoring=` (verifiers 0.1.x's Rubric took it)."""
    rubric = vf.Rubric(funcs=[lambda: 1.0], parallelize_scoring=False, custom_option=3)
    assert rubric.parallelize_scoring is False and rubric.custom_option == 3
    assert score(vf.SingleTurnEnv(dataset=[{"question": "q"}], rubric=rubric), [{"role": "assistant",
                                                                                   "content": "x"}]).reward == 1.0
