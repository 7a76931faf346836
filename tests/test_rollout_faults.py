"""Faulty rollouts (issue 9's fault matrix, issue 10's loud reward errors): the step goes on without them.

Unit tests with the fake server (tests/fake_openai.py). Why a real server is not needed here:
reward functions and the per-rollout time limit run in the trainer's own process, the server only
supplies replies; what the server does with a rejected request is one HTTP 400 / 4xx reply, which
the fake sends exactly as the openai client raises it (tests/test_rollout_faults_vllm.py checks
that vLLM really answers an overlong prompt that way). A rollout that hangs cannot be made to hang
on cue in vLLM; the fake holds its request open until the time limit.
"""

import asyncio
import json
import math
import subprocess
import sys
import threading

import httpx
import openai
import pytest
import torch
from fake_openai import FakeOpenAI, decode

import vfrl
from vfrl.config import TrainerArgs
from vfrl.envs.faults import RolloutFaults
from vfrl.envs.rubric import Rubric
from vfrl.learner.batch import make_train_batch
from vfrl.rollouts.evaluation import summarize
from vfrl.rollouts.orchestrator import Orchestrator
from vfrl.rollouts.step_faults import BatchLost, RewardFunctionFailing

SAMPLING = {"temperature": 1.0, "max_tokens": 100}
LIMIT = 1.0  # seconds: a fake rollout takes about a millisecond; a stalled one waits this long, then goes


def run(coro):
    return asyncio.run(coro)


def env_with(*funcs, questions=("abc",), weights=None):
    return vfrl.SingleTurnEnv(dataset=[{"question": q, "answer": q[::-1]} for q in questions],
                              rubric=Rubric(list(funcs), weights=weights))


def group(env, client, n=2, example=0, faults=None, concurrency=8):
    sampling = {**SAMPLING, "seed": 0}  # sample j is sent with seed j
    return run(env.run_group(client, "m", example, n, sampling, asyncio.Semaphore(concurrency), faults=faults))


def reverse(prompt: str) -> str:
    return prompt.split("user\n")[-1].split("<|im_end|>")[0][::-1]


def right(completion, answer) -> float:
    return float(completion[-1]["content"] == answer)


def run_script(tmp_path, code: str, *args: str) -> subprocess.CompletedProcess:
    """`code` as a script in a fresh interpreter (how a process exits is what these tests look at)."""
    script = tmp_path / "script.py"
    script.write_text(code)
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120)


def status_error(cls, code: int, message: str):
    return cls(message, response=httpx.Response(code, request=httpx.Request("POST", "http://fake-vllm:8000/v1")),
               body=None)


class Stalling(FakeOpenAI):
    """Holds a request open (until the rollout's time limit ends it) when `stalls(prompt, seed)` says so."""

    def __init__(self, stalls, **kwargs):
        super().__init__(reverse, **kwargs)
        self.stalls = stalls

    async def _chat(self, model, messages, **kwargs):
        if self.stalls(self.render(messages, True), kwargs.get("seed")):
            await asyncio.Event().wait()  # nobody sets it
        return await super()._chat(model, messages, **kwargs)


class Failing(FakeOpenAI):
    """Answers prompts containing `marker` with `error` instead of a reply."""

    def __init__(self, marker: str, error: Exception, **kwargs):
        super().__init__(reverse, **kwargs)
        self.marker, self.error = marker, error

    async def _sample(self, prompt_ids, max_tokens):
        if self.marker in decode(prompt_ids):
            raise self.error
        return await super()._sample(prompt_ids, max_tokens)


# ---- row 1: reward functions that raise, return NaN or no number, or hang ----

