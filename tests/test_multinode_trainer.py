"""The trainer across several nodes, simulated on one machine: each "node" is its own `accelerate launch` (torchrun)
with its node rank, one CPU process (gloo), all meeting at one localhost port, the commands built by the launcher's
rendezvous_flags / node notes.

- one train_step on 2 nodes gives the 1-process gradient and update on the same batch (test_multiprocess_trainer.py's
  worker, which does the same for 2 processes of one node);
- `vf-rl` with trainer.nodes = 2 against the session's shared vLLM: vf-rl starts node rank 0 and prints node rank 1's
  command, which the test runs as a user would on the other node; 3 steps, one orchestrator, one push per step;
- on paper: the per-node commands, the main address from a Slurm job, the notes.
Real multi-node GPUs (NCCL across machines) are not run here: docs/scaling.md says what is only on paper.
"""

import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import tomli_w

import test_multiprocess_trainer as one_node
from test_multiprocess_trainer import one_process_output  # noqa: F401  (the session fixture)
from conftest import against_server, free_port, log_since, tmux_socket, write_config

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent


def no_slurm_env(**extra: str) -> dict[str, str]:
    """This environment without a Slurm job's variables (the Slurm tests may run beside these), plus `extra`."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}, **extra}


def rl_config(trainer: dict, **args):
    from vfrl.config import RLConfig

    args = {"rollouts_per_example": 4, "batch_size": 8, "micro_batch_size": 2, **args}
    return RLConfig.model_validate({"model": "m", "env": {"id": "reverse-text"}, "trainer": {**trainer, "args": args}})


# ---------- on paper: the commands per node ----------
def test_each_node_gets_the_same_rendezvous_and_its_own_rank(tmp_path):
    from vfrl.launcher.machine import Machine
    from vfrl.launcher.plan import make_plan, rendezvous_flags

    cfg = rl_config({"gpus": 2, "nodes": 3, "main_address": "node-01", "main_port": 29611}, batch_size=48)
    plan = make_plan(cfg, tmp_path / "run", "s", Machine(gpus=8, cpus=64), tmp_path)
    cmd = plan.trainer.command
    assert cmd[cmd.index("--num-processes") + 1] == "6"  # accelerate's --num-processes: every node's together
    assert rendezvous_flags(plan.config, 0) == ["--num-machines", "3", "--machine-rank", "0", "--main-process-ip",
                                                "node-01", "--main-process-port", "29611"]
    assert " ".join(rendezvous_flags(plan.config, 0)) in " ".join(cmd)
    others = [n for n in plan.notes if n.startswith("trainer node rank ")]
    assert len(others) == 2
    for rank, note in enumerate(others, start=1):
        assert note.startswith(f"trainer node rank {rank}: cd {tmp_path} && ")
        assert " ".join(rendezvous_flags(plan.config, rank)) + " " in note and "--num-processes 6 " in note
        assert note.endswith(f"vf-train @ {tmp_path / 'run' / 'config.toml'}")
        assert "CUDA_VISIBLE_DEVICES" not in note  # another machine: its first trainer.gpus GPUs
    assert not any("127.0.0.1" in n for n in plan.notes)
    with pytest.raises(ValueError, match="node rank 3 is not one of trainer.nodes = 3"):
        rendezvous_flags(plan.config, 3)


def test_one_process_per_node_on_the_cpu_is_still_a_distributed_launch(tmp_path):
    from vfrl.launcher.machine import Machine
    from vfrl.launcher.plan import CPU_ADAPTER_NOTE, make_plan

    plan = make_plan(rl_config({"gpus": 0, "nodes": 2}), tmp_path / "run", "s", Machine(gpus=0, cpus=4), tmp_path,
                     environ={})
    cmd = plan.trainer.command
    assert Path(cmd[0]).name == "accelerate" and cmd[cmd.index("--num-processes") + 1] == "2"
    assert cmd[cmd.index("--machine-rank") + 1] == "0" and cmd[cmd.index("--main-process-port") + 1] == "29500"
    assert plan.config.trainer.main_address == "127.0.0.1"  # no Slurm job: every node on this machine
    assert plan.trainer.env["ACCELERATE_USE_CPU"] == "true" and plan.trainer.env["OMP_NUM_THREADS"] == "2"
    assert any(n.startswith("trainer.main_address = 127.0.0.1 (no Slurm job): only trainer nodes on this machine")
               for n in plan.notes)
    node1 = next(n for n in plan.notes if n.startswith("trainer node rank 1: "))
    # another machine's trainer takes all its cores (no vLLM there); a CPU rank on gloo like node 0's
    assert "env CUDA_VISIBLE_DEVICES= OMP_NUM_THREADS=4 ACCELERATE_USE_CPU=true " in node1
    one = make_plan(rl_config({"gpus": 0}), tmp_path / "run1", "s", Machine(gpus=0, cpus=4), tmp_path, environ={})
    assert Path(one.trainer.command[0]).name == "vf-train" and one.notes == [CPU_ADAPTER_NOTE]  # no node notes


def test_zero3_shards_over_every_nodes_processes_in_the_memory_estimate(tmp_path):
    """What the plan would give each of zero3's processes, one per node (the plan itself refuses sharded configs
    over several processes until vf-train can push sharded weights: test_launcher_plan)."""
    from test_launcher_plan import QWEN_05B, local_model

    from vfrl.launcher.memory import model_shape, trainer_need

    model = local_model(tmp_path, "qwen", QWEN_05B)
    cfg = rl_config({"gpus": 1, "nodes": 2, "main_address": "10.0.0.5", "accelerate_config": "zero3"},
                    use_lora=False)
    shape = model_shape(tmp_path / model / "config.json")
    one, two = (trainer_need(shape, cfg, processes).static_total for processes in (1, 2))
    assert two == one / 2  # weights, gradients and AdamW states split over 2 processes


def fake_scontrol(tmp_path: Path, monkeypatch, script: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\n{script}\n")
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_main_address_is_the_slurm_jobs_first_host(tmp_path, monkeypatch):
    from vfrl.launcher.machine import Machine
    from vfrl.launcher.plan import PlanError, main_address, make_plan

    fake_scontrol(tmp_path, monkeypatch, '[ "$1 $2 $3" = "show hostnames gpu[07-08]" ] && printf "gpu07\\ngpu08\\n"')
    assert main_address({"SLURM_JOB_NODELIST": "gpu[07-08]"}) == "gpu07"
    assert main_address({"SLURM_NODELIST": "gpu[07-08]"}) == "gpu07"  # the older name
    assert main_address({"SLURM_JOB_NODELIST": "gpu09"}) == "gpu09"  # scontrol failed: one plain name is enough
    assert main_address({}) == "127.0.0.1"
    with pytest.raises(PlanError, match=r"trainer.main_address = \(left out\) is invalid: the Slurm job's first host "
                                        r"cannot be read: `scontrol show hostnames gpu\[01-04\]` failed"):
        main_address({"SLURM_JOB_NODELIST": "gpu[01-04]"})
    plan = make_plan(rl_config({"gpus": 0, "nodes": 2}), tmp_path / "run", "s", Machine(0, 4), tmp_path,
                     environ={"SLURM_JOB_NODELIST": "gpu[07-08]"})
    assert plan.config.trainer.main_address == "gpu07"  # written into the resolved config the panes read
    assert "--main-process-ip gpu07 " in " ".join(plan.trainer.command)
    assert not any("no Slurm job" in n for n in plan.notes)
    given = make_plan(rl_config({"gpus": 0, "nodes": 2, "main_address": "10.1.2.3"}), tmp_path / "run2", "s",
                      Machine(0, 4), tmp_path, environ={"SLURM_JOB_NODELIST": "gpu[07-08]"})
    assert given.config.trainer.main_address == "10.1.2.3"


# ---------- for real: 2 nodes x 1 CPU process give the 1-process gradient ----------
def node_launch(rank: int, port: int) -> list[str]:
    """Node `rank`'s launcher for the worker, with the launcher's own rendezvous flags (main address left out:
    no Slurm job, so 127.0.0.1)."""
    from vfrl.launcher.plan import main_address, rendezvous_flags

    cfg = rl_config({"gpus": 0, "nodes": 2, "main_port": port})
    cfg.trainer.main_address = main_address(no_slurm_env())
    return [str(BIN / "accelerate"), "launch", "--multi-gpu", "--num-processes", "2", "--mixed-precision", "no",
            "--dynamo-backend", "no", *rendezvous_flags(cfg, rank)]


def run_all(commands: list[list[str]], env: dict[str, str], timeout: float) -> None:
    """Start every command at once (the nodes must meet), wait for all; none outlives this call."""
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                              cwd=HERE.parent, start_new_session=True) for c in commands]
    try:
        outs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    for c, p, out in zip(commands, procs, outs):
        assert p.returncode == 0, f"{c[:12]}\n{out[-5000:]}"


@pytest.fixture(scope="module")
def one_process_and_two_nodes(tmp_path_factory, tiny_model, one_process_output):  # noqa: F811  (the imported fixture)
    """The two-node launch, against the one-process reference of test_multiprocess_trainer.py."""
    out2 = tmp_path_factory.mktemp("nodes")
    port = free_port()
    worker = [one_node.__file__, str(tiny_model), "lora"]
    run_all([[*node_launch(rank, port), worker[0], str(out2), *worker[1:]] for rank in (0, 1)],
            one_node.cpu_env(), timeout=600)
    return one_process_output / "lora", out2 / "lora"


def test_two_nodes_compute_the_one_process_gradient_and_update(one_process_and_two_nodes):
    """The same assertions as for 2 processes on one node: only the rendezvous differs."""
    one_node.test_two_processes_compute_the_one_process_gradient(one_process_and_two_nodes)
    _, out2 = one_process_and_two_nodes
    stats = json.loads((out2 / "stats.json").read_text())
    assert stats["world_size"] == 2 and stats["micro_batches_per_rank"] == [[0, 2], [1, 3]]


def test_a_two_node_checkpoint_restores_each_ranks_rng(one_process_and_two_nodes):
    one_node.test_two_process_checkpoint_restores_weights_and_each_ranks_rng(one_process_and_two_nodes)


# ---------- for real: vf-rl, one vLLM, node rank 0 by vf-rl and node rank 1 by hand ----------
@pytest.fixture(scope="module")
def two_node_run(shared_vllm_server, tiny_model, tmp_path_factory):
    srv = shared_vllm_server
    tmp = tmp_path_factory.mktemp("multinode")
    socket_name = tmux_socket("multinode", tmp)
    cfg = write_config(tmp / "cfg.toml", tiny_model, port=0, output_dir=tmp / "outputs", max_steps=3,
                       batch_size=8, micro_batch_size=2)
    data = tomllib.loads(cfg.read_text())
    data["trainer"] |= {"gpus": 0, "nodes": 2, "main_port": free_port()}  # main_address: left to vf-rl
    cfg.write_text(tomli_w.dumps(data))
    against_server(cfg, srv.base_url, "REMOTE_VLLM_KEY")
    env = no_slurm_env(REMOTE_VLLM_KEY=srv.api_key)
    server_log_start = srv.log.stat().st_size
    run_dir = tmp / "outputs" / "test"
    try:
        started = subprocess.run([str(BIN / "vf-rl"), "@", str(cfg), "--detach", "--tmux-socket", socket_name],
                                 capture_output=True, text=True, cwd=tmp, timeout=300, env=env)
        assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:]
        node1 = next(line for line in started.stderr.splitlines() if "trainer node rank 1: " in line)
        node1 = node1.split("trainer node rank 1: ", 1)[1]
        # what the user runs on the other node (here: this machine, as 127.0.0.1 allows)
        second = subprocess.run(["bash", "-c", node1], capture_output=True, text=True, timeout=600, env=env,
                                start_new_session=True)
        for _ in range(300):  # node rank 0 ends with node rank 1 (the ranks close together); its pane then writes
            if (run_dir / "trainer.exitcode").exists():
                break
            time.sleep(1)
    finally:
        subprocess.run(["tmux", "-L", socket_name, "kill-server"], capture_output=True)  # the detached session
    left = subprocess.run(["pgrep", "-af", str(run_dir)], capture_output=True, text=True).stdout.splitlines()
    try:
        yield started, node1, second, run_dir, log_since(srv.log, server_log_start), left
    finally:
        for line in left:  # a rank of a failed run: it must not outlive the test
            subprocess.run(["kill", "-9", line.split()[0]], capture_output=True)


@pytest.mark.e2e
def test_vf_rl_trains_on_two_nodes_against_one_vllm(two_node_run):
    from vfrl.launcher.plot import read_metrics

    started, node1, second, run_dir, server_log, left = two_node_run
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert (run_dir / "trainer.exitcode").read_text().strip() == "0"
    assert "--machine-rank 1 --main-process-ip 127.0.0.1 " in node1 and "--num-processes 2 " in node1
    pane = (run_dir / "trainer.sh").read_text()
    assert "--num-machines 2 --machine-rank 0 --main-process-ip 127.0.0.1 " in pane
    steps = [m for m in read_metrics(run_dir) if "loss" in m]
    assert [m["step"] for m in steps] == [1, 2, 3]  # one line per step, written once (by global rank 0)
    trainer_log = (run_dir / "logs" / "trainer.log").read_text()
    assert trainer_log.count("step 3/3") == 1, trainer_log[-3000:]
    assert "step 1/3" not in second.stdout + second.stderr  # node 1's rank trains silently
    for version in range(4):  # policy-0 (base) and one per step, each pushed exactly once, by global rank 0
        assert server_log.count(f"Loaded new LoRA adapter: name 'policy-{version}', path '{run_dir}") == 1, version
    # generation by global rank 0 only: one request per example, batch_size / rollouts_per_example a step
    assert server_log.count('"POST /v1/chat/completions HTTP/1.1" 200') == (8 // 4) * 3
    rollouts = (run_dir / "rollouts" / "step_3.jsonl").read_text().splitlines()
    assert len(rollouts) == 8
    assert left == [], f"processes still running for the run (a trainer rank?): {left}"
