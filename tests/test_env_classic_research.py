"""What verifiers' last classic releases (0.1.9 - 0.1.14) added, in the shapes Prime Intellect's research
environments (github.com/PrimeIntellect-ai/research-environments, 59 classic packages, docs/environments.md) use
it: `MaybeThinkParser`, an environment's unknown keywords kept (`max_concurrent`), `HybridMathRubric`,
`ClientConfig` and `setup_openai_client` for a judge, `vf.Error`s that end a rollout, `@vf.teardown`,
`score_rollouts=False` for generating completions, the sandbox-run classes refused naming the service, and (as
prime-environments' hanabi) an environment that calls the policy itself for a game's other seats. Each package is
written here and loaded unchanged (`import verifiers as vf`), against a fake vLLM (tests/fake_openai.py); the other
seats' calls also against the session's real vf-vllm.
"""

import asyncio
import json
import logging
import textwrap

import openai
import pytest
from fake_openai import FakeOpenAI
from typer.testing import CliRunner

import vfrl as vf
from vfrl.envs.cli.eval import app as eval_app
from vfrl.envs.loader import EnvironmentLoadError, trainable

SAMPLING = {"temperature": 1.0, "max_tokens": 200}


def package(folder, name: str, text: str) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(text))


def refused(folder, name: str, text: str) -> str:
    """The one line that loading package `name` (written from `text`) stops with."""
    package(folder, name, text)
    with pytest.raises(EnvironmentLoadError) as e:
        vf.load_environment(name)
    return str(e.value)


@pytest.fixture
def src(tmp_path, monkeypatch):
    folder = tmp_path / "src"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    return folder


def scored(env, replies: list[str], n: int | None = None):
    """`n` scored rollouts of the first row (one per reply unless given), the model answering with `replies`."""
    client = FakeOpenAI(replies)

    async def go():
        return await env.run_group(client, "m", 0, n or len(replies), dict(SAMPLING), asyncio.Semaphore(8),
                                   eval=env.eval_dataset is not None)

    return asyncio.run(go())


BOXED_MATH = """
    import verifiers as vf
    from verifiers.utils.data_utils import extract_boxed_answer

    def load_environment(**kwargs) -> vf.Environment:
        def build_eval_dataset():
            return [{"question": "What is 2+2?" + "\\nPut your final answer within \\\\boxed{}.", "answer": "4"}]

        parser = vf.MaybeThinkParser(extract_boxed_answer)
        return vf.SingleTurnEnv(eval_dataset=build_eval_dataset, parser=parser, rubric=vf.MathRubric(parser=parser),
                                max_concurrent=10, **kwargs)
"""


def test_maybe_think_parser_reads_after_the_reasoning_or_the_whole_reply_and_think_parser_needs_it(src):
    package(src, "boxed_math", BOXED_MATH)
    env = vf.load_environment("boxed_math")
    assert env.max_concurrent == 10
    replies = ["<think>2 and 2</think> so \\boxed{4}", "\\boxed{4}", "<think>maybe \\boxed{4}</think> it is 5",
               "<think>never closed \\boxed{4}"]
    assert [r.reward for r in scored(env, replies)] == [1.0, 1.0, 0.0, 1.0]
    # verifiers' ThinkParser gives nothing to parse when the reply has no `</think>`: its reasoning was skipped
    think = vf.ThinkParser(vf.extract_boxed_answer)
    assert [think.parse_answer([{"role": "assistant", "content": c}]) for c in replies] == ["4", "", "it is 5", ""]
    # MathRubric's own default reads after the reasoning too, as verifiers' does
    default = vf.MathRubric()
    completion = [{"role": "assistant", "content": "<think>\\boxed{3}</think>\\boxed{4}"}]
    assert asyncio.run(default.score(prompt=[], completion=completion, answer="4", state={}))[0] == 1.0


class Judge:
    """A judge client: answers every request with `verdict`, keeping the prompts."""

    def __init__(self, verdict: str):
        self.verdict, self.prompts = verdict, []
        self.chat = self
        self.completions = self

    async def create(self, model, messages, **kwargs):
        self.prompts.append(messages[-1]["content"])
        message = type("M", (), {"content": self.verdict})
        return type("R", (), {"choices": [type("C", (), {"message": message})]})