def test_a_raising_reward_function_scores_zero_alone_names_why_and_the_others_keep_their_scores():
    def broken(completion):
        raise KeyError("oops")

    ran = []
    env = env_with(right, broken, lambda: ran.append(1) or 1.0)
    for r in group(env, FakeOpenAI(reverse), n=2):
        assert r.reward == 2.0  # 1 + 0 + 1: as verifiers' Rubric, only the function that broke scores 0
        assert r.reward_errors == {"broken": "raised KeyError: 'oops'"}
        assert r.metrics == {"right": 1.0, "broken": 0.0, "<lambda>": 1.0, "reward_errors": 1.0}
    assert len(ran) == 2


@pytest.mark.parametrize("value, why", [
    (math.nan, "returned nan"), (math.inf, "returned inf"), ("0.5", "returned str '0.5', not a number"),
    (None, "returned NoneType None, not a number"), ([1.0], "returned list [1.0], not a number"),
    (torch.tensor([1.0, 2.0]), "returned Tensor that float() refused"),
])
def test_nan_infinity_and_non_numbers_are_reward_errors(value, why):
    def odd():
        return value

    env = env_with(right, odd)
    [r] = group(env, FakeOpenAI(reverse), n=1)
    assert r.reward == 1.0 and r.metrics["reward_errors"] == 1.0 and r.reward_errors["odd"].startswith(why)
    assert r.metrics["odd"] == 0.0


@pytest.mark.parametrize("value", [True, 1, 0.5, torch.tensor(0.5)])
def test_numbers_of_any_kind_are_scores(value):
    env = env_with(lambda: value)
    [r] = group(env, FakeOpenAI(reverse), n=1)
    assert r.reward == float(value) and r.reward_errors == {}


def test_a_rubric_group_with_one_failing_function_keeps_the_other_rubrics_reward():
    env = vfrl.SingleTurnEnv(dataset=[{"question": "abc", "answer": "cba"}], rubric=vfrl.RubricGroup(
        [Rubric([right]), Rubric([lambda: math.nan])]))
    [r] = group(env, FakeOpenAI(reverse), n=1)
    assert r.reward == 1.0 and r.metrics["right"] == 1.0 and r.reward_errors == {"<lambda>": "returned nan"}


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_hanging_reward_function_is_given_up_at_the_time_limit_and_the_rollout_kept_scoring_it_zero(kind):
    """A sync function blocks its thread (an event loop cannot interrupt it), an async one its task."""
    release = threading.Event()

    def hangs_sync(completion):
        release.wait()
        return 1.0

    async def hangs_async(completion):
        await asyncio.Event().wait()

    hangs = hangs_sync if kind == "sync" else hangs_async
    ran_after = []
    env = env_with(right, hangs, lambda: ran_after.append(1) or 1.0)
    faults = RolloutFaults(timeout=LIMIT)
    try:
        rollouts = group(env, FakeOpenAI(reverse), n=2, faults=faults)
    finally:
        release.set()  # let the abandoned threads end
    assert len(rollouts) == 2 and faults.total == 0
    for r in rollouts:
        assert r.reward == 1.0 and r.metrics["right"] == 1.0 and r.metrics[hangs.__name__] == 0.0
        # the function that used the time up is the one to blame; the one after it was not run
        assert r.reward_errors == {hangs.__name__: "did not return within the rollout's time limit"}
    assert ran_after == []


def test_a_hung_sync_call_holds_up_no_other_call_nor_the_exit_of_the_process(tmp_path):
    done = run_script(
        tmp_path,
        "import asyncio, threading\n"
        "from vfrl.daemon_pool import DaemonPool\n"
        "pool = DaemonPool('t', size=1)\n"
        "async def main():\n"
        "    try:\n"
        "        await asyncio.wait_for(pool.run(threading.Event().wait), 0.2)\n"
        "    except TimeoutError:\n"
        "        pass\n"
        "    print(await pool.run(lambda: 'next'))\n"
        "asyncio.run(main())\n")
    assert done.returncode == 0 and done.stdout == "next\n", done.stderr


