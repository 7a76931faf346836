"""Training from a Python script (vfrl.grpo): the guide's names, the TOML's errors, and a real run."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tomli_w

from vfrl.grpo import ArgsError, GRPOArgs, grpo_defaults, lora_defaults, rl_config


def test_guide_names_and_ours_set_the_same_field():
    args = grpo_defaults(run_name="x")
    args.num_generations = 4
    args.per_device_train_batch_size = 2
    args.max_completion_length = 12
    assert args.rollouts_per_example == 4 and args.micro_batch_size == 2 and args.max_tokens == 12
    args.max_tokens = 10  # ours, then the guide's reads it
    assert args.max_completion_length == 10
    assert GRPOArgs().learning_rate == 1e-5  # the TOML default when nothing sets it


def test_gradient_accumulation_makes_the_batch():
    args = grpo_defaults(per_device_train_batch_size=4, num_generations=4, gradient_accumulation_steps=3)
    cfg = rl_config("m", "reverse-text", args)
    assert (cfg.args.batch_size, cfg.args.micro_batch_size, cfg.args.rollouts_per_example) == (12, 4, 4)


def test_peft_config_means_lora_and_its_values_are_used():
    lora = rl_config("m", "reverse-text", grpo_defaults(), peft_config=lora_defaults(r=16, lora_alpha=32)).args
    assert lora.use_lora and (lora.lora_rank, lora.lora_alpha) == (16, 32)
    assert not rl_config("m", "reverse-text", grpo_defaults()).args.use_lora  # the guide: no peft_config, all weights


def test_an_invalid_value_gives_the_toml_files_line(tmp_path):
    """The same rule, the same words: only the place differs (the args instead of the file)."""
    from vfrl.launcher.config_errors import ConfigError, load_user_config

    for bad in ({"learning_rate": -1.0}, {"batch_size": 10}):  # a field's own check; a rule across fields
        toml = tmp_path / "cfg.toml"
        toml.write_text(tomli_w.dumps({"model": "m", "env": {"id": "reverse-text"}, "trainer": {"args": bad}}))
        with pytest.raises(ConfigError) as from_file:
            load_user_config(toml)
        with pytest.raises(ArgsError) as from_script:
            rl_config("m", "reverse-text", grpo_defaults(**bad), peft_config=lora_defaults())
        file_lines = [line.removeprefix(f"{toml}: ") for line in str(from_file.value).splitlines()]
        script_lines = [line.removeprefix("vfrl: grpo args: ") for line in str(from_script.value).splitlines()]
        assert script_lines == file_lines and file_lines[0].startswith("trainer.args."), (file_lines, script_lines)


def test_an_unknown_name_is_one_line_with_a_suggestion():
    with pytest.raises(ArgsError, match="unknown argument 'num_generation'; did you mean 'num_generations'"):
        grpo_defaults().num_generation = 8


# the guide's set-up, per_device_train_batch_size left to fill: 8 rollouts a step in both scripts below
SETUP = """
    import vfrl as vf

    env = vf.load_environment("reverse-text")
    model, tokenizer = vf.get_model_and_tokenizer({model!r})
    args = vf.grpo_defaults(run_name="script", output_dir="outputs")
    args.max_steps = 3
    args.per_device_train_batch_size = {per_device}
    args.num_generations = 4
    args.gradient_accumulation_steps = 1
    args.max_completion_length = 8
    args.num_eval_examples = 16  # each evaluate(): 16 rollouts (the default 64 only costs test time)
    trainer = vf.GRPOTrainer(model=model, processing_class=tokenizer, env=env, args=args,
                             peft_config=vf.lora_defaults(),{server}
                             inference={{"args": {{"dtype": "float32", "max_model_len": 256, "enforce_eager": True}}}})
"""
SCRIPT = SETUP + """
    before = trainer.evaluate()  # the baseline, as the seeds advise; starts vf-vllm
    run_dir = trainer.train()  # on the same server
    after = trainer.evaluate()  # the trained policy
    assert trainer.trainer.pipeline.served == "policy-3"  # what that eval sampled from
    trainer.save_model("saved-adapter")
    print("EVAL", before["eval/num_rollouts"], after["eval/num_rollouts"], before["eval/reward_mean"],
          after["eval/reward_mean"])
    print("RUN_DIR", run_dir)
"""


@pytest.mark.e2e
def test_the_guides_script_trains_for_real(tmp_path, tiny_model):
    """The guide's script, with the tiny model: vf-vllm started once by the trainer for a baseline eval,
    the training and an eval of the trained policy, stopped when the script ends; an adapter loaded each
    step, the same metrics and run directory as vf-rl's, nothing left running."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT.format(model=str(tiny_model), per_device=8, server="")))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=900,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_dir = Path(done.stdout.split("RUN_DIR ")[-1].strip())
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "loss" in m] == [1, 2, 3]
    assert all(m["rollouts"] == 8 for m in metrics if "rollouts" in m)
    evals = [m for m in metrics if "eval/reward_mean" in m]  # the baseline at step 0, the trained policy at 3
    assert [m["step"] for m in evals] == [0, 3] and all(m["eval/num_rollouts"] == 16 for m in evals)
    assert "EVAL 16.0 16.0" in done.stdout
    server_log = (run_dir / "logs" / "inference.log").read_text()
    assert server_log.count("Started server process") == 1  # one vf-vllm for both evals and the training
    for version in range(4):
        assert f"Loaded new LoRA adapter: name 'policy-{version}'" in server_log
    assert "step 3/3 | reward" in done.stdout
    assert (tmp_path / "saved-adapter" / "adapter_config.json").exists()
    pid = int((run_dir / "inference.pid").read_text())
    assert not Path(f"/proc/{pid}").exists(), "vf-vllm still running after the script ended"
    left = subprocess.run(["pgrep", "-f", str(run_dir)], capture_output=True, text=True).stdout.split()
    assert left == [], left