HYBRID = """
    import verifiers as vf
    from verifiers.rubrics.experimental.hybrid_math_rubric import HybridMathRubric
    from verifiers.utils.data_utils import extract_boxed_answer

    def load_environment(judge_client=None):
        rubric = HybridMathRubric(parser=vf.MaybeThinkParser(extract_boxed_answer),
                                  use_judge_fallback=judge_client is not None, judge_client=judge_client)
        return vf.SingleTurnEnv(dataset=[{"question": "Half of 1?", "answer": "0.5"}], rubric=rubric)
"""


def test_hybrid_math_rubric_asks_its_judge_only_for_what_the_math_check_rejects(src):
    package(src, "hybrid_math", HYBRID)
    judge = Judge("The candidate's answer equals the reference.\n\\boxed{A} - CORRECT")
    env = vf.load_environment("hybrid_math", judge_client=judge)
    right, judged = scored(env, ["\\boxed{1/2}", "\\boxed{one half}"])
    assert (right.reward, right.metrics["math_verify_score"], right.metrics["judge_score"]) == (1.0, 1.0, 1.0)
    assert (judged.reward, judged.metrics["math_verify_score"], judged.metrics["judge_score"]) == (1.0, 0.0, 1.0)
    assert len(judge.prompts) == 1 and "one half" in judge.prompts[0] and "0.5" in judge.prompts[0]

    no, = scored(vf.load_environment("hybrid_math", judge_client=Judge("\\boxed{B}")), ["\\boxed{one half}"])
    assert no.reward == 0.0
    alone, = scored(vf.load_environment("hybrid_math"), ["\\boxed{one half}"])  # no judge: the math check decides
    assert (alone.reward, alone.metrics["judge_score"]) == (0.0, 0.0)


SANDBOXED_TOOL = """
    import verifiers as vf
    from verifiers.utils.error_utils import ErrorChain

    CLOSED = []

    class Shell(vf.MultiTurnEnv):
        @vf.teardown
        async def close_pool(self):
            CLOSED.append("pool")

        @vf.teardown(priority=5)
        def close_cache(self):
            CLOSED.append("cache")
            raise OSError("cache already gone")

        def env_response(self, messages, state):
            try:
                try:
                    raise TimeoutError("the command ran 30 s")
                except TimeoutError as e:
                    raise vf.SandboxError("the sandbox stopped answering") from e
            except vf.Error as e:
                state["chain"] = str(ErrorChain(e))
                if TimeoutError in ErrorChain(e) and state["turn"] > 1:
                    raise
            return [{"role": "user", "content": "go on"}]

    def load_environment():
        info: vf.Info = {}
        return Shell(dataset=[{"question": "ls", "info": info}], max_turns=5,
                     rubric=vf.Rubric(funcs=[lambda state: float(state.get("error") is None)]))
"""


def test_a_vf_error_ends_its_rollout_with_the_turns_kept_and_teardown_runs_once_at_close(src, caplog):
    package(src, "sandboxed_tool", SANDBOXED_TOOL)
    env = vf.load_environment("sandboxed_tool")
    import sandboxed_tool

    with caplog.at_level(logging.WARNING):
        r, = scored(env, ["ls", "ls -a"], n=1)
        asyncio.run(env.aclose())
        asyncio.run(env.aclose())
    assert [m["content"] for m in r.completion if m["role"] == "assistant"] == ["ls", "ls -a"]
    assert r.error == "SandboxError: the sandbox stopped answering" and r.reward == 0.0
    # both handlers ran once, the higher priority first, and the one that raised was logged
    assert sandboxed_tool.CLOSED == ["cache", "pool"]
    assert "its teardown close_cache raised OSError: cache already gone" in caplog.text

    group = vf.EnvGroup(envs=[vf.load_environment("sandboxed_tool")], env_names=["shell"])
    sandboxed_tool.CLOSED.clear()
    asyncio.run(group.aclose())
    assert sandboxed_tool.CLOSED == ["cache", "pool"]


JUDGED = """
    import verifiers as vf
    from verifiers.types import ClientConfig
    from verifiers.utils.client_utils import setup_openai_client

    def load_environment(judge_base_url="http://judge.test/v1", key_var="PRIME_API_KEY"):
        client = setup_openai_client(ClientConfig(api_key_var=key_var, api_base_url=judge_base_url, timeout=30,
                                                  renderer="auto"))
        return vf.SingleTurnEnv(dataset=[{"question": "q", "answer": "a"}],
                                rubric=vf.JudgeRubric(judge_client=client, judge_model="judge"))
"""