def test_a_thread_still_in_torch_at_exit_does_not_abort_the_process(tmp_path):
    """A reward function (a reward model, say) still running torch when the trainer exits: a plain
    interpreter shutdown aborts ("terminate called without an active exception", exit 134); exit_process
    keeps the exit code the trainer chose."""
    done = run_script(
        tmp_path,
        "import asyncio, sys, torch\n"
        "from vfrl.daemon_pool import DaemonPool, exit_process\n"
        "pool = DaemonPool('reward-model', size=2)\n"
        "def score():\n"
        "    while True:\n"
        "        torch.randn(256, 256) @ torch.randn(256, 256)\n"
        "async def main():\n"
        "    for _ in range(2):\n"
        "        asyncio.ensure_future(pool.run(score))\n"
        "    await asyncio.sleep(0.5)\n"
        "asyncio.run(main())\n"
        "exit_process(130, grace=float(sys.argv[1]))\n", "0.2")
    assert done.returncode == 130, done.stderr


def test_exit_process_waits_for_threads_about_to_finish(tmp_path):
    done = run_script(
        tmp_path,
        "import asyncio, atexit, time\n"
        "from vfrl.daemon_pool import DaemonPool, exit_process\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "pool = DaemonPool('t', size=1)\n"
        "async def main():\n"
        "    asyncio.ensure_future(pool.run(lambda: time.sleep(0.5)))\n"
        "    await asyncio.sleep(0.1)\n"
        "asyncio.run(main())\n"
        "exit_process(3, grace=30)\n")
    assert done.returncode == 3 and done.stdout == "atexit ran\n", done.stderr


def test_a_trainer_with_several_ranks_leaves_without_tearing_anything_down(tmp_path):
    """vf-train with several ranks exits with os._exit (trainer/cli.py KEPT): freeing its DDP model can deadlock
    in gloo's teardown. What it printed still arrives; nothing is torn down (no atexit hook runs)."""
    done = run_script(
        tmp_path,
        "import atexit\n"
        "from types import SimpleNamespace\n"
        "from vfrl.trainer import cli\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "cli.KEPT.append(SimpleNamespace(ranks=SimpleNamespace(world_size=2)))\n"
        "def app():\n"
        "    print('trained', end='')\n"
        "    raise SystemExit(0)  # as typer's app ends\n"
        "cli.app = app\n"
        "cli.main()\n")
    assert done.returncode == 0 and done.stdout == "trained", (done.stdout, done.stderr)


# ---- row 1: the per-rollout time limit ----

def test_a_stalled_rollout_is_dropped_at_its_time_limit_and_its_group_goes_on():
    """The group's first turns are one request (group_request.py); rollout 1's second turn stalls."""
    class TwoTurns(vfrl.MultiTurnEnv):
        def env_response(self, messages, state):
            return [{"role": "user", "content": "again"}]

    env = TwoTurns(dataset=[{"question": "abc"}], max_turns=2, rubric=Rubric([lambda completion: 1.0]))
    faults = RolloutFaults(timeout=LIMIT)
    rollouts = group(env, Stalling(lambda prompt, seed: seed == 1 and "again" in prompt), n=3, faults=faults)
    assert len(rollouts) == 2 and all(r.reward == 1.0 and len(r.turn_spans) == 2 for r in rollouts)
    assert faults.dropped == {"timed_out": 1} and "not done after 1s" in faults.first["timed_out"]


def test_a_stalled_environment_response_is_covered_by_the_same_limit():
    class Stuck(vfrl.MultiTurnEnv):
        async def env_response(self, messages, state):
            await asyncio.Event().wait()

    env = Stuck(dataset=[{"question": "abc"}], max_turns=3, rubric=Rubric([right]))
    faults = RolloutFaults(timeout=LIMIT)
    assert group(env, FakeOpenAI(reverse), n=1, faults=faults) == [] and faults.dropped == {"timed_out": 1}


