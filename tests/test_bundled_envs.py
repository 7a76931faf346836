"""The bundled environments under environments/: their logic against a fake server, then every one of
them through `vf-eval` against the shared real vLLM CPU server with the tiny model."""

import asyncio
import json
import os
import re
import statistics
import subprocess
import tomllib
from pathlib import Path

import pytest
from conftest import BIN, ROOT
from fake_openai import FakeOpenAI

import vfrl
from vfrl.envs.loader import EnvironmentLoadError

SEMAPHORE_SIZE = 8


def packages() -> list[tuple[str, Path]]:
    """(environment id, folder) of every package under environments/, read from its entry point."""
    found = []
    for pyproject in sorted((ROOT / "environments").glob("*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text())["project"]
        for env_id in project.get("entry-points", {}).get("vfrl.environments", {}):
            found.append((env_id, pyproject.parent))
    return found


def answering(rows: list[dict], reply) -> FakeOpenAI:
    """A fake server whose reply to a row's question is `reply(row)`."""
    by_question = {row["prompt"][-1]["content"]: row for row in rows}
    return FakeOpenAI(lambda prompt: reply(by_question[prompt.split("<|im_start|>user\n")[-1].split("<|im_end|>")[0]]))


def eval_rewards(env, client, n: int) -> list[float]:
    async def go():
        sem = asyncio.Semaphore(SEMAPHORE_SIZE)
        groups = await asyncio.gather(*(env.run_group(client, "m", i, 1, {"max_tokens": 64}, sem, eval=True)
                                        for i in range(n)))
        return [r.reward for g in groups for r in g]

    return asyncio.run(go())


# ---- arithmetic ----

def solve(question: str) -> int:
    """An independent reading of each problem template."""
    n = [int(x) for x in re.findall(r"\d+", question)]
    if "packs" in question:
        return n[0] * n[1] + (n[2] if "finds" in question else -n[2])
    if "gets" in question:
        return n[0] + n[1]
    if "gives away" in question:
        return n[0] - n[1]
    if "boxes" in question:
        return n[0] * n[1]
    if "equally" in question:
        return n[0] // n[1]
    raise AssertionError(f"unknown template: {question}")


def test_arithmetic_rows_are_right_and_seeded():
    env = vfrl.load_environment("arithmetic", num_train_examples=300, num_eval_examples=50)
    for row in env.dataset + env.eval_dataset:
        assert int(row["answer"]) == solve(row["question"]) >= 0, row
    again = vfrl.load_environment("arithmetic", num_train_examples=300, num_eval_examples=50)
    assert [r["question"] for r in again.dataset] == [r["question"] for r in env.dataset]
    assert {r["info"]["steps"] for r in env.dataset} == {1, 2}
    assert env.dataset[0]["prompt"][0] == {
        "role": "system", "content": r"Solve the problem. Give only the final number, as \boxed{answer}."}
    with pytest.raises(EnvironmentLoadError, match="max_number"):
        vfrl.load_environment("arithmetic", max_number=1)


def test_arithmetic_scores_boxed_answers_with_the_math_rubric():
    env = vfrl.load_environment("arithmetic", num_train_examples=10, num_eval_examples=6)
    right = answering(env.eval_dataset, lambda row: f"It is \\boxed{{{row['answer']}}}.")
    assert eval_rewards(env, right, 6) == [1.0] * 6
    wrong = answering(env.eval_dataset, lambda row: f"\\boxed{{{int(row['answer']) + 1}}}")
    assert eval_rewards(env, wrong, 6) == [0.0] * 6
    assert eval_rewards(env, answering(env.eval_dataset, lambda row: row["answer"]), 6) == [0.0] * 6  # not boxed


# ---- reasoning-gym ----

def test_reasoning_gym_generates_named_tasks_offline_and_scores_with_their_checker():
    env = vfrl.load_environment("reasoning-gym", gym=["leg_counting", "arithmetic_basic"],
                                num_train_examples=6, num_eval_examples=4)
    assert [r["task"] for r in env.dataset] == ["leg_counting", "basic_arithmetic"] * 3  # interleaved
    train = {(r["task"], r["info"]["index"]) for r in env.dataset}
    assert not train & {(r["task"], r["info"]["index"]) for r in env.eval_dataset}  # disjoint splits
    assert "<answer>" in env.dataset[0]["prompt"][0]["content"]
    right = eval_rewards(env, answering(env.eval_dataset, lambda row: f"<answer>{row['answer']}</answer>"), 4)
    assert right == [1.0] * 4
    assert eval_rewards(env, answering(env.eval_dataset, lambda row: "<answer>-1</answer>"), 4) == [0.0] * 4


def test_reasoning_gym_task_config_and_mistakes():
    env = vfrl.load_environment("reasoning-gym", gym="leg_counting", num_train_examples=5, num_eval_examples=1,
                                config={"min_animals": 1, "max_animals": 1})
    assert all(r["question"].split(" you have ")[-1].count(",") == 0 for r in env.dataset)  # one kind of animal
    with pytest.raises(EnvironmentLoadError, match="did you mean leg_counting"):
        vfrl.load_environment("reasoning-gym", gym="leg_countin")
    with pytest.raises(EnvironmentLoadError, match="rejected config"):
        vfrl.load_environment("reasoning-gym", config={"no_such_setting": 1})


# ---- the shipped run configs ----

@pytest.mark.parametrize("config", sorted((ROOT / "configs" / "rl").glob("*.toml")), ids=lambda p: p.name)
def test_every_rl_config_loads_its_environment_and_its_first_turn_fits(config, tiny_model):
    cfg = vfrl.load_config(config)
    env = vfrl.load_environment(cfg.env.id, **cfg.env.args)
    assert env.dataset
    if Path(cfg.model).name != tiny_model.name:
        return  # a hub model: its tokenizer is not here to count with
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    longest = max(len(tok.encode(tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)))
                  for row in env.dataset[:200])
    assert longest + cfg.args.max_tokens <= min(cfg.args.max_seq_len, cfg.inference.args.get("max_model_len", 1024))


# ---- every bundled environment through vf-eval, real server ----

# Env args that keep prompts short: the tiny model's tokenizer spends one token per character and
# the server's context is 1024 tokens.
EVAL_ARGS = {
    "reasoning-gym": {"gym": "leg_counting", "num_train_examples": 4, "num_eval_examples": 4},
}


@pytest.mark.e2e
@pytest.mark.parametrize("env_id, folder", packages(), ids=[p[0] for p in packages()])
def test_vf_eval_runs_the_bundled_environment(env_id, folder, shared_vllm_server, tmp_path):
    srv = shared_vllm_server
    n, r = 2, 2
    out = tmp_path / "eval"
    done = subprocess.run(
        [str(BIN / "vf-eval"), env_id, "-m", srv.model, "-b", srv.base_url, "-k", "VFRL_TEST_KEY",
         "-n", str(n), "-r", str(r), "-t", "24", "-T", "1.0", "-a", json.dumps(EVAL_ARGS.get(env_id, {})),
         "-S", '{"seed": 0}', "-o", str(out)],
        env={**os.environ, "VFRL_TEST_KEY": srv.api_key}, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\nserver log: {srv.log}"
    assert "reward mean" in done.stdout

    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(lines) == n * r
    assert sorted(line["example_id"] for line in lines) == sorted(list(range(n)) * r)
    for line in lines:
        assert line["policy"] == srv.model and line["prompt"] and line["prompt_ids"]
        assert any(m["role"] == "assistant" for m in line["completion"])
        assert len(line["completion_ids"]) == len(line["completion_logprobs"]) == len(line["completion_mask"]) > 0
        assert 1 in line["completion_mask"]  # the model's own tokens get loss
        assert isinstance(line["reward"], float) and line["metrics"]

    metadata = json.loads((out / "metadata.json").read_text())
    assert (metadata["env_id"], metadata["model"], metadata["num_rollouts"]) == (env_id, srv.model, n * r)
    assert metadata["sampling_args"] == {"seed": 0, "max_tokens": 24, "temperature": 1.0}
    assert metadata["reward"]["mean"] == pytest.approx(statistics.fmean(line["reward"] for line in lines))
    for name, mean in metadata["metrics"].items():
        assert mean == pytest.approx(statistics.fmean(line["metrics"].get(name, 0.0) for line in lines))