def test_a_judge_client_from_client_config_takes_its_key_from_the_variable_or_the_prime_login(
        src, tmp_path, monkeypatch):
    package(src, "judged", JUDGED)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("PRIME_API_KEY", raising=False)
    monkeypatch.delenv("PRIME_TEAM_ID", raising=False)
    (tmp_path / ".prime").mkdir()
    (tmp_path / ".prime" / "config.json").write_text(json.dumps({"api_key": "from-login", "team_id": "t1"}))
    client = vf.load_environment("judged").rubric.judge_client
    assert (client.api_key, str(client.base_url), client.max_retries) == ("from-login", "http://judge.test/v1/", 10)
    assert client._client.headers["X-Prime-Team-ID"] == "t1" and client._client.timeout.read == 30
    monkeypatch.setenv("MY_JUDGE_KEY", "from-env")
    client = vf.load_environment("judged", key_var="MY_JUDGE_KEY").rubric.judge_client
    assert client.api_key == "from-env" and "X-Prime-Team-ID" not in client._client.headers


PASSTHROUGH = """
    import verifiers as vf

    def load_environment(**kwargs):
        return vf.SingleTurnEnv(dataset=lambda: [{"question": "Say hi."}, {"question": "Say bye."}],
                                score_rollouts=False, **kwargs)
"""


