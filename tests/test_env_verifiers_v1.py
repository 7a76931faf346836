"""verifiers 0.4 (`verifiers.v1`) environment packages, trained unchanged (vfrl/envs/verifiers_v1.py).

tests/v1_pkgs/v1_reverse is a small 0.4 package written only against verifiers' public API. The
light tests run it in-process against a fake of vLLM's `/inference/v1/generate` (tests/fake_generate.py);
the e2e test samples it through the real vLLM CPU server. Each needs verifiers 0.4 (vfrl's
`verifiers` extra), and those that run verifiers' own `null` harness uv too (it runs as a uv script); they are
skipped, saying so, without.
"""

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from vfrl.envs.verifiers_v1 import DroppedEpisode, episode_rollouts, error_text
from vfrl.inference.scale_out import find_uv, is_verifiers_package
from vfrl.run_dir import RunDir, read_jsonl

from conftest import BIN, sample_batch, served_batch

PKGS = Path(__file__).parent / "v1_pkgs"
sys.path.insert(0, str(PKGS))

try:
    import verifiers.v1  # noqa: F401

    HAVE_V1 = True
except ImportError:
    HAVE_V1 = False

needs_v1 = pytest.mark.skipif(not HAVE_V1, reason="verifiers 0.4 is not installed (pip install -e '.[verifiers]')")
needs_uv = pytest.mark.skipif(find_uv() is None,
                              reason="uv is not installed (verifiers runs its harnesses as uv scripts)")


# --- what becomes of an episode (no verifiers needed: episodes are duck-typed) ---

def fake_generated_batch(env, tiny_model, adapter: str, version: int, api_key: str = "k", examples: int = 2,
                         max_tokens: int = 16, reply=None):
    """One batch of `env` sampled through FakeGenerate serving `adapter` as policy `version` (replying `reply`);
    returns the batch and the requests the fake server got."""
    from fake_generate import FakeGenerate

    async def run():
        async with FakeGenerate(str(tiny_model), adapter=adapter, reply=reply) as fake:
            return (await sample_batch(env, fake.base_url, api_key, adapter, version, max_tokens, examples),
                    fake.requests)

    return asyncio.run(run())


def node(ids, mask, logprobs=()):
    """A message node: its tokens, which of them were sampled, and the sampled ones' logprobs."""
    return SimpleNamespace(token_ids=list(ids), mask=[bool(m) for m in mask], logprobs=list(logprobs))


def path(*nodes, trainable=True, messages=()):
    """A branch through `nodes`, with verifiers' spread of their masks and logprobs over its tokens."""
    ids = [t for n in nodes for t in n.token_ids]
    mask = [m for n in nodes for m in n.mask]
    lps = iter([lp for n in nodes for lp in n.logprobs])
    return SimpleNamespace(nodes=list(nodes), token_ids=ids, sampled_mask=mask, trainable=trainable,
                           logprobs=[next(lps) if m else 0.0 for m in mask], messages=list(messages))


def branch(ids, mask, logprobs, trainable=True, messages=()):
    """A branch of one node."""
    return path(node(ids, mask, [lp for lp, m in zip(logprobs, mask) if m]), trainable=trainable, messages=messages)


def episode(*traces, ok=True, errors=()):
    return SimpleNamespace(ok=ok, errors=list(errors), traces=list(traces))


def trace(*branches, reward=0.5, trainable=True, ok=True, errors=()):
    return SimpleNamespace(branches=list(branches), agent=SimpleNamespace(trainable=trainable), reward=reward,
                           rewards={"exact": SimpleNamespace(score=reward)}, metrics={"len": 3.0, "none": None},
                           is_truncated=False, ok=ok, errors=list(errors))


@needs_uv
def test_the_agents_uv_environment_is_compiled_to_bytecode_unless_the_user_says_otherwise(monkeypatch):
    """A rollout's agent is a fresh Python importing openai and mcp: with PYTHONDONTWRITEBYTECODE set (containers)
    and uv's default (no bytecode) it compiled them again on every rollout."""
    from vfrl.envs.verifiers_v1 import ensure_uv

    monkeypatch.setenv("PATH", os.environ["PATH"])  # restored afterwards: ensure_uv may prepend uv's folder
    monkeypatch.delenv("UV_COMPILE_BYTECODE", raising=False)
    ensure_uv("x")
    assert os.environ["UV_COMPILE_BYTECODE"] == "1"
    monkeypatch.setenv("UV_COMPILE_BYTECODE", "0")
    ensure_uv("x")
    assert os.environ["UV_COMPILE_BYTECODE"] == "0"


def test_a_multi_turn_branch_keeps_its_tokens_mask_and_logprobs():
    # prompt 3 tokens, a reply of 2, 2 environment tokens, a reply of 2
    b = branch([1, 2, 3, 10, 11, 4, 5, 12, 13], [0, 0, 0, 1, 1, 0, 0, 1, 1],
               [0.0, 0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.3, -0.4],
               messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                         {"role": "user", "content": "more"}, {"role": "assistant", "content": "b"}])
    (r,) = episode_rollouts(episode(trace(b, reward=0.75)), example_id=7, answer="x", policy="policy-3")
    assert r.prompt_ids == [1, 2, 3] and r.completion_ids == [10, 11, 4, 5, 12, 13]
    assert r.completion_mask == [1, 1, 0, 0, 1, 1]
    assert r.completion_logprobs == [-0.1, -0.2, 0.0, 0.0, -0.3, -0.4]
    assert r.turn_spans == [(0, 2), (4, 6)] and r.more_branches == []
    assert r.reward == 0.75 and r.metrics == {"exact": 0.75, "len": 3.0}
    assert r.prompt == [{"role": "user", "content": "q"}] and len(r.completion) == 3
    assert (r.example_id, r.answer, r.policy) == (7, "x", "policy-3")


def test_a_worked_example_in_the_prompt_stays_prompt_and_the_completion_starts_at_the_first_sampled_message():
    """A prompt may hold assistant and tool messages of its own (a worked example: tests/v1_pkgs/v1_products); the
    rollout's prompt and completion (console, rollout files) split where the model's own tokens begin."""
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "17 * 23?"},
            {"role": "assistant",
             "tool_calls": [{"id": "c0", "type": "function", "name": "multiply", "arguments": "{}"}]},
            {"role": "tool", "tool_call_id": "c0", "content": "391"}, {"role": "assistant", "content": "391"},
            {"role": "user", "content": "29 * 84?"}, {"role": "assistant", "content": "2436"}]
    nodes = [node([i], [0]) for i in range(6)] + [node([7, 8], [0, 1], [-0.5])]
    (r,) = episode_rollouts(episode(trace(path(*nodes, messages=msgs))), 0, "", "p")
    assert r.prompt == msgs[:6] and r.completion == msgs[6:]
    assert r.prompt_ids == [0, 1, 2, 3, 4, 5, 7] and r.completion_ids == [8]


def test_traces_of_agents_that_do_not_train_are_left_out():
    judge = trace(branch([1, 9], [0, 1], [0.0, -1.0]), trainable=False)
    (r,) = episode_rollouts(episode(judge, trace(branch([1, 2, 3], [0, 1, 1], [0.0, -0.5, -0.6]))), 0, "", "p")
    assert r.completion_ids == [2, 3]


