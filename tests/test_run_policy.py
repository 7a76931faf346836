"""Which policy of a run `vf-rl eval` and `vf-rl export` take (launcher/run_policy.py), and what they say when the
run has none: one line, naming the steps it keeps."""

import subprocess

import pytest

from conftest import BIN
from vfrl.launcher.run_policy import NoPolicy, find_policy


def run_dir_with(tmp_path, adapters=(), weights=(), checkpoints=(), half_checkpoints=()):
    (tmp_path / "config.toml").write_text('model = "m"\n[env]\nid = "e"\n')
    for step in adapters:
        (tmp_path / "adapters" / f"policy-{step}").mkdir(parents=True)
        (tmp_path / "adapters" / f"policy-{step}" / "adapter_config.json").write_text("{}")
    for step in weights:
        (tmp_path / "weights" / f"step-{step}").mkdir(parents=True)
    for step in (*checkpoints, *half_checkpoints):
        (tmp_path / "checkpoints" / f"step-{step}" / "model").mkdir(parents=True)
        if step in checkpoints:
            (tmp_path / "checkpoints" / f"step-{step}" / "COMPLETE").write_text("")
    return tmp_path


def test_the_newest_policy_or_the_step_asked_from_adapters_weights_or_a_complete_checkpoint(tmp_path):
    run = run_dir_with(tmp_path, adapters=(19, 20), checkpoints=(10,), half_checkpoints=(30,))
    newest = find_policy(run)
    assert (newest.step, newest.path, newest.adapter) == (20, run / "adapters" / "policy-20", True)
    assert find_policy(run, 10).path == run / "checkpoints" / "step-10" / "model"
    with pytest.raises(NoPolicy, match=r"no policy of step 30; it keeps steps 10, 19, 20 "):
        find_policy(run, 30)  # a checkpoint without its COMPLETE marker is not one


def test_a_full_fine_tune_s_weights_are_not_an_adapter(tmp_path):
    policy = find_policy(run_dir_with(tmp_path, weights=(3,)))
    assert (policy.step, policy.adapter) == (3, False)


@pytest.mark.parametrize("command", ["eval", "export"])
def test_a_run_with_no_policy_is_one_line(tmp_path, command):
    run_dir_with(tmp_path)
    done = subprocess.run([str(BIN / "vf-rl"), command, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [f"vf-rl: error: {tmp_path}: no trained policy yet (no adapters/, "
                                                "weights/ or checkpoint in it)"]


def test_best_eval_is_the_kept_policy_with_the_highest_eval_reward(tmp_path):
    from vfrl.launcher.run_policy import best_evaluated_step
    from vfrl.run_dir import append_jsonl

    run = run_dir_with(tmp_path, adapters=(19, 20), checkpoints=(10,))
    with pytest.raises(NoPolicy, match="it logged no eval"):
        best_evaluated_step(run)
    for step, reward in ((0, 0.2), (5, 0.9), (10, 0.6), (20, 0.6)):  # step 5's policy is not kept
        append_jsonl(run / "metrics.jsonl", {"step": step, "eval/reward_mean": reward})
    append_jsonl(run / "metrics.jsonl", {"step": 19, "reward_mean": 0.99})  # a train line: not an eval
    assert best_evaluated_step(run) == 20  # 0.6 at 10 and 20: the later
    (tmp_path / "b").mkdir()
    run2 = run_dir_with(tmp_path / "b", adapters=(3,))
    append_jsonl(run2 / "metrics.jsonl", {"step": 2, "eval/reward_mean": 0.5})
    with pytest.raises(NoPolicy, match="evaluated steps 2 and keeps 3"):
        best_evaluated_step(run2)
    done = subprocess.run([str(BIN / "vf-rl"), "export", str(run), "--best", "eval", "--step", "3"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--step and --best each pick the policy" in done.stderr
