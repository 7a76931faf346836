"""Two trainer processes on the CPU (gloo), for real: `accelerate launch` of this very file as the worker.

- one train_step with 2 processes gives the 1-process gradient, loss and metrics on the same batch;
- a checkpoint written by 2 processes restores the weights and each rank's own RNG state;
- `vf-rl` with trainer.processes = 2: one orchestrator, one adapter push per step, one metrics line per step.
  (Resuming such a run is the checkpoint test above plus test_checkpoint_resume.py's exact-loss resume;
  a second real run to show it again cost a minute of every test run.)
"""

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import tmux_socket
import tomli_w

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
ACCELERATE_CPU = [str(BIN / "accelerate"), "launch", "--multi-gpu", "--num-processes", "2", "--num-machines", "1",
                  "--mixed-precision", "no", "--dynamo-backend", "no", "--main-process-port", "0"]
ARGS = {"micro_batch_size": 2, "beta": 0.1, "max_grad_norm": 1e9,  # unclipped: the raw gradient is compared
        "mask_truncated_completions": True,
        "lr_scheduler_type": "linear", "max_steps": 4}  # a schedule stepped once per process would show in lr
TRUNCATED = (6, 7)  # micro-batch 3 has no loss token: rank 1's last micro-batch must still join DDP's all-reduce


def cpu_env() -> dict[str, str]:
    return {**os.environ, "ACCELERATE_USE_CPU": "true", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}


def run_worker(out: Path, model: Path, processes: int, mode: str) -> None:
    launcher = ACCELERATE_CPU if processes > 1 else [sys.executable]
    proc = subprocess.run([*launcher, __file__, str(out), str(model), mode], capture_output=True, text=True,
                          timeout=300, env=cpu_env(), cwd=HERE.parent)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]


MODES = ("lora", "full")  # full: use_lora = false, every weight (tied ones too)


@pytest.fixture(scope="session")
def one_process_output(tmp_path_factory, tiny_model):
    """The worker's one-process results, both modes: the reference of the 2-process and the 2-node launches
    (test_multinode_trainer.py) alike; each trainer seeds itself, so one launch serves both."""
    out1 = tmp_path_factory.mktemp("one")
    run_worker(out1, tiny_model, 1, ",".join(MODES))
    return out1


@pytest.fixture(scope="module")
def worker_outputs(tmp_path_factory, tiny_model, one_process_output):
    """The one-process launch and one with 2 processes, each doing both modes (a launch costs ~15 s of imports)."""
    out2 = tmp_path_factory.mktemp("two")
    run_worker(out2, tiny_model, 2, ",".join(MODES))
    return one_process_output, out2


@pytest.fixture(params=MODES)
def one_and_two(request, worker_outputs):
    return tuple(out / request.param for out in worker_outputs)


def test_two_processes_compute_the_one_process_gradient(one_and_two):
    import torch

    out1, out2 = one_and_two
    s1, s2 = (json.loads((o / "stats.json").read_text()) for o in (out1, out2))
    assert s1["world_size"] == 1 and s2["world_size"] == 2
    assert s2["micro_batches_per_rank"] == [[0, 2], [1, 3]]
    for key in ("loss", "grad_norm", "entropy", "kl", "mismatch_kl", "clip_fraction_low", "loss_tokens", "lr"):
        assert s2[key] == pytest.approx(s1[key], abs=1e-5, rel=1e-5), key
    assert s1["grad_norm"] > 0 and s1["kl"] == 0.0 and s1["entropy"] > 0
    g1, g2 = torch.load(out1 / "grads.pt"), torch.load(out2 / "grads.pt")
    assert g1.keys() == g2.keys() and g1
    for name in g1:
        assert torch.allclose(g1[name], g2[name], atol=1e-5, rtol=0), (name, (g1[name] - g2[name]).abs().max())
    # the updated weights, where AdamW's first step is well conditioned: it moves a weight by about
    # lr * g / (|g| + eps), eps = 1e-8, so a gradient entry near eps (some are ~7e-9 here) turns float32
    # summation-order noise (<= 3e-8 measured) into 5e-5 of weight; at |g| >= 1e-6 the same noise is < 1e-5
    w1, w2 = torch.load(out1 / "weights.pt"), torch.load(out2 / "weights.pt")
    assert w1.keys() == g1.keys()
    for name in w1:
        sure = g1[name].abs() >= 1e-6
        assert sure.any() or name.endswith("lora_A.default.weight"), name  # LoRA B starts at 0: A gets no gradient
        assert torch.allclose(w1[name][sure], w2[name][sure], atol=1e-5, rtol=0), name