def test_a_forked_trace_is_one_rollout_whose_branches_share_its_reward_and_train_each_token_once():
    """Two branches through a shared beginning (system prompt, question, first reply), then each its own
    context: the shared reply trains in the first branch only, the second branch's tokens from its own
    first sampled token on are its completion."""
    system, question = node([1, 2], [0, 0]), node([3], [0])
    reply = node([7, 10, 11], [0, 1, 1], [-0.1, -0.2])  # generation prompt 7, then two sampled tokens
    more, second = node([4], [0]), node([7, 12], [0, 1], [-0.3])
    rewritten, third = node([5, 6], [0, 0]), node([7, 13, 14], [0, 1, 1], [-0.4, -0.5])
    first_path = path(system, question, reply, more, second)
    other = path(system, question, reply, rewritten, third)
    (r,) = episode_rollouts(episode(trace(first_path, other, reward=0.25)), 0, "", "p")
    assert r.prompt_ids == [1, 2, 3, 7] and r.completion_ids == [10, 11, 4, 7, 12]
    assert r.completion_mask == [1, 1, 0, 0, 1] and r.completion_logprobs == [-0.1, -0.2, 0.0, 0.0, -0.3]
    (b,) = r.more_branches
    assert b.prompt_ids == [1, 2, 3, 7, 10, 11, 5, 6, 7] and b.completion_ids == [13, 14]  # the shared reply: context
    assert b.completion_mask == [1, 1] and b.completion_logprobs == [-0.4, -0.5]
    assert r.reward == 0.25
    # a branch that adds no sampled token of its own (a dangling fork of the shared beginning) is no row
    (r,) = episode_rollouts(episode(trace(first_path, path(system, question, reply))), 0, "", "p")
    assert r.more_branches == []
    # a branch verifiers marks untrainable (a compaction attempt the harness did not resume from) neither
    (r,) = episode_rollouts(episode(trace(first_path, path(system, question, reply, rewritten, third,
                                                             trainable=False))), 0, "", "p")
    assert r.more_branches == []


def test_an_episode_with_several_trainable_traces_is_a_rollout_per_trace():
    ep = episode(trace(branch([1, 2], [0, 1], [0, -1.0]), reward=1.0),
                 trace(branch([1, 3], [0, 1], [0, -2.0]), reward=0.0))
    a, b = episode_rollouts(ep, 4, "", "p")
    assert (a.completion_ids, a.reward, b.completion_ids, b.reward) == ([2], 1.0, [3], 0.0)
    assert a.example_id == b.example_id == 4


@pytest.mark.parametrize("ep", [
    episode(trace(branch([1, 2], [0, 0], [0, 0.0]))),
    episode(trace(branch([1, 2], [0, 1], [0, -1.0]), trainable=False)),
    episode(trace(ok=False, errors=[SimpleNamespace(type="HarnessError", message="exit 1\nlog")]), ok=False),
])
def test_episodes_it_cannot_train_are_dropped_with_a_one_line_reason(ep):
    with pytest.raises(DroppedEpisode) as e:
        episode_rollouts(ep, 0, "", "p")
    assert e.value.kind == "failed" and "\n" not in str(e.value)


@needs_v1
def test_a_forked_verifiers_trace_built_from_its_own_message_graph():
    """The same fork on verifiers' own classes: a Trace whose message graph has two leaves (the history after
    the first reply was rewritten), its branches walked by verifiers (`Trace.branches`), its reward from
    `@vf.reward`-style named rewards."""
    import verifiers.v1 as vf
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, Reward, TraceTask

    def msg(role, text, parent, ids, mask=(), logprobs=()):
        cls = {"system": vf.SystemMessage, "user": vf.UserMessage, "assistant": vf.AssistantMessage}[role]
        return MessageNode(message=cls(content=text), parent=parent, sampled=role == "assistant", token_ids=ids,
                           mask=list(mask) or [False] * len(ids), logprobs=list(logprobs))

    nodes = [msg("system", "s", None, [1, 2]), msg("user", "abc", 0, [3]),
             msg("assistant", "cba", 1, [7, 10, 11], [False, True, True], [-0.1, -0.2]),
             msg("user", "lamp", 2, [4]), msg("assistant", "pmal", 3, [7, 12], [False, True], [-0.3]),
             msg("user", "ok", 2, [5, 6]), msg("assistant", "ko", 5, [7, 13, 14], [False, True, True], [-0.4, -0.5])]
    t = vf.Trace(task=TraceTask(type="T", data=vf.TaskData(idx=0, prompt="abc")),
                 agent=AgentInfo(config=vf.AgentConfig()), nodes=nodes, ok=True, is_completed=True,
                 rewards={"exact": Reward(score=0.5, weight=1.0)})
    assert len(t.branches) == 2
    (r,) = episode_rollouts(SimpleNamespace(ok=True, errors=[], traces=[t]), 0, "", "p")
    assert r.prompt_ids == [1, 2, 3, 7] and r.completion_ids == [10, 11, 4, 7, 12]
    assert r.completion_mask == [1, 1, 0, 0, 1] and r.completion_logprobs == pytest.approx([-0.1, -0.2, 0, 0, -0.3])
    (b,) = r.more_branches
    assert b.prompt_ids == [1, 2, 3, 7, 10, 11, 5, 6, 7] and b.completion_ids == [13, 14]
    assert b.completion_logprobs == pytest.approx([-0.4, -0.5]) and r.reward == 0.5
    assert ([m["content"] for m in r.prompt] == ["s", "abc"]
            and [m["content"] for m in r.completion] == ["cba", "lamp", "pmal"])


def test_a_forked_rollout_trains_every_branch_as_a_row_with_its_advantage():
    """make_train_batch: a rollout's other branches are rows of their own with the rollout's advantage; the
    group's baseline counts the rollout once; a checkpoint's pending batch keeps them."""
    import dataclasses

    from vfrl.config import TrainerArgs
    from vfrl.rollout_types import Rollout, TokenBranch
    from vfrl.learner.batch import make_train_batch

    def rollout(reward, *more):
        return Rollout(example_id=0, prompt=[], completion=[], answer="", prompt_ids=[1, 2], completion_ids=[3, 4],
                       completion_logprobs=[-0.1, -0.2], completion_mask=[1, 1], policy="p", reward=reward,
                       more_branches=list(more))

    fork = TokenBranch(prompt_ids=[1, 5], completion_ids=[6, 7, 8], completion_logprobs=[-0.3, 0.0, -0.4],
                       completion_mask=[1, 0, 1])
    rollouts = [rollout(1.0, fork), rollout(0.0)]
    args = TrainerArgs(batch_size=2, rollouts_per_example=2, micro_batch_size=1, max_tokens=8)
    tb, rewards = make_train_batch(rollouts, args.batch, pad_id=0)
    assert rewards.tolist() == [1.0, 0.0] and len(tb) == 3
    assert tb.advantages.tolist() == [0.5, 0.5, -0.5]  # the fork trains with its rollout's advantage
    assert tb.input_ids[1].tolist() == [1, 5, 6, 7, 8]
    # position t predicts token t + 1: 6 and 8 were sampled, 7 is the environment's
    assert (tb.loss_mask[1].tolist() == [0, 1, 0, 1]
            and tb.sampling_logprobs[1].tolist() == pytest.approx([0, -0.3, 0, -0.4]))
    assert Rollout.from_dict(dataclasses.asdict(rollouts[0])) == rollouts[0]


def test_vf_vllm_serves_scale_out_for_every_package_kind_and_a_remote_server_needs_it_for_verifiers_packages():
    """One vf-vllm serves a classic package and a verifiers 0.4 one (vf-eval of each against the same server):
    "auto" turns the routes on whatever env.id names; a server vf-rl did not start is asked for them only when the
    package samples through them."""
    from vfrl.config import RLConfig
    from vfrl.inference.scale_out import scale_out_needed
    from vfrl.inference.server import config_argv

    assert is_verifiers_package("v1-reverse") and is_verifiers_package("v1_reverse")
    assert not is_verifiers_package("reverse-text") and not is_verifiers_package("no-such-env")
    if HAVE_V1:  # a taskset verifiers ships goes by its bare id, as in verifiers (not the game package `textarena`)
        assert is_verifiers_package("textarena")

    def argv(env, **inf):
        return config_argv(RLConfig.model_validate({"model": "m", "env": {"id": env}, "inference": inf}))

    assert "--enable-scale-out" in argv("v1-reverse") and "--enable-scale-out" in argv("reverse-text")
    assert "--enable-scale-out" in argv("reverse-text", enable_scale_out=True)
    assert "--enable-scale-out" not in argv("v1-reverse", enable_scale_out=False)
    assert scale_out_needed("auto", "v1-reverse") and not scale_out_needed("auto", "reverse-text")
    assert scale_out_needed(True, "reverse-text") and not scale_out_needed(False, "v1-reverse")


