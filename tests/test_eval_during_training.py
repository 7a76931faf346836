"""Eval during training: which rows, when, and a real run that logs eval reward (wandb offline too,
from a tmux server that was started without WANDB_MODE)."""

import json
import os
import subprocess
import tomllib
from types import SimpleNamespace

import pytest
import tomli_w

from conftest import BIN, write_config
from vfrl.config import TrainerArgs
from vfrl.environments.environment import Environment
from vfrl.launcher.plot import read_metrics
from vfrl.trainer.evaluation import eval_example_ids, held_out_size, is_eval_step, summarize
from vfrl.trainer.orchestrator import Orchestrator


def rows(n):
    return [{"question": f"q{i}", "answer": str(i)} for i in range(n)]


def test_eval_steps_baseline_every_n_and_end():
    args = TrainerArgs(eval_strategy="steps", eval_steps=4, max_steps=10, batch_size=8, rollouts_per_example=4)
    assert [s for s in range(11) if is_eval_step(args, s)] == [0, 4, 8, 10]
    assert not any(is_eval_step(TrainerArgs(max_steps=10), s) for s in range(11))


def test_eval_split_preferred_else_a_held_out_slice_training_never_sees():
    args = TrainerArgs(eval_strategy="steps", num_eval_examples=5, batch_size=8, rollouts_per_example=4)
    with_split = Environment(dataset=rows(20), eval_dataset=rows(3))
    assert eval_example_ids(with_split, args) == ([0, 1, 2], True) and held_out_size(with_split, args) == 0

    no_split = Environment(dataset=rows(20))
    assert eval_example_ids(no_split, args) == ([15, 16, 17, 18, 19], False)
    orch = Orchestrator(no_split, client=None, args=args)
    seen = {i for step in range(40) for i in orch.example_ids(step)}  # 16 epochs of the train part
    assert seen == set(range(15))

    assert held_out_size(no_split, TrainerArgs(batch_size=8, rollouts_per_example=4)) == 0  # eval off: all rows train
    tiny = Environment(dataset=rows(6))
    assert eval_example_ids(tiny, args)[0] == [3, 4, 5]  # never more than half the data


def test_summarize():
    rs = [SimpleNamespace(reward=r, completion_ids=[1] * n, truncated=t, metrics={"lcs": r})
          for r, n, t in ((1.0, 4, False), (0.0, 8, True))]
    s = summarize(rs)
    assert s == {"eval/reward_mean": 0.5, "eval/reward_std": 0.5, "eval/completion_len": 6, "eval/truncated_fraction": 0.5,
                 "eval/num_rollouts": 2.0, "eval/lcs": 0.5}


def test_request_seeds_are_per_step_example_and_stream():
    orch = Orchestrator(Environment(dataset=rows(8)), client=None, args=TrainerArgs(batch_size=8, rollouts_per_example=4))
    seeds = {orch.request_seed(stream, step, ex) for stream in ("train", "eval") for step in range(5) for ex in range(8)}
    assert len(seeds) == 80 and all(0 <= s < 2**31 for s in seeds)
    again = Orchestrator(Environment(dataset=rows(8)), client=None, args=TrainerArgs(batch_size=8, rollouts_per_example=4))
    assert again.request_seed("train", 3, 5) == orch.request_seed("train", 3, 5)


@pytest.fixture(scope="module")
def eval_run(tmp_path_factory, tiny_model):
    tmp = tmp_path_factory.mktemp("evalrun")
    sock = f"vfrl-eval-{tmp.name}"
    cfg = write_config(tmp / "cfg.toml", tiny_model, port=0, output_dir=tmp / "outputs", max_steps=3, batch_size=8,
                       rollouts_per_example=4, max_tokens=8, eval_strategy="steps", eval_steps=2, num_eval_examples=6,
                       report_to="wandb", log_completions=True, logging_steps=2, num_completions_to_print=2)
    # a token budget of one max_model_len: 14 concurrent seeded prompts would need chunked prefills,
    # which crash the CPU build with seeded requests unless vf-vllm turns chunking off (it does)
    data = tomllib.loads(cfg.read_text())
    data["inference"]["args"]["max_num_batched_tokens"] = data["inference"]["args"]["max_model_len"]
    cfg.write_text(tomli_w.dumps(data))
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    # issue 9: a tmux server already running without WANDB_MODE (tmux gives new sessions its server's
    # environment); the trainer pane must still see the variables vf-rl was started with
    without = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    subprocess.run(["tmux", "-L", sock, "new-session", "-d", "-s", "other", "sleep 900"], env=without, check=True)
    try:
        proc = subprocess.run([str(BIN / "vf-rl"), "@", str(cfg), "--no-attach", "--tmux-socket", sock],
                              capture_output=True, text=True, timeout=600, cwd=tmp, env=env)
        yield proc, tmp / "outputs" / "test"
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)


@pytest.mark.e2e
def test_eval_reward_logged_at_start_every_eval_steps_and_end(eval_run):
    proc, run_dir = eval_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    m = read_metrics(run_dir)
    evals = [r for r in m if "eval/reward_mean" in r]
    assert [r["step"] for r in evals] == [0, 2, 3]
    assert all(0.0 <= r["eval/reward_mean"] <= 1.0 and r["eval/num_rollouts"] == 6 for r in evals)
    assert [r["step"] for r in m if "loss" in r] == [1, 2, 3]
    for step in (0, 2, 3):  # sampled by the policy of that step, on the environment's eval split
        rs = [json.loads(line) for line in (run_dir / "rollouts" / f"eval_step_{step}.jsonl").read_text().splitlines()]
        assert {r["policy"] for r in rs} == {f"policy-{step}"}
        assert [r["example_id"] for r in rs] == list(range(6))
    assert "eval @ step 0 | reward_mean" in proc.stdout and "eval @ step 3" in proc.stdout


@pytest.mark.e2e
def test_console_progress_and_completions_in_the_streamed_log(eval_run):
    proc, _ = eval_run
    out = proc.stdout
    assert "\x1b[" not in out
    for step in (1, 2, 3):
        assert f"step {step}/3 | reward" in out and "tok/s" in out and " gen " in out and " sync " in out
    assert "step 2: sample completions" in out and "step 1: sample completions" not in out  # logging_steps = 2


@pytest.mark.e2e
def test_wandb_offline_run_files_under_run_dir(eval_run):
    proc, run_dir = eval_run
    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, list((run_dir / "wandb").iterdir()) if (run_dir / "wandb").exists() else "no wandb dir"
    data = list(runs[0].glob("run-*.wandb"))
    assert data and data[0].stat().st_size > 1000
    blob = data[0].read_bytes()
    assert b"eval/reward_mean" in blob and b"reward_mean" in blob and b"completions" in blob