def test_two_process_checkpoint_restores_weights_and_each_ranks_rng(one_and_two):
    _, out2 = one_and_two
    ranks = [json.loads((out2 / f"resume_rank{r}.json").read_text()) for r in (0, 1)]
    for r in ranks:
        assert r["same_weights"] and r["same_lr"]
        assert r["draws_after_resume"] == r["draws_after_save"]  # its own stream, not rank 0's
    assert ranks[0]["draws_after_save"] != ranks[1]["draws_after_save"]


# ---------- the config key and the plan (on paper) ----------
def rl_config(trainer: dict, **args):
    from vfrl.config import RLConfig

    args = {"rollouts_per_example": 4, "batch_size": 8, "micro_batch_size": 2, **args}
    return RLConfig.model_validate({"model": "m", "env": {"id": "reverse-text"}, "trainer": {**trainer, "args": args}})


def test_processes_key_counts_in_the_batch_rule_and_must_match_trainer_gpus():
    from vfrl.config import RuleError

    assert rl_config({"gpus": 0, "processes": 2}).trainer.num_processes == 2
    assert rl_config({"gpus": 2}).trainer.num_processes == 2 and rl_config({"gpus": 0}).trainer.num_processes == 1
    with pytest.raises(ValueError, match=r"micro_batch_size x trainer processes \(2 x 8 = 16\)"):
        rl_config({"gpus": 0, "processes": 8})
    with pytest.raises(ValueError, match=r"trainer.processes.*must equal trainer.gpus \(2\)") as e:
        rl_config({"gpus": 2, "processes": 4}, batch_size=16)
    assert isinstance(e.value.errors()[0]["ctx"]["error"], RuleError)


def test_cpu_plan_launches_n_gloo_processes(tmp_path):
    from vfrl.launcher.machine import Machine
    from vfrl.launcher.plan import make_plan

    plan = make_plan(rl_config({"gpus": 0, "processes": 2}), tmp_path / "run", "s", Machine(gpus=0, cpus=8), tmp_path)
    cmd = plan.trainer.command
    assert plan.trainer_processes == 2 and Path(cmd[0]).name == "accelerate"
    assert cmd[cmd.index("--num-processes") + 1] == "2" and "--multi-gpu" in cmd and "--cpu" not in cmd
    assert cmd[cmd.index("--main-process-port") + 1] == "0"  # a free rendezvous port, runs side by side
    assert Path(cmd[cmd.index("@") - 1]).name == "vf-train"
    assert plan.trainer.env["ACCELERATE_USE_CPU"] == "true" and plan.trainer.env["OMP_NUM_THREADS"] == "2"
    one = make_plan(rl_config({"gpus": 0}), tmp_path / "run1", "s", Machine(gpus=0, cpus=8), tmp_path)
    assert Path(one.trainer.command[0]).name == "vf-train" and "ACCELERATE_USE_CPU" not in one.trainer.env