def test_a_hung_sync_tool_is_abandoned_with_its_rollout():
    release = threading.Event()

    def lookup(key: str) -> str:
        """Look a key up.

        Args:
            key: what to look up
        """
        release.wait()
        return key

    env = vfrl.ToolEnv(tools=[lookup], dataset=[{"question": "abc"}], max_turns=3, rubric=Rubric([right]))
    client = FakeOpenAI(lambda prompt: '<tool_call>{"name": "lookup", "arguments": {"key": "k"}}</tool_call>',
                        tool_parser=True)
    faults = RolloutFaults(timeout=LIMIT)
    try:
        assert group(env, client, n=1, faults=faults) == [] and faults.dropped == {"timed_out": 1}
    finally:
        release.set()


def test_the_time_limit_starts_when_the_rollout_gets_its_request_slot():
    """One slot: the second rollout waits the whole limit behind the stalled first, then has its own
    (it does not wait on the group's stalled request: it sends its own, with seed 1)."""
    faults = RolloutFaults(timeout=LIMIT)
    rollouts = group(env_with(right), Stalling(lambda prompt, seed: seed == 0), n=2, faults=faults, concurrency=1)
    assert len(rollouts) == 1 and faults.dropped == {"timed_out": 1}


def test_without_a_faults_record_errors_propagate_as_before():
    with pytest.raises(openai.BadRequestError):
        group(env_with(right, questions=["x" * 80]), FakeOpenAI(reverse, max_model_len=40), n=1)


# ---- row 2: requests the server rejects ----

def test_a_rejected_first_request_drops_the_rollout_and_counts_why():
    faults = RolloutFaults()
    client = FakeOpenAI(reverse, max_model_len=40)
    assert group(env_with(right, questions=["x" * 80]), client, n=2, faults=faults) == []
    assert faults.dropped == {"rejected": 2}
    assert faults.first["rejected"] == "HTTP 400: This model's maximum context length is 40 tokens"


@pytest.mark.parametrize("code", [400, 413, 422])
def test_any_4xx_about_the_request_drops_only_that_rollout(code):
    error = status_error(openai.APIStatusError, code, "refused")
    faults = RolloutFaults()
    env = env_with(right, questions=["ok", "bad"])
    client = Failing("bad", error)
    assert len(group(env, client, n=2, example=0, faults=faults)) == 2
    assert group(env, client, n=2, example=1, faults=faults) == [] and faults.dropped == {"rejected": 2}


@pytest.mark.parametrize("error", [
    status_error(openai.InternalServerError, 500, "engine dead"),
    status_error(openai.AuthenticationError, 401, "bad key"),
    status_error(openai.NotFoundError, 404, "no such adapter"),
    status_error(openai.RateLimitError, 429, "slow down"),
    openai.APIConnectionError(request=httpx.Request("POST", "http://fake-vllm:8000/v1")),
], ids=["500", "401", "404", "429", "connection"])
def test_server_side_errors_are_not_per_rollout_faults_and_propagate(error):
    with pytest.raises(type(error)):
        group(env_with(right), Failing("abc", error), n=2, faults=RolloutFaults())


def test_a_later_turn_the_server_rejects_ends_the_rollout_but_keeps_its_turns():
    class Chat(vfrl.MultiTurnEnv):
        def env_response(self, messages, state):
            return [{"role": "user", "content": "again " * 5}]

    env = Chat(dataset=[{"question": "abc"}], max_turns=5, rubric=Rubric([lambda: 1.0]))
    faults = RolloutFaults()
    [r] = group(env, FakeOpenAI(lambda prompt: "a" * 10, max_model_len=90), n=1, faults=faults)
    assert faults.total == 0 and r.truncated and r.reward == 1.0
    assert r.error.startswith("HTTP 400: This model's maximum context length is 90 tokens")
    assert len(r.turn_spans) >= 1


# ---- rows 2-4: the step: a well-formed batch, counts, one warning line, the errors that stop the run ----

