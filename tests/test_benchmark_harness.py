"""The pure parts of benchmarks/side_by_side.py (figures from step rows, same-round ratios, the docs section)
and benchmarks/trl_grpo.py's copy of the reverse-text reward. No TRL, no vLLM: fake metric rows only."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


sbs = load("side_by_side")


def vfrl_metrics(rewards, step_s=2.0, generate_s=1.5, train_s=1.8, sync_s=0.1, start=1000.0):
    """metrics.jsonl as the trainer writes it: step lines, plus an eval line to be ignored."""
    rows, t = [{"step": 0, "eval/reward_mean": 0.4}], start
    for i, reward in enumerate(rewards, 1):
        rows.append({"step": i, "reward_mean": reward, "step_s": step_s, "generate_s": generate_s,
                     "train_s": train_s, "sync_s": sync_s, "wait_s": step_s - train_s - sync_s,
                     "train_start": t + step_s - sync_s - train_s, "train_end": t + step_s - sync_s,
                     "completion_len": 7.0})
        t += step_s
    return rows


def trl_lines(rewards, step_s=1.0, start=1000.0):
    return [{"step": i, "t": start + i * step_s, "step_s": step_s, "reward_mean": r, "completion_len": 6.0,
             "step_time": step_s * 0.9, "loss": 0.0} for i, r in enumerate(rewards, 1)]


def test_vfrl_rows_skip_eval_lines_and_end_when_the_adapter_is_pushed():
    rows = sbs.vfrl_steps(vfrl_metrics([0.5, 0.6], start=1000.0), launch=970.0)
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["end_s"] == pytest.approx(32.0) and rows[1]["end_s"] == pytest.approx(34.0)
    assert rows[1]["reward"] == 0.6 and rows[1]["generate_s"] == 1.5


def test_time_to_gain_is_the_first_10_step_mean_015_above_the_first_5_steps():
    # 5 steps at 0.5, then 0.7: the 10-step mean ending at step k is 0.5 + 0.2 * (k - 5) / 10 (k <= 15),
    # which reaches 0.65 at step 13 (0.5 + 0.16)
    rewards = [0.5] * 5 + [0.7] * 20
    rows = sbs.trl_steps(trl_lines(rewards, step_s=2.0, start=1000.0), launch=990.0)
    assert sbs.time_to_gain(rows) == (pytest.approx(36.0), 13)  # 1000 + 13 * 2 - 990
    assert sbs.time_to_gain(rows, gain=0.3) is None  # never that high
    assert sbs.time_to_gain(rows[:8]) is None  # fewer steps than the window


def test_summary_of_a_vfrl_run_leaves_out_the_first_step_and_splits_the_step():
    metrics = vfrl_metrics([0.5] * 12)
    metrics[1]["step_s"] = 30.0  # the first step waits for the first batch: not in the medians
    s = sbs.summarize(sbs.vfrl_steps(metrics, launch=900.0), wall_s=140.0)
    assert s["steps"] == 12 and s["wall_s"] == 140.0
    assert s["median_step_s"] == 2.0 and s["median_generate_s"] == 1.5 and s["median_train_s"] == 1.8
    assert s["step_over_max_gen_train"] == pytest.approx(2.0 / 1.8)
    assert s["sync_share"] == pytest.approx(0.05)
    assert s["reward_gain"] == 0.0 and s["time_to_gain_s"] is None
    assert s["first_step_end_s"] == pytest.approx(102.0)  # its adapter is pushed at 1000 + 2 s; launch at 900


def test_cpu_seconds_a_step_count_both_trees_over_the_timed_steps():
    lines = trl_lines([0.5] * 4, step_s=0.5)
    for line, cpu in zip(lines, (3.0, 0.8, 0.9, 1.0)):  # the first step warms up: left out
        line["cpu_s"] = cpu
    trl = sbs.summarize(sbs.trl_steps(lines, launch=995.0))
    assert trl["cpu_s_per_step"] == pytest.approx(0.9)

    rows = sbs.vfrl_steps(vfrl_metrics([0.5] * 4, step_s=2.0), launch=990.0)

    def cpu_at(t):  # vLLM spins 1 CPU s a wall second, the trainer 0.5; by process name
        return {"VLLM::Worker": t - 1000.0, "vf-vllm": 1.0}, {"vf-train": 0.5 * (t - 1000.0)}

    sbs.add_vfrl_cpu(rows, cpu_at, launch=990.0)
    ours = sbs.summarize(rows)
    assert ours["cpu_vllm_s_per_step"] == pytest.approx(2.0) and ours["cpu_trainer_s_per_step"] == pytest.approx(1.0)
    assert ours["cpu_s_per_step"] == pytest.approx(3.0)
    assert sbs.cpu_cell(trl, ours) == "0.90 / 3.00 (2.00 + 1.00)"
    assert sbs.cpu_cell(sbs.summarize(sbs.trl_steps(trl_lines([0.5] * 4), launch=995.0)), ours) == "-"  # older JSON


def test_ratios_are_taken_within_a_round_then_their_median():
    # round 1: TRL 1 s vs ours 2 s (0.5x); round 2: TRL 4 s vs ours 2 s (2x); round 3: 3 s vs 3 s (1x).
    # The median of the same-round ratios is 1.0; the ratio of the medians (3 / 2) would be 1.5.
    rounds = []
    for trl_s, ours_s in ((1.0, 2.0), (4.0, 2.0), (3.0, 3.0)):
        trl = sbs.summarize(sbs.trl_steps(trl_lines([0.5] * 4, step_s=trl_s), launch=990.0), wall_s=10.0)
        ours = sbs.summarize(sbs.vfrl_steps(vfrl_metrics([0.5] * 4, step_s=ours_s), launch=990.0), wall_s=20.0)
        rounds.append({"trl": {"summary": trl}, "vfrl": {"summary": ours}, "ratios": sbs.ratios(trl, ours)})
    rounds.append({"trl": {"error": "exit code 1"}, "vfrl": {}})  # a failed round counts nowhere
    s = sbs.case_summary(rounds)
    assert s["rounds"] == 3
    assert s["ratio_step"] == 1.0 and s["ratio_step_range"] == [0.5, 2.0]
    assert s["trl"]["median_step_s"] == 3.0 and s["vfrl"]["median_step_s"] == 2.0
    assert s["ratio_wall"] == 0.5 and s["ratio_time_to_gain"] is None


def test_workloads_share_the_19m_case_at_64_rollouts():
    cases = sbs.workload_cases(["19m", "19m-scaling", "quickstart"], None)
    assert [(c.name, c.rollouts, c.steps) for c in cases] == [
        ("19m@64", 64, 15), ("19m@128", 128, 15), ("19m@256", 256, 15), ("quickstart", 128, 160)]
    assert {c.steps for c in sbs.workload_cases(["quickstart", "19m"], 3)} == {3}
    assert [c.steps for c in sbs.workload_cases(["quickstart", "19m"], None, 4)] == [160, 4]
    with pytest.raises(SystemExit, match="unknown workload 'big'"):
        sbs.workload_cases(["big"], None)


def fake_result():
    rounds = []
    for i in range(2):
        trl_rows = sbs.trl_steps(trl_lines([0.5] * 5 + [0.9] * 15, step_s=0.5), launch=995.0)
        ours_rows = sbs.vfrl_steps(vfrl_metrics([0.5] * 5 + [0.9] * 15, step_s=1.0 + i), launch=960.0)
        trl = {"load_before": (0.5, 0.4, 0.3), "steps": trl_rows, "summary": sbs.summarize(trl_rows, 12.0)}
        ours = {"load_before": (1.5, 0.4, 0.3), "steps": ours_rows, "summary": sbs.summarize(ours_rows, 70.0)}
        rounds.append({"trl": trl, "vfrl": ours, "ratios": sbs.ratios(trl["summary"], ours["summary"])})
    return {
        "date": "2026-11-24 00:00 UTC", "command": "benchmarks/side_by_side.py --runs 2", "git_commit": "abc1234",
        "machine": {"cores": 2, "cpu": "Some CPU", "memory_gib": 24.0, "gpus": [], "python": "3.11.7"},
        "versions": {"vfrl": {"vfrl": "0.1.0", "torch": "2.13.0+cpu", "vllm": "0.32.0"},
                     "trl": {"trl": "1.16.0", "torch": "2.13.0+cpu", "transformers": "5.19.0"}},
        "cases": {"quickstart": {"case": {"name": "quickstart", "rollouts": 128, "steps": 20}, "rounds": rounds,
                                 "summary": sbs.case_summary(rounds)}},
    }


def test_the_section_has_one_row_per_workload_and_round():
    text = sbs.render_section(fake_result())
    assert text.startswith("## Side by side with TRL\n")
    # ours: 1 s then 2 s a step, TRL 0.5 s: same-round ratios 0.5 and 0.25, median 0.375
    assert "| quickstart | 128 | 20 x 2 | 0.50 s | 1.50 s | 0.38x (0.25-0.50) | 1.50 / 1.80 / 0.10 /" in text
    # the 10-step mean passes 0.65 at step 10, which TRL ends at 1000 + 10 * 0.5 - 995 = 10 s from launch
    assert "| quickstart | TRL | 0.500 -> 0.900 | +0.400 | 10 s (step 10) | 6 s | 12 s |" in text
    assert "| quickstart | 2 | 0.5 / 1.5 | 0.50 s | 2.00 s | 0.25x |" in text
    assert "load average before the runs 0.5-1.5" in text and "no GPU" in text


def test_the_gain_asked_for_is_the_one_measured_and_shown():
    """--gain reaches each run's summary and the section's headers through the result (no module state)."""
    rows = sbs.trl_steps(trl_lines([0.5] * 5 + [0.6] * 15, step_s=0.5), launch=995.0)
    assert sbs.summarize(rows)["time_to_gain_s"] is None  # +0.10 never reaches the default +0.15
    # step 14 (ends 5 + 0.5 x 14 s in): its 10-step window holds one 0.5
    assert sbs.summarize(rows, gain=0.08)["time_to_gain_s"] == 12.0
    result = fake_result() | {"gain": 0.08}
    assert "launch to +0.08" in sbs.render_section(result) and "launch to +0.15" not in sbs.render_section(result)


def test_docs_say_how_to_run_it():
    assert sbs.HOW_TO in (ROOT / "docs" / "benchmarks.md").read_text()


def test_md_table():
    assert sbs.md_table(["a", "b"], [["1", "2"], ["3", "4"]]) == "| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n"


def test_the_section_replaces_only_itself(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Quick start\n\nq\n\n## Launcher start time\n\nl\n")
    sbs.write_section(doc, sbs.HOW_TO, sbs.HEADING)
    first = doc.read_text()
    assert first.startswith("# Benchmarks\n\n## Quick start\n\nq\n\n## Launcher start time\n\nl\n\n## Side by side")
    sbs.write_section(doc, sbs.render_section(fake_result()), sbs.HEADING)
    sbs.write_section(doc, sbs.render_section(fake_result()), sbs.HEADING)
    text = doc.read_text()
    assert text.count("## Side by side with TRL") == 1 and "| quickstart | 128 |" in text
    assert text.startswith("# Benchmarks\n\n## Quick start\n\nq\n\n## Launcher start time\n\nl\n\n")


def test_plots_are_written(tmp_path):
    paths = sbs.plot(fake_result(), tmp_path)
    assert [p.name for p in paths] == ["side_by_side_step_time.png", "side_by_side_reward.png"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_trl_gets_the_reverse_text_reward():
    import vfrl

    trl_grpo = load("trl_grpo")
    rubric = vfrl.load_environment("reverse-text").rubric
    ours = rubric.funcs[0]
    for reply, answer in (("cba", "cba"), (" cb \n", "cba"), ("", "abc"), ("xyzabc", "cba")):
        completion = [{"role": "assistant", "content": reply}]
        assert trl_grpo.lcs_reward([completion], [answer]) == [ours(completion, answer)]


def test_trl_gets_the_arithmetic_last_number_reward(monkeypatch):
    """trl_grpo.py's copy of environments/arithmetic's correct_number (style="bare"), loaded without TRL."""
    import vfrl

    for name in ("trl", "peft", "datasets"):  # imported in main() only: trl_grpo.py's venv is not this one
        monkeypatch.setitem(sys.modules, name, None)
    trl_grpo = load("trl_grpo")
    env = vfrl.load_environment("arithmetic", style="bare", operations=["+"], max_number=20)
    ours = env.rubric.funcs[0]
    replies = ["18", "18.", " The answer is 18", "17 + 1 = 18", "18 or 19", "1,8", "-18", "18.0", "18.5", "", "x"]
    for reply in replies:
        completion = [{"role": "assistant", "content": reply}]
        assert trl_grpo.last_number_reward([completion], ["18"]) == [ours(completion, "18")], reply
    completions = [[{"role": "assistant", "content": "7 + 12 = 19"}], []]
    assert trl_grpo.last_number_reward(completions, ["19", "19"]) == [1.0, 0.0]
    assert trl_grpo.last_number("1,200 apples") == "1200" and trl_grpo.last_number("no number") is None


def smollm2_case():
    return sbs.workload_cases(["smollm2"], None)[0]


def config_of(path: str) -> dict:
    import tomllib

    return tomllib.loads((ROOT / path).read_text())


def test_the_smollm2_workload_is_asked_for_by_name_only():
    assert smollm2_case() == sbs.Case("smollm2", "configs/rl/smollm2.toml", 64, 60)
    assert sbs.workload_cases(["smollm2"], 8)[0].steps == 8
    assert "smollm2" not in [c.name for c in sbs.workload_cases("quickstart,19m,19m-scaling".split(","), None)]


def test_trl_args_from_the_smollm2_config():
    case, config = smollm2_case(), config_of("configs/rl/smollm2.toml")
    args = sbs.trl_args(case, config, ROOT / "models/smollm2-135m-instruct", ROOT / "outputs/rows.json",
                        ROOT / "outputs/trl.jsonl", "none", ROOT / "outputs/eval-rows.json")
    assert args == [
        "benchmarks/trl_grpo.py", "--model", "models/smollm2-135m-instruct", "--data", "outputs/rows.json",
        "--out", "outputs/trl.jsonl", "--steps", "60", "--rollouts", "64", "--num-generations", "8",
        "--micro-batch", "32", "--max-tokens", "24", "--lr", "0.0003", "--temperature", "0.7", "--threads", "2",
        "--vllm", "none", "--reward", "last_number", "--lora-rank", "16", "--lora-alpha", "32",
        "--scheduler", "constant", "--warmup-steps", "0",
        "--eval-data", "outputs/eval-rows.json", "--eval-steps", "25", "--eval-generations", "2"]

    trl_grpo = load("trl_grpo")
    settings = trl_grpo.grpo_settings(trl_grpo.parse_args(args[1:]), eval_prompts=100)
    assert settings["lr_scheduler_type"] == "constant" and settings["warmup_steps"] == 0  # vf-rl's get_scheduler call
    assert settings["per_device_train_batch_size"] == 32 and settings["gradient_accumulation_steps"] == 2
    # 100 prompts x 2: batches of whole groups, at most a micro-batch, all of one size (a mean of equal batches'
    # means is the mean over all 200 rollouts, as vf-rl's eval/reward_mean)
    assert {k: settings[k] for k in ("eval_strategy", "eval_steps", "eval_on_start", "num_generations_eval",
                                     "per_device_eval_batch_size")} == {
        "eval_strategy": "steps", "eval_steps": 25, "eval_on_start": True, "num_generations_eval": 2,
        "per_device_eval_batch_size": 20}
    assert trl_grpo.eval_batch_size(100, 2, 64) == 50 and trl_grpo.eval_batch_size(7, 4, 2) == 4


def test_trl_rows_are_the_ones_vfrl_trains_and_evaluates_on():
    import vfrl

    train, evals = sbs.trl_rows(config_of("configs/rl/smollm2.toml"))
    env = vfrl.load_environment("arithmetic", style="bare", operations=["+"], max_number=20)
    assert train == [{"prompt": r["prompt"], "answer": r["answer"]} for r in env.dataset]
    assert evals == [{"prompt": r["prompt"], "answer": r["answer"]} for r in env.eval_dataset[:100]]
    assert len(evals) == 100
    # the reverse-text workloads: every dataset row, no eval (as before the smollm2 workload)
    train, evals = sbs.trl_rows(config_of("configs/rl/quickstart.toml"))
    reverse_text = vfrl.load_environment("reverse-text")
    assert train == [{"prompt": r["prompt"], "answer": r["answer"]} for r in reverse_text.dataset]
    assert evals == []


def test_trl_settings_of_the_quickstart_are_unchanged():
    """The command the quick start gave TRL before the smollm2 workload, and the one now, mean the same run."""
    case, config = sbs.workload_cases(["quickstart"], None)[0], config_of("configs/rl/quickstart.toml")
    before = ["benchmarks/trl_grpo.py", "--model", "models/tiny-reverse", "--data", "outputs/rows.json",
              "--out", "outputs/trl.jsonl", "--steps", "160", "--rollouts", "128", "--num-generations", "8",
              "--micro-batch", "64", "--max-tokens", "16", "--lr", "0.003", "--temperature", "1.0", "--threads", "2",
              "--vllm", "none"]
    now = sbs.trl_args(case, config, ROOT / "models/tiny-reverse", ROOT / "outputs/rows.json",
                       ROOT / "outputs/trl.jsonl", "none")
    assert now[: len(before)] == before
    trl_grpo = load("trl_grpo")
    assert vars(trl_grpo.parse_args(now[1:])) == vars(trl_grpo.parse_args(before[1:]))
    settings = trl_grpo.grpo_settings(trl_grpo.parse_args(now[1:]))
    assert settings["lr_scheduler_type"] == "cosine" and settings["warmup_steps"] == 5
    assert "eval_strategy" not in settings


def test_an_environment_without_a_trl_reward_stops_with_one_line():
    config = config_of("configs/rl/smollm2.toml")
    config["env"]["args"]["style"] = "word"
    with pytest.raises(SystemExit, match="no reward for env 'arithmetic'"):
        sbs.trl_reward(config)


def test_vfrl_eval_lines_end_with_the_next_step_or_the_run():
    # eval of policy 0, step 1, step 2, eval of policy 2 (logged before step 3's push), step 3, eval of policy 3
    metrics = vfrl_metrics([0.5, 0.6, 0.7], step_s=2.0, start=1000.0)  # holds the eval of policy 0 first
    metrics.insert(3, {"step": 2, "eval/reward_mean": 0.5, "eval/num_rollouts": 200.0})
    metrics.append({"step": 3, "eval/reward_mean": 0.7})
    metrics.append({"step": 3, "eval/num_rollouts": 0.0})  # every rollout dropped: no reward
    evals = sbs.vfrl_evals(metrics, launch=970.0, end_s=60.0)
    assert evals == [{"step": 0, "reward": 0.4, "end_s": pytest.approx(32.0)},
                     {"step": 2, "reward": 0.5, "end_s": pytest.approx(36.0)},
                     {"step": 3, "reward": 0.7, "end_s": 60.0}]
    assert [r["step"] for r in sbs.vfrl_steps(metrics, launch=970.0)] == [1, 2, 3]


def test_trl_eval_lines_are_kept_apart_from_its_steps():
    lines = trl_lines([0.5, 0.6], step_s=2.0, start=1000.0)
    lines.insert(0, {"eval": True, "step": 0, "t": 1001.0, "eval_reward": 0.2})
    lines.append({"eval": True, "step": 2, "t": 1005.0, "eval_reward": 0.4})
    assert [r["step"] for r in sbs.trl_steps(lines, launch=990.0)] == [1, 2]
    assert sbs.trl_evals(lines, launch=990.0) == [{"step": 0, "end_s": 11.0, "reward": 0.2},
                                                  {"step": 2, "end_s": 15.0, "reward": 0.4}]


def test_time_to_eval_gain_is_the_end_of_the_first_eval_that_far_above_step_0():
    evals = [{"step": 0, "end_s": 30.0, "reward": 0.25}, {"step": 25, "end_s": 90.0, "reward": 0.375},
             {"step": 50, "end_s": 150.0, "reward": 0.5}, {"step": 60, "end_s": 170.0, "reward": 0.375}]
    rows = sbs.trl_steps(trl_lines([0.5] * 6), launch=990.0)
    s = sbs.summarize(rows, evals=evals)
    assert (s["eval_first"], s["eval_last"], s["eval_gain"]) == (0.25, 0.375, 0.125)
    assert (s["time_to_eval_gain_s"], s["steps_to_eval_gain"]) == (150.0, 50)  # 0.375 is +0.125: short of +0.15
    assert sbs.summarize(rows, gain=0.125, evals=evals)["time_to_eval_gain_s"] == 90.0
    assert sbs.summarize(rows, gain=0.5, evals=evals)["time_to_eval_gain_s"] is None
    assert "eval_first" not in sbs.summarize(rows)  # no evals, no eval figures
    trl = sbs.summarize(rows, evals=evals)
    ours = sbs.summarize(rows, evals=[e | {"end_s": e["end_s"] / 2} for e in evals])
    assert sbs.ratios(trl, ours)["time_to_eval_gain"] == 2.0


def test_the_eval_table_shows_only_for_cases_with_evals():
    assert "eval reward, step 0 -> last" not in sbs.render_section(fake_result())
    result = fake_result()
    evals = [{"step": 0, "end_s": 20.0, "reward": 0.2}, {"step": 20, "end_s": 40.0, "reward": 0.5}]
    for r in result["cases"]["quickstart"]["rounds"]:
        for system in ("trl", "vfrl"):
            r[system]["summary"] = sbs.summarize(r[system]["steps"], evals=evals)
        r["ratios"] = sbs.ratios(r["trl"]["summary"], r["vfrl"]["summary"])
    result["cases"]["quickstart"]["summary"] = s = sbs.case_summary(result["cases"]["quickstart"]["rounds"])
    assert s["ratio_time_to_eval_gain"] == 1.0
    text = sbs.render_section(result)
    assert "| workload | system | eval reward, step 0 -> last | gain | launch to eval +0.15 |" in text
    assert "| quickstart | vf-rl | 0.200 -> 0.500 | +0.300 | 40 s (step 20) |" in text