# ---------- a real run: vf-rl, real vLLM, 2 trainer processes on the CPU ----------
@pytest.mark.e2e
def test_vf_rl_with_two_cpu_trainer_processes(tmp_path, tiny_model, shared_vllm_server):
    """Against the session's vf-vllm (inference.base_url): what is under test is the trainer's two processes."""
    from conftest import SharedServer, against_server, log_since, write_config
    from vfrl.launcher.plot import read_metrics

    socket_name = tmux_socket("mp", tmp_path)
    cfg = write_config(tmp_path / "cfg.toml", tiny_model, port=0, output_dir=tmp_path / "outputs", max_steps=3,
                       batch_size=8, micro_batch_size=2, save_strategy="steps", save_steps=2)
    data = tomllib.loads(cfg.read_text())
    data["trainer"] |= {"gpus": 0, "processes": 2}
    cfg.write_text(tomli_w.dumps(data))
    against_server(cfg, shared_vllm_server.base_url)
    vf_rl = [str(BIN / "vf-rl"), "@", str(cfg), "--no-attach", "--tmux-socket", socket_name]
    run_dir = tmp_path / "outputs" / "test"
    log_start = shared_vllm_server.log.stat().st_size
    try:
        proc = subprocess.run(vf_rl, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                              env={**os.environ, "SHARED_VLLM_KEY": SharedServer.api_key})
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        first = [r for r in read_metrics(run_dir) if "loss" in r]
        trainer_log = (run_dir / "logs" / "trainer.log").read_text()
        server_log = log_since(shared_vllm_server.log, log_start)
    finally:
        subprocess.run(["tmux", "-L", socket_name, "kill-server"], capture_output=True)
    assert (run_dir / "trainer.exitcode").read_text().strip() == "0"
    assert "--num-processes 2" in (run_dir / "trainer.sh").read_text()
    assert trainer_log.count("step 3/3") == 1, trainer_log[-3000:]  # one console, rank 0's
    assert [r["step"] for r in first] == [1, 2, 3]  # one line per step, written once
    for version in range(4):  # policy-0 (base) and one per step, each pushed exactly once
        assert server_log.count(f"Loaded new LoRA adapter: name 'policy-{version}'") == 1, version
    # generation once per step, by rank 0 only: one request per example (reverse-text is single-turn; a
    # group's rollouts are one request with n, see group_request.py), batch_size / rollouts_per_example a step
    per_step = 8 // data["trainer"]["args"]["rollouts_per_example"]
    assert server_log.count('"POST /v1/chat/completions HTTP/1.1" 200') == per_step * 3
    assert "broadcast_buffers" not in trainer_log
    rollouts = [json.loads(line) for line in (run_dir / "rollouts" / "step_3.jsonl").read_text().splitlines()]
    assert len(rollouts) == 8
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-2", "step-3"]
    assert (run_dir / "checkpoints" / "step-2" / "pending_batch.json").exists()
    left = subprocess.run(["pgrep", "-f", str(run_dir)], capture_output=True, text=True).stdout.split()
    assert left == [], f"processes still running for the run (a trainer rank?): {left}"


# ---------- the worker: `python this_file OUT MODEL`, under `accelerate launch` or alone ----------
def worker(out: Path, model: Path, mode: str) -> None:
    import torch

    sys.path.insert(0, str(HERE))
    from test_train_step import fake_batch, make_trainer, trainable

    out.mkdir(exist_ok=True)
    run_dir = out / "run"
    args = {**ARGS, "use_lora": mode == "lora"}
    run = make_trainer(model, run_dir, **args)
    trainer, ranks = run.learner, run.ranks
    batch = ranks.share(fake_batch(trainer, truncated=TRUNCATED) if ranks.is_main else None)
    stats = trainer.train_step(batch)
    shards = ranks.gather(ranks.mine(4))
    if ranks.is_main:
        grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
        torch.save({n.removeprefix("module."): g for n, g in grads.items()}, out / "grads.pt")
        torch.save({n.removeprefix("module."): w for n, w in trainable(trainer).items()}, out / "weights.pt")
        stats |= {"world_size": ranks.world_size, "micro_batches_per_rank": shards}
        (out / "stats.json").write_text(json.dumps(stats))
    if ranks.world_size == 1:
        return
    # checkpoint with 2 processes: the ranks' RNG streams differ, each must get its own back
    torch.rand(1 + ranks.rank)
    run.save(1, [])
    draws_after_save = torch.rand(4).tolist()
    weights, lr = trainable(trainer), trainer.scheduler.get_last_lr()
    resumed = make_trainer(model, run_dir, resume_from=str(run_dir / "checkpoints" / "step-1"), **args)
    draws_after_resume = torch.rand(4).tolist()
    after = trainable(resumed.learner)
    (out / f"resume_rank{ranks.rank}.json").write_text(json.dumps({
        "draws_after_save": draws_after_save, "draws_after_resume": draws_after_resume,
        "same_weights": all(torch.equal(weights[n], after[n]) for n in weights),
        "same_lr": resumed.learner.scheduler.get_last_lr() == lr}))


if __name__ == "__main__":
    for each in sys.argv[3].split(","):
        worker(Path(sys.argv[1]) / each, Path(sys.argv[2]), each)