def orchestrator(env, client, **args):
    args = TrainerArgs(**{"rollouts_per_example": 2, "batch_size": 8, "micro_batch_size": 4, "max_tokens": 20,
                          "max_seq_len": 200, "rollout_timeout": LIMIT, "generation_timeout": 60, **args})
    return Orchestrator(env, client, args.generation), args


def test_a_lost_group_leaves_a_well_formed_batch_counted_in_the_step_metrics():
    calls = iter(range(100))
    env = env_with(right, questions=["ab", "cd", "x" * 80, "ef"])
    # every other reply is wrong (except for "ab"), so every group that is left has a reward spread
    orch, args = orchestrator(env, FakeOpenAI(lambda p: "ba" if next(calls) % 2 else reverse(p), max_model_len=60))
    batch = run(orch.generate(0, "m", 0))
    lost = batch.example_ids.index(2)
    assert batch.sizes() == [0 if i == lost else 2 for i in range(4)] and len(batch.rollouts) == 6
    assert batch.metrics == {"rollouts_dropped": 2.0, "rollouts_rejected": 2.0, "rollouts_timed_out": 0.0,
                             "rollouts_scoring_failed": 0.0, "rollouts_ended_early": 0.0, "reward_errors/right": 0.0}
    assert batch.warning == ("step 1: 2 of 8 rollouts dropped: 2 rejected "
                             "(HTTP 400: This model's maximum context length is 60 tokens)")
    tb, rewards = make_train_batch(batch.rollouts, args.batch, pad_id=0, group_sizes=batch.sizes())
    # a full batch's rows (the lost ones are padding without loss), advantages within each group that is left
    assert len(tb) == args.batch_size and tb.loss_mask[6:].sum() == 0 and tb.advantages[6:].tolist() == [0.0, 0.0]
    expected = [float(r) - float(rewards[i - i % 2: i - i % 2 + 2].mean()) for i, r in enumerate(rewards)]
    assert tb.advantages[:6].tolist() == pytest.approx(expected)
    assert tb.attention_mask[6:].sum(-1).tolist() == [1, 1]  # a padding row attends to one token, never none


def test_ragged_groups_get_advantages_and_std_scaling_of_their_own():
    from vfrl.learner.advantages import group_advantages, reward_stats

    r = torch.tensor([1.0, 0.0, 0.5, 3.0, 1.0])  # groups of 2, 0, 1, 2
    assert group_advantages(r, [2, 0, 1, 2]).tolist() == [0.5, -0.5, 0.0, 1.0, -1.0]
    scaled = group_advantages(r, [2, 0, 1, 2], scale_rewards=True)
    assert scaled[2] == 0.0 and torch.allclose(scaled[3:], torch.tensor([1.0, -1.0]) / (math.sqrt(2) + 1e-4))
    assert reward_stats(r, r, [2, 0, 1, 2])["zero_std_groups"] == pytest.approx(1 / 3)  # the group of one


def test_a_whole_batch_lost_stops_the_run_with_one_line():
    env = env_with(right, questions=["x" * 80, "y" * 80])
    orch, _ = orchestrator(env, FakeOpenAI(reverse, max_model_len=60), batch_size=4)
    with pytest.raises(BatchLost) as e:
        run(orch.generate(2, "m", 2))
    assert str(e.value) == ("step 3: all 4 rollouts were dropped: 4 rejected (HTTP 400: This model's maximum context "
                            "length is 60 tokens); nothing to train on, the run stops")


