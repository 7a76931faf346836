"""The lines that end a run (trainer/summary.py): what the user got and where it is."""

import json

from vfrl.learner.checkpoint import MARKER
from vfrl.trainer.summary import duration, summary


def write_run(run_dir, steps, evals):
    with open(run_dir / "metrics.jsonl", "w") as f:
        for step, value in evals[:1]:
            f.write(json.dumps({"step": step, "eval/reward_mean": value}) + "\n")
        for i, reward in enumerate(steps, 1):
            f.write(json.dumps({"step": i, "reward_mean": reward, "loss": 0.1}) + "\n")
        for step, value in evals[1:]:
            f.write(json.dumps({"step": step, "eval/reward_mean": value}) + "\n")


def test_a_lora_run_ends_with_rewards_evals_adapter_and_commands(tmp_path):
    write_run(tmp_path, [0.1] * 5 + [0.5] * 10 + [0.9] * 5, [(0, 0.2), (10, 0.5), (20, 0.7)])
    for version in (19, 20, 3):
        (tmp_path / "adapters" / f"policy-{version}").mkdir(parents=True)
    lines = summary(tmp_path, "./models/m", "arithmetic", seconds=754)
    text = "\n".join(lines)
    assert lines[0] == "vf-train: done: 20 steps in 12m34s"
    assert "0.100 -> 0.900  (+0.800)" in text
    assert "eval reward (step 0 -> step 20)  0.200 -> 0.700  (+0.500)" in text
    assert f"policy: {tmp_path}/adapters/policy-20 (a peft LoRA adapter of ./models/m)" in text  # 20, not 3 or 19
    assert f"evaluate it: vf-rl eval {tmp_path}  (" in text and f"export it: vf-rl export {tmp_path}  (" in text
    assert f"curves: vf-rl plot {tmp_path}" in text


def test_a_full_weight_run_names_its_weights_and_a_short_run_its_own_window(tmp_path):
    write_run(tmp_path, [0.2, 0.4, 0.6], [])
    (tmp_path / "weights" / "step-3").mkdir(parents=True)
    (tmp_path / "checkpoints" / "step-3").mkdir(parents=True)
    (tmp_path / "checkpoints" / "step-3" / MARKER).write_text("")  # complete, as save_checkpoint leaves it
    (tmp_path / "checkpoints" / "step-4").mkdir()  # a half-written one is never named
    text = "\n".join(summary(tmp_path, "m", "e"))
    assert "done: 3 steps\n" in text and "first and last 1 steps)  0.200 -> 0.600" in text
    assert (f"policy: {tmp_path}/weights/step-3 (full weights" in text
            and f"checkpoint: {tmp_path}/checkpoints/step-3" in text)
    assert "eval reward" not in text and f"evaluate it: vf-rl eval {tmp_path}" in text


def test_a_run_with_no_step_still_ends_in_one_readable_block(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("")
    assert summary(tmp_path, "m", "e")[0] == "vf-train: done: 0 steps"
    assert [duration(s) for s in (5, 65, 3725)] == ["5s", "1m05s", "1h02m05s"]