def test_a_server_without_scale_out_is_named_with_vfrls_setting():
    from types import SimpleNamespace

    line = error_text(SimpleNamespace(type="HarnessError", message=(
        "PermissionDeniedError: Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out to "
        "enable them.")))
    assert line.endswith("(verifiers 0.4 packages sample through vLLM's scale-out routes: serve the model with "
                         "vf-vllm (its inference.enable_scale_out, auto or true, serves them))")


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
    assert COMPAT_MIDDLEWARE not in config_argv(RLConfig.model_validate(
        {"model": "m", "env": {"id": "v1-reverse"}, "inference": {"enable_scale_out": False}}))


def test_a_verifiers_package_starts_without_uv(monkeypatch):
    """Its seats play verifiers' chat loop in the trainer's process (vfrl_chat_harness); only a seat that pins one of
    verifiers' own harnesses needs uv, which vf-train says in one line as it loads the package
    (test_missing_uv_at_load_is_one_line_for_a_seat_that_runs_a_verifiers_harness)."""
    from vfrl.inference import scale_out
    from vfrl.launcher.preflight import environment_problem

    monkeypatch.setattr(scale_out, "find_uv", lambda: None)
    assert environment_problem("v1-reverse") is None
    assert environment_problem("reverse-text") is None


def test_a_verifiers_package_without_verifiers_installed_is_one_line(monkeypatch):
    from vfrl.envs.loader import EnvironmentLoadError, load_environment

    monkeypatch.setitem(sys.modules, "verifiers", None)  # import verifiers fails, as when it is not installed
    monkeypatch.delitem(sys.modules, "v1_reverse", raising=False)
    with pytest.raises(EnvironmentLoadError, match=r"verifiers extra") as e:
        load_environment("v1-reverse")
    assert "\n" not in str(e.value)


@needs_v1
def test_env_renderer_names_a_renderers_config_or_is_refused_in_one_line():
    """env.renderer: a local fine-tune's path matches no renderer by name (verifiers then uses the chat
    template, without tools); the user names one, and a wrong name or field is one line before vLLM starts."""
    from renderers.configs import DefaultRendererConfig, Qwen3RendererConfig

    from vfrl.config import RLConfig
    from vfrl.envs.verifiers_v1 import V1EnvironmentError, renderer_config
    from vfrl.launcher.preflight import environment_problem

    assert isinstance(renderer_config("e", "qwen3"), Qwen3RendererConfig)
    made = renderer_config("e", {"name": "default", "tool_parser": "hermes-text"})
    assert isinstance(made, DefaultRendererConfig) and made.tool_parser == "hermes-text"
    with pytest.raises(V1EnvironmentError, match=r"no renderer is named 'qwen9' \(renderers has: .*qwen3,") as e:
        renderer_config("e", "qwen9")
    assert "\n" not in str(e.value)
    with pytest.raises(V1EnvironmentError, match=r"enable_thinking: Input should be a valid boolean"):
        renderer_config("e", {"name": "qwen3", "enable_thinking": "perhaps"})
    for spec in ("qwen3", {"name": "default", "tool_parser": "hermes-text"}):
        cfg = RLConfig.model_validate({"model": "m", "env": {"id": "v1-reverse", "renderer": spec}})
        assert cfg.env.renderer == spec
    assert environment_problem("v1-reverse", "default") is None
    assert "no renderer is named 'qwen9'" in environment_problem("v1-reverse", "qwen9")
    assert environment_problem("reverse-text", "qwen3") == (
        "env.renderer = 'qwen3' is for verifiers 0.4 packages, and 'reverse-text' is not one (vLLM renders its "
        "prompts with the model's chat template): remove env.renderer")


@needs_v1
def test_env_renderer_reaches_verifiers_train_client_and_vf_eval_says_a_wrong_one_in_one_line():
    from renderers.configs import DefaultRendererConfig
    from typer.testing import CliRunner

    from vfrl.envs.cli.eval import app as eval_app
    from vfrl.envs.loader import EnvironmentLoadError, load_configured_environment

    env = load_configured_environment("v1-reverse", {}, {"name": "default", "tool_parser": "hermes-text"})
    client = SimpleNamespace(api_key="k", base_url="http://127.0.0.1:1/v1/")
    sent = env.context(client, "policy-1", {"temperature": 1.0}).client
    assert isinstance(sent.renderer, DefaultRendererConfig) and sent.renderer.tool_parser == "hermes-text"
    assert load_configured_environment("v1-reverse", {}).renderer is None  # verifiers picks it from the model
    with pytest.raises(EnvironmentLoadError, match=r"is for verifiers 0.4 packages, and 'reverse-text' is not one"):
        load_configured_environment("reverse-text", {}, "qwen3")
    done = CliRunner().invoke(eval_app, ["v1-reverse", "--renderer", "qwen9", "-b", "http://127.0.0.1:1/v1"])
    assert done.exit_code != 0 and "no renderer is named 'qwen9'" in done.output
    assert "Traceback" not in done.output


# --- the package itself, in-process, against the fake generate route ---

def write_two_seats(folder: Path) -> None:
    """A package whose vf.Env has four seats: `player` pins no harness, `referee` pins verifiers' `bash`, `dealer`
    its `null` (as verifiers' kuhn_poker pins both players'), `banker` `null` with a variable for its program."""
    (folder / "two_seats.py").write_text(
        "import verifiers.v1 as vf\n"
        "from v1_reverse import ReverseTaskset\n"
        "class Seats(vf.EnvConfig):\n"
        "    player: vf.AgentConfig = vf.AgentConfig()\n"
        "    referee: vf.AgentConfig = vf.AgentConfig(harness={'id': 'bash'})\n"
        "    dealer: vf.AgentConfig = vf.AgentConfig(harness={'id': 'null', 'tool_timeout': 30})\n"
        "    banker: vf.AgentConfig = vf.AgentConfig(harness={'id': 'null', 'env': {'CHIPS': '5'}})\n"
        "class TwoSeats(vf.Env[Seats]):\n"
        "    async def run(self, task, agents):\n"
        "        await agents.player.run(task)\n"
        "__all__ = ['ReverseTaskset', 'TwoSeats']\n")