def test_reward_errors_are_counted_per_function_and_warned_about_below_the_limit():
    def flaky(completion):
        if completion[-1]["content"] == "fe":
            raise ValueError("cannot score 'fe'")
        return 1.0

    env = env_with(right, flaky, questions=["ab", "cd", "ef", "gh"])
    orch, _ = orchestrator(env, FakeOpenAI(reverse), max_reward_error_fraction=0.5)
    batch = run(orch.generate(0, "m", 0))
    assert batch.metrics["reward_errors/flaky"] == 2.0 and batch.metrics["reward_errors/right"] == 0.0
    assert [r.reward for r in batch.rollouts if r.reward_errors] == [1.0, 1.0]  # `right` still scored them
    assert batch.warning == ("step 1: reward function 'flaky' failed on 2 of 8, scored 0 "
                             "(raised ValueError: cannot score 'fe')")


def test_a_reward_function_failing_on_most_rollouts_stops_the_run_with_one_line():
    def mostly_broken(completion):
        if completion[-1]["content"] != "ba":
            raise ZeroDivisionError("division by zero")
        return 1.0

    env = env_with(right, mostly_broken, questions=["ab", "cd", "ef", "gh"])
    orch, _ = orchestrator(env, FakeOpenAI(reverse))
    with pytest.raises(RewardFunctionFailing) as e:
        run(orch.generate(0, "m", 0))
    assert str(e.value) == (
        "step 1: reward function 'mostly_broken' failed on 6 of 8 rollouts (more than "
        "trainer.args.max_reward_error_fraction = 0.5), e.g. it raised ZeroDivisionError: division by zero; "
        "fix the function, or raise the limit to train on through it")
    orch, _ = orchestrator(env, FakeOpenAI(reverse), max_reward_error_fraction=1.0)  # 1: never stops
    assert run(orch.generate(0, "m", 0)).metrics["reward_errors/mostly_broken"] == 6.0


def test_a_step_without_faults_logs_zero_counts_and_no_warning():
    orch, _ = orchestrator(env_with(right, questions=["ab", "cd", "ef", "gh"]), FakeOpenAI(reverse))
    batch = run(orch.generate(0, "m", 0))
    assert batch.warning is None and batch.group_sizes == [2, 2, 2, 2]
    assert batch.metrics == {"rollouts_dropped": 0.0, "rollouts_rejected": 0.0, "rollouts_timed_out": 0.0,
                             "rollouts_scoring_failed": 0.0, "rollouts_ended_early": 0.0, "reward_errors/right": 0.0}


def test_eval_counts_dropped_rollouts_and_survives_losing_them_all():
    faults = RolloutFaults()
    faults.drop("rejected", "HTTP 400: too long")
    assert summarize([], faults) == {"eval/num_rollouts": 0.0, "eval/rollouts_dropped": 1.0}


def test_a_verifiers_rollout_s_metrics_are_not_taken_for_reward_functions():
    """A verifiers 0.4 rollout's metrics (its rewards, `@vf.metric`s) name no vfrl rubric function: a scoring
    function that raises fails its episode, which is dropped instead (verifiers_v1.py)."""
    from vfrl.rollout_types import Rollout
    from vfrl.rollouts.step_faults import check_step

    def rollout(metrics):
        return Rollout(example_id=0, prompt=[], completion=[], answer="", prompt_ids=[1], completion_ids=[2],
                       completion_logprobs=[-0.1], completion_mask=[1], policy="policy-0", metrics=metrics)

    scored, v1 = rollout({"right": 1.0, "reward_errors": 0.0}), rollout({"correct": 1.0, "tool_calls": 1.0})
    metrics, warning = check_step(1, [v1, v1], RolloutFaults(), 2, 0.5)
    assert not any(k.startswith("reward_errors/") for k in metrics) and warning is None
    metrics, _ = check_step(1, [scored, v1], RolloutFaults(), 2, 0.5)
    assert {k for k in metrics if k.startswith("reward_errors/")} == {"reward_errors/right"}