def test_an_unscored_environment_generates_completions_with_vf_eval_and_training_refuses_it(
        src, tmp_path, monkeypatch):
    package(src, "passthrough_gen", PASSTHROUGH)
    env = vf.load_environment("passthrough_gen")
    with pytest.raises(EnvironmentLoadError) as e:
        trainable(env)
    assert str(e.value) == ("environment 'passthrough_gen' does not score its rollouts (it sets score_rollouts=False):"
                            " there is no reward to train on; vf-eval runs it to generate completions")

    client = FakeOpenAI(["hi"] * 5)  # vf-eval probes the server with one request first
    monkeypatch.setattr(openai, "AsyncOpenAI", lambda **kwargs: client)
    out = tmp_path / "out"
    result = CliRunner().invoke(eval_app, ["passthrough_gen", "-n", "2", "-r", "2", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "4 rollouts, not scored (the environment sets score_rollouts=False)" in result.output
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and all(x["reward"] is None and x["completion"][-1]["content"] == "hi" for x in lines)
    metadata = json.loads((out / "metadata.json").read_text())
    assert metadata["reward"] is None and metadata["at_k"] == {}


@pytest.mark.parametrize("line, module", [
    ("from verifiers.envs.experimental.rlm_env import RLMEnv", "rlm_env"),
    ("from verifiers.envs.experimental.composable.harnesses.opencode import opencode_harness", "composable"),
    ("from verifiers.envs.experimental.sandbox_mixin import SandboxMixin", "sandbox_mixin"),
])
def test_a_package_built_on_verifiers_sandboxes_is_refused_naming_the_service(src, line, module):
    assert refused(src, "sandbox_pkg", f"""
        import verifiers as vf
        {line}

        def load_environment():
            return None
    """) == (f"environment 'sandbox_pkg' imports verifiers.envs.experimental.{module}, whose environments run in "
             "Prime Intellect's remote sandboxes, a service vfrl does not run (at sandbox_pkg.py:3)")


def test_the_example_datasets_verifiers_knows_read_their_hub_rows_into_question_and_answer():
    """gpqa's `load_example_dataset("gpqa_diamond")` stopped at an unknown name; each of verifiers' names now reads
    rows of its hub dataset's shape (the hub is not reached here: the rows are written as it serves them)."""
    from vfrl.envs.classic import EXAMPLE_DATASETS

    assert set(EXAMPLE_DATASETS) >= {"aime2024", "aime2025", "amc2023", "gpqa_diamond", "gpqa_main", "gsm8k", "math",
                                     "math500", "mmlu", "mmlu_pro", "openbookqa", "openrs", "openrs_easy",
                                     "openrs_hard", "prime_code"}

    def row(name, x):
        path, configs, split, to_row, keep = EXAMPLE_DATASETS[name]
        return to_row(x) if keep is None or keep(x) else None

    gpqa = {"Question": "Which is right?", "Correct Answer": "this", "Incorrect Answer 1": "a",
            "Incorrect Answer 2": "b", "Incorrect Answer 3": "c"}
    first = row("gpqa_diamond", gpqa)
    assert first == row("gpqa_main", gpqa)  # the same order every time
    assert f"{first['answer']}: this" in first["question"].splitlines()
    assert row("aime2024", {"problem": "p", "answer": 204.0}) == {"question": "p", "answer": "204"}
    assert row("aime2025", {"question": "q", "answer": "$70$"}) == {"question": "q", "answer": "70"}
    assert row("mmlu", {"question": "2+2?", "choices": ["3", "4"], "answer": 1}) == {
        "question": "Question: 2+2?\n\nA: 3\nB: 4", "answer": "B"}
    assert row("openbookqa", {"question_stem": "Sky?", "choices": {"label": ["A", "B"], "text": ["blue", "red"]},
                              "answerKey": "A"})["question"] == "Question: Sky?\n\nChoices:\nA. blue\nB. red"
    assert row("openrs_easy", {"problem": "p", "answer": "1", "level": "Hard"}) is None
    assert row("prime_code", {"prompt": "Solve the following coding problem using the programming language "
                                        "python: x", "verification_info": "{}"})["answer"] == "{}"
    assert row("gsm8k", {"question": "q", "answer": "so #### 42"}) == {"question": "q", "answer": "42"}


def test_a_rows_own_prompt_gets_the_system_prompt_first_unless_it_has_one():
    """verifiers' later releases put `system_prompt` before a row's given prompt (color_codeword's rows start
    empty: `prompt: []`, the system prompt and the first user turn come after); a prompt that opens with its own
    system message keeps it alone."""
    own = [{"role": "system", "content": "mine"}, {"role": "user", "content": "x"}]
    env = vf.SingleTurnEnv(dataset=[{"prompt": [{"role": "user", "content": "hi"}]}, {"prompt": own}, {"prompt": []}],
                           system_prompt="Be brief.")
    assert [[m["content"] for m in row["prompt"]] for row in env.dataset] == [
        ["Be brief.", "hi"], ["mine", "x"], ["Be brief."]]
    assert vf.SingleTurnEnv(dataset=[{"prompt": [{"role": "user", "content": "hi"}]}]).dataset[0]["prompt"] == [
        {"role": "user", "content": "hi"}]


@pytest.mark.parametrize("hook", ["get_prompt_messages", "render_completion", "add_trajectory_step"])
def test_a_conversation_rebuilt_turn_by_turn_is_refused_in_one_line_not_run_wrong(src, hook):
    """color_codeword builds each turn's messages in `get_prompt_messages` (images shown turn by turn), scicode a
    fresh prompt per step: vfrl's loop does not call those hooks, and running without them sent an empty
    conversation (vLLM: 'Cannot apply chat template to an empty conversation'). The line names the package's."""
    said = refused(src, f"rebuilt_{hook}", f"""
        import verifiers as vf

        class Rebuilt(vf.MultiTurnEnv):
            async def {hook}(self, state, *args):
                return state["prompt"]

        def load_environment():
            return Rebuilt(dataset=[{{"prompt": []}}], system_prompt="s")
    """)
    assert said == (
        f"environment 'rebuilt_{hook}' (module rebuilt_{hook}, verifiers' classic API): load_environment() raised "
        f"NotImplementedError: vfrl does not support Rebuilt.{hook}: vfrl grows one conversation a turn (the prompt, "
        "the replies, env_response's messages) and trains it as one sequence; a conversation rebuilt each turn is "
        f"not run (at rebuilt_{hook}.py:9)")


@pytest.mark.parametrize("method", ["score_rollouts", "score_rollout", "score_group"])
def test_a_rubric_scoring_its_own_way_is_refused_in_one_line_not_scored_otherwise(src, method):
    """prime-environments' arc_agi_tool grades in its Rubric's own `score_rollouts` (returning `RolloutScores`):
    vfrl scores with the reward functions and never calls verifiers' scoring methods, so such a rubric would have
    been scored by its functions alone, silently. It is refused when built, naming the package's line."""
    said = refused(src, f"own_{method}", f"""
        import verifiers as vf
        from verifiers.types import RolloutScores

        class Graded(vf.Rubric):
            async def {method}(self, *args, **kwargs) -> RolloutScores:
                return RolloutScores(reward=[1.0], metrics={{}})

        def load_environment():
            return vf.SingleTurnEnv(dataset=[{{"question": "q", "answer": "a"}}], rubric=Graded())
    """)
    assert said == (
        f"environment 'own_{method}' (module own_{method}, verifiers' classic API): load_environment() raised "
        f"NotImplementedError: vfrl does not support Graded.{method}: vfrl scores with the rubric's reward functions "
        "and never calls verifiers' scoring methods, so a rubric that overrides one is not run "
        f"(at own_{method}.py:10)")


GUESSING = """
    import verifiers as vf
    from verifiers.envs.multiturn_env import MultiTurnEnv

    class Guessing(MultiTurnEnv):
        @vf.stop
        async def check_done(self, state, **kwargs):
            if state["trajectory"]:
                guess = state["trajectory"][-1]["completion"][-1].content.strip()
                state["solved"] = guess == state["answer"]
                state["next"] = [vf.UserMessage(content="lower" if guess > state["answer"] else "higher")]
            if state.get("solved"):
                return True
            return (await self.max_turns_reached(state) or await self.prompt_too_long(state)
                    or await self.has_error(state) or await self.has_final_env_response(state))

        async def env_response(self, messages, state, **kwargs):
            return state["next"]

    def load_environment():
        return Guessing(dataset=[{"question": "Guess 1-9.", "answer": "4"}], max_turns=3,
                        rubric=vf.Rubric(funcs=[lambda state: float(state.get("solved", False))]))
"""


def test_a_stop_condition_that_asks_verifiers_own_stop_conditions_runs_as_there(src):
    """research/prime-environments' mastermind ends its game in its own `@vf.stop`, which asks verifiers'
    built-in ones (`await self.max_turns_reached(state) or await self.prompt_too_long(state)`): vf-train stopped
    at step 1 on the missing method. It now ends at max_turns, or when solved."""
    package(src, "guessing_game", GUESSING)
    env = vf.load_environment("guessing_game")
    never, = scored(env, ["7", "6", "5", "never sent"], n=1)
    assert [m["content"] for m in never.completion] == ["7", "lower", "6", "lower", "5"] and never.reward == 0.0
    solved, = scored(env, ["2", "4"], n=1)
    assert [m["content"] for m in solved.completion] == ["2", "higher", "4"] and solved.reward == 1.0



def test_a_package_that_overrides_max_turns_reached_decides_when_its_turns_run_out(src):
    """In verifiers max_turns is a stop condition like any other, `max_turns_reached`, and a package may override it:
    prime-environments' backend_bench lifts the limit once its kernel is correct. vfrl's loop cut every rollout at
    max_turns whatever the override said; it now asks max_turns_reached, the package's own here, after each reply."""
    package(src, "own_turn_limit", GUESSING.replace("class Guessing(MultiTurnEnv):", """class Guessing(MultiTurnEnv):
        @vf.stop
        async def max_turns_reached(self, state):  # two more tries than max_turns
            return len(state["trajectory"]) >= self.max_turns + 2
"""))
    env = vf.load_environment("own_turn_limit")
    never, = scored(env, ["9", "8", "7", "6", "5", "never sent"], n=1)
    assert [m["content"] for m in never.completion] == ["9", "lower", "8", "lower", "7", "lower", "6", "lower", "5"]
    solved, = scored(env, ["2", "4"], n=1)
    assert [m["content"] for m in solved.completion] == ["2", "higher", "4"] and solved.reward == 1.0

HANABI_SHAPE = """
    import verifiers as vf
    from verifiers.types import TrajectoryStep
    from verifiers.utils.response_utils import parse_response_messages, parse_response_tokens

    class TwoSeats(vf.MultiTurnEnv):
        # hanabi's shape: seat 0 is the rollout's own conversation; seat 1 is the same model, called by the
        # environment through the rollout's client and recorded as a step of the trajectory
        async def env_response(self, messages, state, **kwargs):
            seat1 = [{"role": "system", "content": "You are seat 1."},
                     {"role": "user", "content": "Seat 0 played " + messages[-1]["content"]}]
            response = await state["client"].chat.completions.create(
                model=state["model"], messages=seat1, **(state.get("sampling_args") or {}))
            state["trajectory"].append(TrajectoryStep(
                prompt=seat1, completion=await parse_response_messages(response, self.message_type),
                response=response, tokens=await parse_response_tokens(response, self.message_type, self.max_seq_len),
                reward=None, advantage=None, is_truncated=False, extras={"player_id": 1}))
            return [{"role": "user", "content": "Seat 1 played " + response.choices[0].message.content}]

    def steps(state):
        return float(len(state["trajectory"]))

    def seat1_tokens(state):  # every call of seat 1 came back with its ids and one logprob a sampled token
        calls = [s for s in state["trajectory"] if s.get("extras", {}).get("player_id") == 1]
        tokens = [s["tokens"] for s in calls]
        return float(bool(calls) and all(t and t["prompt_ids"] and t["completion_ids"]
                                         and len(t["completion_ids"]) == len(t["completion_logprobs"]) for t in tokens))

    def load_environment(reward="steps"):
        return TwoSeats(dataset=[{"question": "Play a card.", "answer": ""}] * 2, max_turns=4,
                        rubric=vf.Rubric(funcs=[{"steps": steps, "seat1_tokens": seat1_tokens}[reward]]))
"""


def test_an_environment_calling_the_model_itself_gets_verifiers_state_and_its_calls_are_not_trained(src, caplog):
    """prime-environments' hanabi plays the other seats of a game with the policy itself: `state["client"]`,
    `state["model"]` and `state["sampling_args"]` as verifiers gives them, each call recorded as a `TrajectoryStep`
    read back by `verifiers.utils.response_utils`. vfrl samples those calls and trains seat 0's conversation."""
    from fake_openai import decode, encode

    package(src, "hanabi_shape", HANABI_SHAPE)
    env = vf.load_environment("hanabi_shape")
    client = FakeOpenAI(lambda prompt: "R1" if "seat 1" in prompt else "B2")
    with caplog.at_level(logging.WARNING):
        rollout, state = asyncio.run(env.rollout_with_state(client, "policy-3", env.dataset[0], 0, dict(SAMPLING)))
        asyncio.run(env.rollout_with_state(client, "policy-3", env.dataset[0], 1, dict(SAMPLING)))
    # max_turns counts every step of the trajectory, the other seat's too, as verifiers' max_turns_reached does: the
    # turn that reaches it is seat 0's fifth step (verifiers asks for env_response before the limit is checked)
    assert [m["content"] for m in rollout.completion] == ["B2", "Seat 1 played R1"] * 2 + ["B2"]
    seat1 = [step for step in state["trajectory"] if step.get("extras", {}).get("player_id") == 1]
    assert len(state["trajectory"]) == 5 and len(seat1) == 2
    calls = [kwargs for kind, kwargs in client.calls if kwargs["messages"][0]["content"] == "You are seat 1."]
    assert len(calls) == 4 and calls[0]["temperature"] == 1.0  # the rollout's sampling, for the policy it samples
    grouped, = asyncio.run(env.run_group(client, "m", 0, 1, dict(SAMPLING), asyncio.Semaphore(8)))
    assert grouped.reward == 5.0  # its rubric reads the whole trajectory
    tokens = seat1[0]["tokens"]
    assert tokens["prompt_ids"] == encode(client.render(seat1[0]["prompt"], add_generation_prompt=True))
    assert decode(tokens["completion_ids"]) == "R1<|im_end|>" and tokens["completion_mask"] == [1, 1, 1]
    assert len(tokens["completion_logprobs"]) == 3 and seat1[0]["completion"] == [{"role": "assistant",
                                                                                  "content": "R1"}]
    # what is trained: seat 0's replies; seat 1's move is the environment's text in it, with no loss
    sampled = decode([t for t, m in zip(rollout.completion_ids, rollout.completion_mask) if m])
    assert sampled.count("B2") == 3 and "R1" not in sampled
    said = [r.getMessage() for r in caplog.records if "calls the model itself" in r.getMessage()]
    assert said == ["TwoSeats calls the model itself (2 calls in the rollout of example 0, recorded in its "
                    "trajectory): vfrl samples them and trains the rollout's own conversation only"]


@pytest.mark.e2e
def test_an_environment_calling_the_model_itself_gets_vllms_tokens_through_the_real_client(src, shared_vllm_server):
    """The same package sampled by the trainer's Orchestrator from the session's vf-vllm: seat 1's calls go through
    the rollout's own openai client with `state["sampling_args"]` (vLLM's keys in extra_body), and each comes back
    with the prompt's and the reply's token ids and the reply's logprobs, which its rubric checks."""
    from conftest import served_batch

    package(src, "hanabi_shape", HANABI_SHAPE)
    srv = shared_vllm_server
    batch = served_batch(vf.load_environment("hanabi_shape", reward="seat1_tokens"), srv.base_url, srv.api_key,
                         srv.model, 0, max_tokens=8, examples=1)
    assert len(batch.rollouts) == 2 and batch.metrics["rollouts_dropped"] == 0
    assert [r.reward for r in batch.rollouts] == [1.0, 1.0]
    assert all([m["role"] for m in r.completion] == ["assistant", "user"] * 2 + ["assistant"] for r in batch.rollouts)