@needs_v1
def test_missing_uv_at_load_is_one_line_for_a_seat_that_runs_a_verifiers_harness(tmp_path, monkeypatch):
    from vfrl.envs import verifiers_v1
    from vfrl.envs.loader import EnvironmentLoadError, load_environment
    from vfrl.envs.verifiers_v1 import CHAT_HARNESS, V1Environment, V1EnvironmentError

    monkeypatch.setattr(verifiers_v1, "find_uv", lambda: None)
    assert load_environment("v1-reverse").v1_env.config.agent.harness.id == CHAT_HARNESS  # in-process: no uv
    with pytest.raises(V1EnvironmentError, match=r"uv is not installed") as e:
        V1Environment("v1-reverse", harness="null")
    assert "\n" not in str(e.value)
    write_two_seats(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(EnvironmentLoadError, match=r"a seat that runs one of verifiers' harnesses as a uv script, "
                                                   r"and uv is not installed"):
        load_environment("two-seats")


@needs_v1
def test_a_module_first_on_the_path_under_a_bundled_environments_name_is_loaded_and_named(tmp_path, monkeypatch,
                                                                                        caplog):
    """verifiers' own reverse_text example on PYTHONPATH, beside vfrl's bundled reverse-text (the same module name):
    the entry point of the bundled package names `reverse_text:load_environment`, Python imports the other, and the
    load stopped at a function that package never had. A verifiers 0.4 package found first loads as one; another
    kind stops in one line naming where it came from; either way the log says which module was taken."""
    import logging
    from importlib.metadata import PackageNotFoundError, distribution

    from vfrl.envs.loader import EnvironmentLoadError, load_environment
    from vfrl.envs.verifiers_v1 import V1Environment
    from vfrl.package_folders import installed_from

    try:
        bundled = installed_from(distribution("reverse-text"))
    except PackageNotFoundError:
        bundled = None
    if bundled is None or not (bundled / "reverse_text.py").is_file():
        pytest.skip("vfrl's bundled reverse-text is not installed editable from a checkout")
    theirs, plain = tmp_path / "v1" / "reverse_text", tmp_path / "plain" / "reverse_text"
    theirs.mkdir(parents=True), plain.mkdir(parents=True)
    (theirs / "__init__.py").write_text("from v1_reverse import ReverseTaskset\n__all__ = ['ReverseTaskset']\n")
    (plain / "__init__.py").write_text("")
    monkeypatch.delitem(sys.modules, "reverse_text", raising=False)  # put back (vfrl's) when the test ends
    monkeypatch.syspath_prepend(str(theirs.parent))
    with caplog.at_level(logging.WARNING):
        env = load_environment("reverse-text")
    assert isinstance(env, V1Environment) and len(env.dataset) == 6
    assert (f"environment 'reverse-text': reverse_text is imported from {theirs}, which comes before the one of the "
            "installed reverse-text on the path (PYTHONPATH): loading that one") in caplog.messages
    sys.modules.pop("reverse_text")
    monkeypatch.syspath_prepend(str(plain.parent))
    with pytest.raises(EnvironmentLoadError) as e:
        load_environment("reverse-text")
    assert str(e.value) == (f"environment 'reverse-text' (module reverse_text at {plain}, before package reverse-text "
                            "0.1.0's): importing reverse_text:load_environment raised AttributeError: module "
                            "'reverse_text' has no attribute 'load_environment'")


@needs_v1
def test_a_harness_package_named_as_an_environment_is_said_to_be_one(monkeypatch):
    """verifiers' environments/ holds a harness package too (compact): named as an environment, the line says what it
    is rather than that it lacks load_environment()."""
    from vfrl.envs.loader import EnvironmentNotFound, load_environment

    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "benchmarks" / "v1_harness_bounds"))
    with pytest.raises(EnvironmentNotFound) as e:
        load_environment("bound_no_model_call")
    assert str(e.value) == ("environment 'bound_no_model_call' (module bound_no_model_call) is a verifiers 0.4 harness "
                            "package (it exports NoModelCallHarness), not an environment: a taskset's roles name it as "
                            "their harness")


@needs_v1
def test_orchestrator_samples_a_v1_package_through_the_generate_route(tiny_model):
    """The trainer's own Orchestrator, unchanged, on a verifiers 0.4 package: every Rollout's ids are
    exactly what was sent to and returned by /inference/v1/generate, with its mask, logprobs and reward."""
    from vfrl.envs.loader import load_environment
    from vfrl.envs.verifiers_v1 import V1Environment

    env = load_environment("v1-reverse")
    assert isinstance(env, V1Environment) and len(env.dataset) == 6
    assert env.dataset[1]["prompt"] == [{"role": "system", "content": "Reverse the text."},
                                       {"role": "user", "content": "hello"}]

    batch, requests = fake_generated_batch(env, tiny_model, "policy-2", 2, api_key="the-key", examples=1)
    assert len(batch.rollouts) == 2 and batch.sizes() == [2] and batch.metrics["rollouts_dropped"] == 0
    (request,) = requests  # the group's two first turns as one request (verifiers_group_request)
    assert request["auth"] == "Bearer the-key"
    assert request["body"]["model"] == "policy-2"  # the adapter, chosen by model name
    sent = request["body"]["sampling_params"]
    assert sent["n"] == 2 and "vfrl_group_member" not in sent
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
def test_a_multi_turn_package_plays_its_own_env_and_its_turns_get_no_loss(tiny_model):
    """tests/v1_pkgs/v1_two_tries exports a vf.Env that plays two conversations per episode, each sending a second
    word after the first reply: verifiers runs that Env (not its single-agent one), each conversation is a
    trace and a rollout of its own with its own reward (the group holds both of every episode), each turn
    extends one token sequence (one branch, never re-tokenized), the sampled replies have mask 1 and the
    environment's turn between them mask 0; the batch trains one row per trace."""
    from transformers import AutoTokenizer

    from vfrl.config import TrainerArgs
    from vfrl.envs.loader import load_environment
    from vfrl.learner.batch import make_train_batch

    env = load_environment("v1-two-tries")
    assert type(env.v1_env).__name__ == "TwoTriesEnv"

    batch, requests = fake_generated_batch(env, tiny_model, "policy-1", 1, examples=1)
    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    # 1 example x 2 episodes x 2 traces, each trace two requests; the first traces' first turns are one request (n
    # = 2), an episode's second trace asks alone (verifiers_group_request: one share of the group per episode)
    assert len(batch.rollouts) == 4 and batch.sizes() == [4] and batch.metrics["rollouts_dropped"] == 0
    assert len(requests) == 7 and all(r.more_branches == [] for r in batch.rollouts)
    assert sorted(q["body"]["sampling_params"].get("n", 1) for q in requests) == [1] * 6 + [2]
    tb, _ = make_train_batch(batch.rollouts, TrainerArgs(batch_size=2, rollouts_per_example=2, max_tokens=16).batch, 0,
                             batch.sizes())
    assert len(tb) == 4 and tb.loss_mask.sum() == sum(sum(r.completion_mask) for r in batch.rollouts)
    for r in batch.rollouts:
        first, second = env.tasks[r.example_id].data.prompt_text, env.tasks[r.example_id].data.second
        (a, b), (c, d) = r.turn_spans
        assert a == 0 and tok.decode(r.completion_ids[a:b]) == first[::-1] + tok.eos_token
        assert tok.decode(r.completion_ids[c:d]) == second[::-1] + tok.eos_token
        assert r.completion_mask == [1] * b + [0] * (c - b) + [1] * (d - c) and d == len(r.completion_ids)
        assert second in tok.decode(r.completion_ids[b:c])  # the environment's turn, no loss
        assert r.completion_logprobs[b:c] == [0.0] * (c - b)
        turn_two = next(q["body"]["token_ids"] for q in requests if len(q["body"]["token_ids"]) > len(r.prompt_ids)
                        and q["body"]["token_ids"][: len(r.prompt_ids)] == r.prompt_ids)
        assert turn_two == r.prompt_ids + r.completion_ids[:c]  # what vLLM was sent for turn two, as trained
        assert r.reward == 1.0 and r.metrics == {"reversed_each": 1.0, "turns": 2.0}