LAUNCHED_SCRIPT = SETUP + """
    import os

    before = trainer.evaluate()
    trainer.train()
    after = trainer.evaluate()
    trainer.save_model("saved-adapter")
    rank = os.environ["RANK"]
    print("RANK", rank, "TRAINED")
    if rank == "0":
        print("RANK 0 EVAL", before["eval/num_rollouts"], after["eval/num_rollouts"])
    else:
        print("RANK", rank, "EVAL", before, after)
"""


@pytest.mark.e2e
def test_the_script_under_accelerate_launch_trains_with_two_processes(tmp_path, tiny_model, shared_vllm_server):
    """`accelerate launch --num-processes 2 train.py` on the CPU (gloo), as vf-rl launches vf-train: process 0
    makes the plan and hands it, the server's URL and key to process 1; both train every step (rank 0 alone
    samples), and the run is the same as one process's: one metrics line per step, one console, each adapter
    loaded once. Against the session's vf-vllm (`vllm_base_url`), so that no vLLM start-up is paid here:
    that process 0 alone would start one is the next test, and a start by the API for real is the guide's script."""
    from conftest import log_since

    srv = shared_vllm_server
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(LAUNCHED_SCRIPT.format(model=str(tiny_model), per_device=4,  # x 2 processes
                                                             server=f"vllm_base_url={srv.base_url!r},")))
    accelerate = str(Path(sys.executable).parent / "accelerate")
    launch = [accelerate, "launch", "--multi-gpu", "--num-processes", "2", "--num-machines", "1", "--mixed-precision",
              "no", "--dynamo-backend", "no", "--main-process-port", "0", str(script)]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1",
           "VFRL_API_KEY": srv.api_key}
    loaded_from = srv.log.stat().st_size
    done = subprocess.run(launch, capture_output=True, text=True, cwd=tmp_path, timeout=900, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # process 0 evaluated (16 rollouts before and after); process 1 got {} from evaluate()
    assert "RANK 0 EVAL 16.0 16.0" in done.stdout and "RANK 1 EVAL {} {}" in done.stdout
    assert "RANK 1 TRAINED" in done.stdout  # process 1 came back from train() too
    run_dirs = sorted((tmp_path / "outputs").iterdir())
    assert [d.name for d in run_dirs] == ["script"]  # one run directory, made by process 0
    run_dir = run_dirs[0]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "loss" in m] == [1, 2, 3]  # written once, by process 0
    assert len((run_dir / "rollouts" / "step_3.jsonl").read_text().splitlines()) == 8  # 4 per process x 2
    server_log = log_since(srv.log, loaded_from)
    for version in range(4):
        assert server_log.count(f"Loaded new LoRA adapter: name 'policy-{version}'") == 1, version
    assert done.stdout.count("step 3/3 | reward") == 1  # one console
    assert (tmp_path / "saved-adapter" / "adapter_config.json").exists()
    left = subprocess.run(["pgrep", "-f", str(run_dir)], capture_output=True, text=True).stdout.split()
    assert left == [], left


@pytest.mark.parametrize("rank", [0, 1])
def test_under_accelerate_launch_process_0_alone_starts_the_server_and_hands_the_plan_over(monkeypatch, rank):
    """Each process calls _serve; process 0 makes the plan and starts vf-vllm, the others get plan, URL and key
    from it in one broadcast (here a fake of torch.distributed's), and nobody broadcasts again."""
    import accelerate
    from torch import distributed

    from vfrl import grpo

    started = []

    def serve_here(self):
        started.append(rank)
        self.url, self.api_key = "http://127.0.0.1:1/v1", "k"
        return "plan"

    def broadcast(box, src):
        assert src == 0 and (box[0] == "plan") == (rank == 0)
        box[:] = ["plan", "http://127.0.0.1:1/v1", "k"]

    trainer = grpo.GRPOTrainer(model="m", env="reverse-text")
    monkeypatch.setattr(grpo, "launched_rank", lambda: (rank, 2))
    monkeypatch.setattr(grpo.GRPOTrainer, "_serve_here", serve_here)
    monkeypatch.setattr(accelerate, "PartialState", lambda: None)
    monkeypatch.setattr(distributed, "broadcast_object_list", broadcast)
    assert trainer._serve() == "plan" and (trainer.url, trainer.api_key) == ("http://127.0.0.1:1/v1", "k")
    assert started == ([0] if rank == 0 else [])
    monkeypatch.setattr(distributed, "broadcast_object_list", lambda *a, **k: pytest.fail("a second broadcast"))
    trainer._serve()  # train() after evaluate(): the plan is known
    assert started == ([0, 0] if rank == 0 else [])  # process 0 checks its server is still up (_serve_here)