def test_a_verifiers_scoring_failure_on_more_than_the_limit_stops_the_run_with_one_line():
    """A verifiers 0.4 episode whose reward raised is dropped (nothing was scored), not scored 0, but it counts
    against max_reward_error_fraction like a failing vfrl rubric function: of the rollouts asked for, since the
    failed ones are gone. Even when it took the whole batch, the line names the scoring, not just the loss."""
    from vfrl.rollout_types import Rollout
    from vfrl.rollouts.step_faults import check_step

    kept = Rollout(example_id=0, prompt=[], completion=[], answer="", prompt_ids=[1], completion_ids=[2],
                   completion_logprobs=[-0.1], completion_mask=[1], policy="policy-0", metrics={"exact": 1.0})

    def faults(n):
        f = RolloutFaults()
        for _ in range(n):
            f.drop("scoring_failed", "verifiers scoring failed, TaskError: KeyError: 'no reference'")
        return f

    metrics, warning = check_step(3, [kept] * 4, faults(4), 8, 0.5)  # 4 of 8: at the limit
    assert metrics["rollouts_scoring_failed"] == 4.0 and metrics["rollouts_dropped"] == 4.0
    assert warning == ("step 3: 4 of 8 rollouts dropped: 4 scoring failed (verifiers scoring failed, TaskError: "
                       "KeyError: 'no reference')")
    for left, failed in ([kept] * 3, 5), ([], 8):  # above it; the whole batch
        with pytest.raises(RewardFunctionFailing) as e:
            check_step(3, left, faults(failed), 8, 0.5)
        assert str(e.value) == (
            f"step 3: the environment's scoring failed on {failed} of 8 rollouts (more than "
            "trainer.args.max_reward_error_fraction = 0.5), e.g. verifiers scoring failed, TaskError: KeyError: "
            "'no reference'; fix the @vf.reward or @vf.metric, or raise the limit to train on through it")
    with pytest.raises(BatchLost):  # a limit of 1 never stops for scoring, but a batch with nothing left still does
        check_step(3, [], faults(8), 8, 1.0)


def test_a_pending_batch_keeps_its_group_sizes_and_warning_through_a_checkpoint():
    from vfrl.learner.checkpoint import batch_from_json, batch_to_json

    orch, _ = orchestrator(env_with(right, questions=["ab", "x" * 80]), FakeOpenAI(reverse, max_model_len=60),
                           batch_size=4)
    batch = run(orch.generate(0, "m", 0))
    again = batch_from_json(json.loads(json.dumps(batch_to_json(batch))))
    assert again.sizes() == batch.sizes() and 0 in again.sizes() and again.warning == batch.warning


def test_rollout_timeout_must_fit_in_the_batch_timeout():
    with pytest.raises(ValueError,
                       match=r"rollout_timeout = 300.0 is invalid: must be at most generation_timeout \(120\)"):
        TrainerArgs(generation_timeout=120)


def test_an_environment_with_only_an_eval_split_trains_on_it():
    """prime-environments' autodiff gives its rows as eval_dataset only: the rollouts sampled them (rows()), but the
    data order counted the empty train split, and vf-train spun at 100% CPU forever before its first step."""
    env = vfrl.SingleTurnEnv(eval_dataset=[{"question": q, "answer": q[::-1]} for q in ("ab", "cd", "ef", "gh")],
                             rubric=Rubric([right]))
    orch, _ = orchestrator(env, FakeOpenAI(reverse))
    batch = run(orch.generate(0, "m", 0))
    assert sorted(batch.example_ids) == [0, 1, 2, 3] and len(batch.rollouts) == 8
    assert all(r.reward == 1.0 for r in batch.rollouts)


def test_an_environment_with_no_rows_to_train_on_stops_in_one_line():
    from vfrl.rollouts.orchestrator import NoTrainingRows

    env = vfrl.SingleTurnEnv(dataset=lambda: [])  # a builder that found nothing
    with pytest.raises(NoTrainingRows, match=r"^environment 'SingleTurnEnv' has no rows to train on \(0 rows, 0 of "
                                             r"them held out for eval\)"):
        orchestrator(env, FakeOpenAI(reverse))