@needs_v1
def test_every_role_of_a_package_env_runs_here_with_the_chat_harness_unless_it_pins_one(tmp_path, monkeypatch):
    """A package's vf.Env may name its seats anything: each runs here, in verifiers' subprocess runtime (never its
    default remote sandbox); a seat without a harness gets the chat harness vfrl names (in-process by default,
    verifiers' `null` on request), one that pins its own keeps it, except verifiers' `null` (the same chat program)
    pinned with no variables for its program: in-process by default too, its other settings kept."""
    import verifiers.v1 as vf

    from vfrl.envs.verifiers_v1 import CHAT_HARNESS, env_config

    write_two_seats(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    raw = env_config(vf, "two-seats", {}, CHAT_HARNESS)
    subprocess_runtime = {"type": "subprocess"}
    assert raw == {"taskset": {"id": "two-seats"},
                   "player": {"runtime": subprocess_runtime, "harness": {"id": CHAT_HARNESS}},
                   "referee": {"runtime": subprocess_runtime},
                   "dealer": {"runtime": subprocess_runtime, "harness": {"id": CHAT_HARNESS, "tool_timeout": 30}},
                   "banker": {"runtime": subprocess_runtime}}
    config = vf.resolve_env_config(raw)
    assert config.player.harness.id == config.dealer.harness.id == CHAT_HARNESS
    assert config.dealer.harness.tool_timeout == 30
    assert config.referee.harness.id == "bash" and config.banker.harness.id == "null"
    assert {config.player.runtime.type, config.referee.runtime.type, config.dealer.runtime.type} == {"subprocess"}
    by_process = env_config(vf, "two-seats", {}, "null")
    assert by_process["dealer"] == by_process["banker"] == {"runtime": subprocess_runtime}
    assert env_config(vf, "v1-reverse", {}, "null") == {
        "taskset": {"id": "v1-reverse"}, "agent": {"runtime": {"type": "subprocess"}, "harness": {"id": "null"}}}


def lost_batch(env, tiny_model, **fake) -> str:
    """The one line of the BatchLost that a batch of 2 episodes of `env`, all dropped, stops with (FakeGenerate with
    `fake`)."""
    from openai import AsyncOpenAI

    from fake_generate import FakeGenerate
    from vfrl.config import TrainerArgs
    from vfrl.rollouts.orchestrator import Orchestrator
    from vfrl.rollouts.step_faults import BatchLost

    async def run():
        async with FakeGenerate(str(tiny_model), **fake) as fake_server:
            client = AsyncOpenAI(base_url=fake_server.base_url, api_key="k")
            args = TrainerArgs(batch_size=2, rollouts_per_example=2, max_tokens=8, eval_strategy="no")
            try:
                return await Orchestrator(env, client, args.generation).generate(0, "policy-0", 0)
            finally:
                await env.aclose()

    with pytest.raises(BatchLost) as e:
        asyncio.run(run())
    assert "\n" not in str(e.value)
    return str(e.value)


@needs_v1
@pytest.mark.parametrize("harness", ["vfrl_chat_harness", pytest.param("null", marks=needs_uv)])
def test_a_failing_episode_is_dropped_and_counted(tiny_model, harness):
    """A server that refuses every generate request: each episode fails, is dropped and counted, and a
    batch with nothing left stops in one line; the chat loop's failure, in this process or in its own, is the
    harness's."""
    from vfrl.envs.verifiers_v1 import V1Environment

    said = lost_batch(V1Environment("v1-reverse", harness=harness), tiny_model, refuse=True)
    assert re.search(r"all 2 rollouts were dropped: 2 failed \(verifiers episode failed, ProviderError: Error code: "
                     r"400 - .*refused by the fake server", said), said


FRAMES = "".join(f'  File "<verifiers chat program>", line {n}, in chat\n    await step(x=1)\n' for n in range(9))


@pytest.mark.parametrize("stderr", [
    f"Traceback (most recent call last):\n{FRAMES}openai.APIConnectionError: Connection error.\n",
    # the tail verifiers keeps of a long one: an exception group's, cut mid-path
    "thon3.11/site-packages/mcp/client/streamable_http.py\", line 323, in post\n"
    + "".join(f"    | {line}\n" for line in FRAMES.splitlines())
    + "    | openai.APIConnectionError: Connection error.\n    +------------------------------------\n",
])
def test_a_harness_that_exited_on_a_traceback_is_dropped_with_the_exception_that_ended_it(stderr):
    """verifiers gives a harness program's stderr (its tail, when long) as the error's message: the reason kept
    its first 300 characters, "Traceback (most recent call last): File ...", and never reached what went wrong."""
    failed = SimpleNamespace(type="HarnessError", message=f"harness 'h' exited 1: {stderr}")
    with pytest.raises(DroppedEpisode) as e:
        episode_rollouts(episode(trace(ok=False, errors=[failed]), ok=False), 0, "", "p")
    assert str(e.value) == ("verifiers episode failed, HarnessError: harness 'h' exited 1: openai.APIConnectionError: "
                            "Connection error.")


@needs_v1
def test_tools_for_a_model_whose_template_has_none_stop_in_a_line_that_says_what_to_set(tiny_model, monkeypatch):
    """v1_calc offers a tool; the tiny model's chat template has no tool syntax, so the renderer verifiers picks
    refuses the request, and every episode ends: the batch's line says so and names env.renderer."""
    from vfrl.envs.verifiers_v1 import V1Environment

    monkeypatch.setenv("PYTHONPATH", str(PKGS))  # verifiers starts the tool server as `python -m v1_calc.tools`
    said = lost_batch(V1Environment("v1-calc"), tiny_model)
    assert re.search(r"all 2 rollouts were dropped: 2 failed \(verifiers episode failed, HarnessError: .* exited 1: "
                     r"openai\.\w+Error: .*does not support tools.* set env\.renderer to a renderer with a tool_parser",
                     said), said


@needs_v1
def test_a_taskset_reward_that_raises_is_a_counted_scoring_failure(tiny_model):
    """v1_flaky_score's reward raises on its odd tasks: verifiers fails those episodes (TaskError, before any
    reward is recorded), and vfrl drops them as scoring failures, counted apart (rollouts_scoring_failed) and
    held to max_reward_error_fraction (test_rollout_faults.py), as a failing vfrl rubric function is."""
    from vfrl.envs.loader import load_environment

    # the 4 tasks, 2 episodes each; 4 of the 8 fail: at the default limit (0.5), not above it
    batch, _ = fake_generated_batch(load_environment("v1-flaky-score"), tiny_model, "policy-0", 0, examples=4)
    assert sorted({r.example_id % 2 for r in batch.rollouts}) == [0] and len(batch.rollouts) == 4
    assert batch.metrics["rollouts_scoring_failed"] == 4.0 and batch.metrics["rollouts_dropped"] == 4.0
    # the reward that raised, named with its line (verifiers' own message names the task class only)
    assert ("4 of 8 rollouts dropped: 4 scoring failed (verifiers scoring failed in @vf.reward exact "
            "(v1_flaky_score/__init__.py:22), TaskError:") in batch.warning, batch.warning
    assert "no reference for task" in batch.warning and "\n" not in batch.warning


# --- verifiers' chat loop in this process (src/vfrl_chat_harness) ---

TOY_PROGRAM = """
import argparse, asyncio, traceback
from pathlib import Path
from openai import DefaultAsyncHttpxClient

CLIENTS, PARSERS = [], []

def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--word", required=True)
    parser.add_argument("--initial-messages-file", default="")
    PARSERS.append(parser)
    return parser.parse_args()

async def main():
    args = parse_args()
    CLIENTS.append(DefaultAsyncHttpxClient())  # left open, as verifiers' program leaves its client
    await asyncio.sleep(0.01)  # the other runs go on meanwhile
    if Path(args.initial_messages_file).read_text() != args.word:
        raise SystemExit(3)
    if args.word == "transport":
        try:
            raise ConnectionError("interception unreachable")
        except ConnectionError as error:
            traceback.print_exc()
            raise SystemExit(97) from error
    if args.word == "raise":
        raise ValueError("bad reply")

if __name__ == "__main__":
    raise SystemExit("the entry point ran")
"""


@needs_v1
def test_the_in_process_program_reads_its_own_arguments_and_exits_as_its_process_would(tmp_path):
    """Runs at once, each with its argv (the messages file given relative to the program's directory, as
    verifiers writes it), each ending as a process would: its exit code, its stderr, its HTTP clients closed, its
    files gone (the program removes none of them here). The parser the program builds on every run is built once."""
    from vfrl_chat_harness import InProcess

    async def run(word: str | None, i: int):
        (tmp_path / str(i)).mkdir()
        runtime = InProcess(tmp_path / str(i))
        await runtime.write(f".messages-{i}.json", (word or "").encode())
        program = await runtime.prepare_uv_script(TOY_PROGRAM)
        argv = [*program, f"--initial-messages-file=.messages-{i}.json", *([f"--word={word}"] if word else [])]
        return await runtime.run_program(argv, {})

    async def all_at_once():
        return await asyncio.gather(*(run(w, i) for i, w in enumerate(["ok", "transport", "raise", None, "fine"])))

    ok, transport, raised, no_word, fine = asyncio.run(all_at_once())
    assert (ok.exit_code, ok.stderr, fine.exit_code) == (0, "", 0)
    assert transport.exit_code == 97 and "ConnectionError: interception unreachable" in transport.stderr
    assert raised.exit_code == 1 and raised.stderr.rstrip().endswith("ValueError: bad reply")
    assert no_word.exit_code == 2 and "the following arguments are required: --word" in no_word.stderr
    from vfrl_chat_harness import chat_program

    clients = chat_program(TOY_PROGRAM).CLIENTS
    assert len(clients) == 4 and all(c.is_closed for c in clients)  # the run without --word made none
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len({id(p) for p in chat_program(TOY_PROGRAM).PARSERS}) == 1


GROUPS_PROGRAM = """
import argparse
from openai import DefaultAsyncHttpxClient

async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--a", type=int, required=True)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--x", action="store_true")
    group.add_argument("--y", action="store_true")
    args = parser.parse_args()
    if args.a != 1 + args.x:
        raise SystemExit(5)
"""


@needs_v1
def test_an_in_process_program_whose_parser_has_groups_builds_it_each_run(tmp_path):
    """A parser given an argument group (verifiers' program has none) is not kept: a second run's group would
    conflict with the first's."""
    from vfrl_chat_harness import InProcess

    async def runs():
        runtime = InProcess(tmp_path)
        program = await runtime.prepare_uv_script(GROUPS_PROGRAM)
        return [await runtime.run_program([*program, *argv], {}) for argv in (["--a=1"], ["--a=2", "--x"],
                                                                               ["--a=1", "--x", "--y"])]

    first, second, both = asyncio.run(runs())
    assert (first.exit_code, second.exit_code, first.stderr + second.stderr) == (0, 0, "")
    assert both.exit_code == 2 and "not allowed with argument" in both.stderr


FETCH_PROGRAM = """
import argparse
from openai import DefaultAsyncHttpxClient

async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    client = DefaultAsyncHttpxClient()  # a client per run, as verifiers' program makes one, left open
    (await client.get(parser.parse_args().url)).raise_for_status()
"""


@needs_v1
def test_in_process_runs_of_one_event_loop_reuse_their_connections(tmp_path):
    """Each run makes its own client (and closes it at its end), yet runs one after another in an event loop talk
    over one kept-alive connection, where a process per run connected anew each time; another loop gets its own."""
    from aiohttp import web

    from vfrl_chat_harness import POOLS, InProcess

    pools = []

    async def runs(count: int) -> set:
        peers = set()

        async def hello(request):
            peers.add(request.transport.get_extra_info("peername"))
            return web.Response(text="hi")

        app = web.Application()
        app.router.add_get("/", hello)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/"
        try:
            for i in range(count):
                runtime = InProcess(tmp_path)
                program = await runtime.prepare_uv_script(FETCH_PROGRAM)
                result = await runtime.run_program([*program, f"--url={url}"], {})
                assert result.exit_code == 0, result.stderr
        finally:
            pools.extend(POOLS[asyncio.get_running_loop()].values())
            await runner.cleanup()
        return peers

    assert len(asyncio.run(runs(3))) == 1  # one connection for three runs
    assert len(asyncio.run(runs(2))) == 1  # a new loop: its own pool, no connection of the old loop's
    assert len(pools) == 2 and all(p.session.closed for p in pools)  # closed with their loops, no "Unclosed" line


def calc_reply(text: str) -> str:
    """v1_calc's conversation as the tool model holds it: asked to add, it calls `add`; shown the result, says it."""
    from tool_model import call_text

    last = text.rsplit("<|im_start|>", 2)[-2]  # the message before the generation prompt
    return last.split("\n", 1)[1].split("<|im_end|>")[0] if last.startswith("tool\n") else call_text(2, 3)


@needs_v1
@needs_uv
@pytest.mark.parametrize("package, examples", [("v1-reverse", 2), ("v1-two-tries", 1), ("v1-flaky-score", 2),
                                               ("v1-calc", 1), ("v1-pinned-null", 2)])
def test_the_in_process_chat_harness_gives_what_verifiers_null_harness_gives(tiny_model, tmp_path, monkeypatch,
                                                                           package, examples):
    """The same batch through verifiers' `null` harness (its chat program, a uv-script process per rollout) and
    through vfrl's in-process one (that program, run here, no process started): vLLM gets the same requests, and
    the rollouts are the same (ids, mask, logprobs, reward, metrics, branches), as are the drops and their reasons.
    v1-pinned-null's seat pins `null` itself: by default it is played in-process too.
    v1-calc's call goes to its MCP tool server and the result back to the model (a tokenizer with tool tokens and
    the qwen3 tool parser, as tests/tool_model.py's model)."""
    from verifiers.v1.runtimes.subprocess import SubprocessRuntime

    from vfrl.envs.verifiers_v1 import CHAT_HARNESS, V1Environment

    model, reply, max_tokens = tiny_model, None, 16
    if package == "v1-calc":
        from tool_model import TOOL_TEMPLATE, TOOL_TOKENS

        from vfrl.tiny_model import build_tokenizer

        model, reply, max_tokens = tmp_path / "tool-tokenizer", calc_reply, 64
        build_tokenizer(extra_special=TOOL_TOKENS, chat_template=TOOL_TEMPLATE).save_pretrained(model)
        monkeypatch.setenv("PYTHONPATH", str(PKGS))  # verifiers starts the tool server as `python -m v1_calc.tools`

    def batch(harness: str):
        env = V1Environment(package, harness=harness)
        if package == "v1-calc":
            env.use_renderer({"name": "default", "tool_parser": "qwen3"})
        return fake_generated_batch(env, model, "policy-0", 0, examples=examples, max_tokens=max_tokens, reply=reply)

    def seen(b, requests):
        rollouts = [(r.example_id, r.prompt_ids, r.completion_ids, r.completion_mask, r.completion_logprobs, r.reward,
                     r.metrics, r.truncated, r.turn_spans, r.more_branches) for r in b.rollouts]
        drops = {k: v for k, v in b.metrics.items() if k.startswith("rollouts_")}
        return sorted(json.dumps(q["body"], sort_keys=True) for q in requests), rollouts, drops, b.warning

    by_process = seen(*batch("null"))

    async def no_process(self, argv, env):
        raise AssertionError(f"the in-process harness started a program: {argv}")

    monkeypatch.setattr(SubprocessRuntime, "run_program", no_process)
    in_process = seen(*batch(CHAT_HARNESS))
    assert in_process == by_process
    requests, rollouts, drops, warning = in_process
    assert rollouts and sum(json.loads(q)["sampling_params"].get("n", 1) for q in requests) >= len(rollouts)
    if package == "v1-calc":
        assert all(r[6] == {"said_the_sum": 1.0, "tool_calls": 1.0} for r in rollouts)  # the tool answered


@needs_v1
def test_the_overhead_benchmarks_bound_harnesses_run_the_same_episode(tiny_model, monkeypatch):
    """benchmarks/v1_harness_bounds, the bounds of benchmarks/verifiers_v1_overhead.py: the one-POST harness sends
    vLLM what vfrl's in-process chat harness sends and gives the same rollouts (it measures the same episode), and
    the no-call harness's episodes complete without a request."""
    from fake_generate import FakeGenerate

    from vfrl.envs.verifiers_v1 import CHAT_HARNESS, V1Environment

    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "benchmarks" / "v1_harness_bounds"))

    def seen(harness: str):
        b, requests = fake_generated_batch(V1Environment("v1-reverse", harness=harness), tiny_model, "policy-0", 0)
        return (sorted(json.dumps(q["body"], sort_keys=True) for q in requests),
                [(r.example_id, r.prompt_ids, r.completion_ids, r.completion_logprobs, r.reward, r.metrics)
                 for r in b.rollouts])

    in_process = seen(CHAT_HARNESS)
    assert in_process[1] and seen("bound_one_post") == in_process

    async def no_call():
        env = V1Environment("v1-reverse", harness="bound_no_model_call")
        async with FakeGenerate(str(tiny_model), adapter="policy-0") as fake:
            from openai import AsyncOpenAI

            client = AsyncOpenAI(base_url=fake.base_url, api_key="k")
            await env._open(client)
            env.rows(False)
            context = env.context(client, "policy-0", {"max_tokens": 16})
            episodes = await asyncio.gather(*(env.v1_env.run_slot(env.v1_env.slots(t)[0], context)
                                              for t in env.tasks[:2]))
            await env.aclose()
            return episodes, fake.requests

    episodes, requests = asyncio.run(no_call())
    assert requests == [] and [e.ok for e in episodes] == [True, True]
    assert all(t.num_turns == 0 for e in episodes for t in e.traces)


# --- the real vLLM CPU server ---

@needs_v1
@pytest.mark.e2e
def test_v1_package_samples_through_the_real_vllm_server(shared_vllm_server, tiny_model, tmp_path, monkeypatch):
    """The trainer's Orchestrator samples a verifiers package through /inference/v1/generate of the session's
    vf-vllm (scale-out on; that vf-rl turns it on by itself is test_vf_rl_trains_a_v1_package_two_steps's).
    verifiers renders the prompt on its side: its ids must be the server's own rendering, and the trainer's
    logprobs of the sampled tokens must match vLLM's."""
    import httpx
    import torch
    from transformers import AutoModelForCausalLM

    from conftest import max_logprob_gap
    from vfrl.envs.loader import load_environment

    monkeypatch.setenv("PYTHONPATH", str(PKGS))  # vf-eval finds the package
    base_url, key = shared_vllm_server.base_url, shared_vllm_server.api_key
    env = load_environment("v1-reverse")

    batch = served_batch(env, base_url, key, str(tiny_model), 0, max_tokens=12, examples=1)
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
    assert len(batch.rollouts) == 2 and batch.metrics["rollouts_dropped"] == 0
    for r in batch.rollouts:
        assert r.prompt_ids == rendered[r.example_id]  # verifiers' rendering is the server's
        assert 0 < len(r.completion_ids) <= 12 and r.completion_mask == [1] * len(r.completion_ids)
        assert len(r.completion_logprobs) == len(r.completion_ids) and all(lp <= 0 for lp in r.completion_logprobs)
        assert r.reward in (0.0, 1.0) and set(r.metrics) == {"exact", "reply_len"}
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32).eval()
    assert max_logprob_gap(model, batch.rollouts) < 1e-4


@needs_v1
@pytest.mark.e2e
def test_a_v1_groups_one_request_gives_episode_j_what_its_own_request_with_seed_plus_j_gives(shared_vllm_server,
                                                                                            monkeypatch):
    """A group of three v1_reverse episodes on the session's vf-vllm: their first turns go out as one
    /inference/v1/generate request with n = 3, and episode j gets the tokens and logprobs an episode of its own
    with the group's seed + j gets (vLLM's child j samples with seed + j)."""
    from openai import AsyncOpenAI

    from vfrl.envs import verifiers_group_request as grouped
    from vfrl.envs.loader import load_environment

    srv = shared_vllm_server
    env = load_environment("v1-reverse")
    sent, reply = [], grouped.GenerateReply
    monkeypatch.setattr(grouped, "GenerateReply", lambda data: sent.append(data) or reply(data))

    async def group_and_alone():
        client = AsyncOpenAI(base_url=srv.base_url, api_key=srv.api_key)
        sampling = {"max_tokens": 8, "temperature": 1.0, "seed": 3}
        try:
            group = await env.run_group(client, srv.model, 0, 3, sampling, asyncio.Semaphore(3))
            row = env.dataset[0]
            alone = [(await env.rollout_with_state(client, srv.model, row, 0, {**sampling, "seed": 3 + j}))[0]
                     for j in range(3)]
        finally:
            await env.aclose()
        return group, alone

    group, alone = asyncio.run(group_and_alone())
    assert [len(reply["choices"]) for reply in sent] == [3]  # one request for the group's three first turns
    assert [r.completion_ids for r in group] == [r.completion_ids for r in alone]
    assert len({tuple(r.completion_ids) for r in group}) > 1  # three samples, not one three times
    for g, a in zip(group, alone):
        assert g.prompt_ids == a.prompt_ids and g.completion_logprobs == pytest.approx(a.completion_logprobs, abs=1e-5)


@needs_v1
@pytest.mark.e2e
def test_a_multi_turn_v1_package_sampled_after_a_sync_matches_the_trainer(shared_vllm_server, tiny_model, tmp_path):
    """v1_two_tries through the session's vf-vllm, sampled from an adapter just pushed as vf-train pushes it
    (AdapterSync): each episode is two traces, each one branch, its replies mask 1 and the environment's turn
    mask 0, and the trainer's logprobs (the same LoRA, in peft) of every sampled token are vLLM's within 1e-4."""
    from transformers import AutoTokenizer

    from conftest import assert_reply_turn_reply, batch_from_pushed_adapter, max_logprob_gap
    from vfrl.envs.loader import load_environment

    env = load_environment("v1-two-tries")
    model, policy, batch = batch_from_pushed_adapter(shared_vllm_server, tiny_model, env, tmp_path, seed=31,
                                                     scale=0.05, max_tokens=24)
    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    assert len(batch.rollouts) == 4 and batch.sizes() == [4] and batch.metrics["rollouts_dropped"] == 0
    for r in batch.rollouts:
        b, c = assert_reply_turn_reply(r)  # two replies, the environment's turn between them
        between = tok.decode(r.completion_ids[b:c])
        assert env.tasks[r.example_id].data.second in between and between.endswith("assistant\n"), between
        assert r.policy == policy and r.metrics["turns"] == 2.0
    assert max_logprob_gap(model, batch.rollouts) < 1e-4


@needs_v1
@pytest.mark.e2e
@pytest.mark.parametrize("package, metrics", [("v1-reverse", {"exact", "reply_len"}),
                                              ("v1-two-tries", {"reversed_each", "turns"})])
def test_vf_rl_trains_a_v1_package_two_steps(shared_vllm_server, tiny_model, tmp_path, package, metrics):
    """`vf-rl @ config` with `env.id` a verifiers 0.4 package, single-turn and multi-turn, against the session's
    vf-vllm (inference.base_url; that vf-rl starts vLLM with scale-out by itself:
    test_scale_out_is_on_for_a_verifiers_package_only): two steps trained from its rollouts, each batch sampled by
    the one policy its metrics line names, exit code 0, no traceback (the environment's serving closes in its
    loop)."""
    from conftest import train_package_two_steps

    env = {"id": package, "renderer": "default"} if package == "v1-two-tries" else {"id": package}  # a named renderer
    # one example a step, 2 episodes (v1-two-tries: each 2 traces, a rollout each)
    traces = 2 if package == "v1-two-tries" else 1
    _, run_dir, steps = train_package_two_steps(tmp_path, tiny_model, env, PKGS, examples_per_step=1,
                                                traces_per_episode=traces, server=shared_vllm_server)
    for step in (1, 2):
        rollouts = read_jsonl(RunDir(run_dir).step_rollouts(step))
        assert all(set(r["metrics"]) == metrics for r in rollouts)
        # every sampled token of every trace trained, the environment's turns did not
        assert steps[step - 1]["loss_tokens"] == sum(r["sampled_tokens"] for r in rollouts)


@needs_v1
@pytest.mark.e2e
def test_vf_rl_trains_a_v1_tool_package_two_steps(tmp_path, tool_server):
    """v1_calc, a tool-using taskset, with a tiny model that calls tools (tests/tool_model.py: the embedded
    recipe with <tool_call> tokens, made in seconds) and renderers' qwen3 tool parser, against the tool tests'
    vf-vllm (that vf-rl turns scale-out on by itself for a verifiers package:
    test_scale_out_is_on_for_a_verifiers_package_only): the model's call is run by verifiers' MCP tool server
    and the result comes back as a tool message that gets no loss, the adapter of each step is loaded, and the
    trainer's logprobs of the sampled tokens are vLLM's (mismatch_kl where both held the same weights:
    assert_served_is_trained; after a sync: test_a_multi_turn_v1_package_sampled_after_a_sync_matches_the_trainer)."""
    from conftest import assert_served_is_trained, train_package_two_steps

    env = {"id": "v1-calc", "renderer": {"name": "default", "tool_parser": "qwen3"}}
    _, run_dir, steps = train_package_two_steps(tmp_path, Path(tool_server.model), env, PKGS, examples_per_step=1,
                                                server=tool_server, max_tokens=64, max_seq_len=192)
    called = 0
    for step in (1, 2):
        rollouts = read_jsonl(RunDir(run_dir).step_rollouts(step))
        assert steps[step - 1]["loss_tokens"] == sum(r["sampled_tokens"] for r in rollouts)
        for r in rollouts:
            if r["metrics"]["tool_calls"] == 0:
                continue  # a sampled call the parser could not read is a plain reply, scored 0
            called += 1
            call, result, reply = r["completion"]
            assert (call["tool_calls"][0]["name"] == "add"
                    and json.loads(call["tool_calls"][0]["arguments"]) == {"a": 2, "b": 3})
            assert result == {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"], "content": "5",
                              "name": "add"}
            assert r["reward"] == float(reply.get("content", "").strip() == "5")
    assert called >= 2  # the model calls the tool in most rollouts (4)
    assert_served_is_trained(steps)


# --- a taskset without end ---

@needs_v1
def test_a_taskset_without_end_is_read_only_as_far_as_the_run_can_use(tiny_model, tmp_path, capsys):
    """It used to be read whole (list(taskset)): vf-train grew to 22 GB before the OOM killer ended it."""
    import v1_endless

    from vfrl.config import RLConfig
    from vfrl.rollouts.orchestrator import Orchestrator
    from vfrl.trainer.trainer import RLTrainer

    args = {"output_dir": str(tmp_path), "max_steps": 3, "batch_size": 8, "rollouts_per_example": 4,
            "micro_batch_size": 8, "max_tokens": 8, "max_seq_len": 64, "eval_strategy": "steps",
            "num_eval_examples": 5}
    cfg = RLConfig.model_validate({"model": str(tiny_model), "env": {"id": "v1_endless"},
                                   "trainer": {"gpus": 0, "args": args}})
    built = v1_endless.BUILT[0]
    trainer = RLTrainer(cfg, tmp_path / "run", "http://127.0.0.1:9/v1", "k")
    assert v1_endless.BUILT[0] == built  # nothing read while loading
    orch = Orchestrator(trainer.env, None, trainer.args.generation)
    assert len(trainer.env.dataset) == 3 * 2 + 5 and v1_endless.BUILT[0] - built == 11
    assert {i for step in range(3) for i in orch.example_ids(step)} <= set(range(6))  # the last 5 are eval's
    assert "the taskset yields tasks without end; reading the first 11" in capsys.readouterr().err


@needs_v1
def test_a_taskset_without_end_evaluates_the_examples_asked_for():
    from vfrl.envs.cli.eval import EvalJob, load_eval_environment

    job = EvalJob("v1_endless", {}, {"num_examples": 7}, {}, "k", None, None, True)
    env = load_eval_environment(job)
    assert job.n == 7 and len(env.dataset) == 7 and env.tasks[6].data.answer == "gg"


@needs_v1
def test_vf_eval_reads_only_the_tasks_it_evaluates_of_a_finite_taskset_too(capsys):
    """reasoning_gym_v1 builds its 1,000 tasks in 9 s; `vf-eval -n 5` evaluates the first 5."""
    from v1_reverse import WORDS

    from vfrl.envs.cli.eval import EvalJob, load_eval_environment

    job = EvalJob("v1-reverse", {}, {"num_examples": 2}, {}, "k", None, None, True)
    env = load_eval_environment(job)
    assert len(WORDS) > 2 and job.n == 2 and len(env.dataset) == 2 and len(env.tasks) == 2
    assert "without end" not in capsys.readouterr().err


# --- opening env.serving() ---

@needs_v1
def test_a_relative_pythonpath_is_made_absolute_for_the_servers_verifiers_starts_elsewhere(monkeypatch, tmp_path):
    """`PYTHONPATH=tests/v1_pkgs vf-rl ...`: verifiers starts a toolset's MCP server in a folder of its own, where the
    relative entry named nothing; the server never reported its port and vf-train sat silent for 180 s."""
    from vfrl.envs.verifiers_v1 import absolute_pythonpath

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["pkgs", "/abs/other", ""]))
    absolute_pythonpath()
    assert os.environ["PYTHONPATH"].split(os.pathsep) == [str(tmp_path / "pkgs"), "/abs/other", ""]


@needs_v1
def test_serving_that_is_slow_says_so_and_one_that_fails_is_one_line(monkeypatch, capsys):
    import contextlib
    from types import SimpleNamespace

    from vfrl.envs import verifiers_v1
    from vfrl.envs.verifiers_v1 import V1Environment, V1EnvironmentError

    @contextlib.asynccontextmanager
    async def failing_serving():
        await asyncio.sleep(0.3)
        raise RuntimeError("server did not report its port at /tmp/vf-port-1 in its runtime:\nModuleNotFoundError: "
                           "No module named 'my_tools'")
        yield

    env = object.__new__(V1Environment)
    env.env_id, env.renderer_model_name = "my-taskset", "m"
    env._loop = env._lock = env._lock_loop = env._serving = env.server = None
    env.workers = 0
    env.v1_env = SimpleNamespace(serving=failing_serving)
    monkeypatch.setattr(verifiers_v1, "SLOW_SERVING_S", 0.05)
    with pytest.raises(V1EnvironmentError) as e:
        asyncio.run(env._open(client=None))
    assert "my-taskset: still starting verifiers' serving resources" in capsys.readouterr().err
    assert str(e.value) == ("environment 'my-taskset': verifiers could not start its serving resources: RuntimeError: "
                            "server did not report its port at /tmp/vf-port-1 in its runtime: ModuleNotFoundError: No "
                            "module named 'my_tools'")


@needs_v1
def test_the_tasksets_verifiers_ships_load_by_the_ids_verifiers_gives_them():
    """verifiers' loader looks for an id in its own tasksets package before a module of that name; vfrl's too."""
    import verifiers.v1.tasksets as shipped

    from vfrl.verifiers_compat import verifiers_taskset

    names = [p.name for p in Path(shipped.__file__).parent.iterdir() if (p / "__init__.py").is_file()]
    assert "textarena" in names
    assert all(verifiers_taskset(n) == f"verifiers.v1.tasksets.{n}" for n in names)
    assert verifiers_taskset("reverse_text") is None and verifiers_taskset("verifiers.v1.tasksets.textarena") is None
