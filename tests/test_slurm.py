"""vf-rl --slurm on paper: the [slurm] table, which node runs what, the sbatch script, and status/stop
against stand-in squeue/scancel (the real Slurm run is tests/test_slurm_e2e.py; the 2 x 8 GPU golden is in
test_launcher_plan.py)."""

import os
import signal
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vfrl.config import RLConfig
from vfrl.launcher import cli, slurm
from vfrl.launcher.machine import Machine
from vfrl.launcher.plan import PlanError, make_plan

ROOT = Path(__file__).resolve().parents[1]
LOGIN_NODE = Machine(gpus=0, cpus=4)


def config(**tables) -> RLConfig:
    raw = tomllib.loads((ROOT / "configs/rl/quickstart.toml").read_text())
    raw["trainer"]["args"]["micro_batch_size"] = 8  # 128 rollouts share out over up to 16 trainer GPUs
    for table, values in tables.items():
        raw.setdefault(table, {}).update(values)
    return RLConfig.model_validate(raw)


def test_vllm_and_trainer_that_fit_on_one_node_share_it():
    lay = slurm.layout(config(inference={"gpus": 2}, trainer={"gpus": 2}, slurm={"gpus_per_node": 4}), LOGIN_NODE)
    assert (lay.nodes, lay.gpus_per_node, lay.inference_node) == (1, 4, False)


def test_vllm_gets_a_node_of_its_own_when_both_do_not_fit():
    lay = slurm.layout(config(inference={"gpus": 8}, trainer={"gpus": 8}, slurm={"gpus_per_node": 8}), LOGIN_NODE)
    assert (lay.nodes, lay.gpus_per_node, lay.inference_node) == (2, 8, True)


def test_a_remote_server_needs_only_the_trainer_node():
    cfg = config(inference={"gpus": 8, "base_url": "http://vllm-host:8000/v1"}, trainer={"gpus": 8},
                 slurm={"gpus_per_node": 8})
    assert slurm.layout(cfg, LOGIN_NODE).nodes == 1


def test_a_login_node_without_gpus_writes_a_cpu_job_and_says_so():
    cfg = config(inference={"gpus": 1}, trainer={"gpus": 1})
    lay = slurm.layout(cfg, LOGIN_NODE)
    assert lay.gpus_per_node == 0
    assert "slurm.gpus_per_node is left out" in slurm.notes(cfg, lay)[0]
    assert slurm.layout(cfg, Machine(gpus=4, cpus=8)).gpus_per_node == 4  # on a GPU node: its own GPUs


@pytest.mark.parametrize("tables, key", [
    ({"inference": {"gpus": 16}, "trainer": {"gpus": 8}, "slurm": {"gpus_per_node": 8}}, "inference.gpus"),
    ({"inference": {"gpus": 4}, "trainer": {"gpus": 16}, "slurm": {"gpus_per_node": 8}}, "trainer.gpus"),
    ({"inference": {"gpus": 8, "share_gpus": "always"}, "trainer": {"gpus": 8}, "slurm": {"gpus_per_node": 8}},
     "inference.share_gpus"),
    ({"inference": {"gpus": 4, "share_gpus": "always"}, "trainer": {"gpus": 4, "nodes": 2},
      "slurm": {"gpus_per_node": 8}}, "inference.share_gpus"),
])
def test_a_job_the_nodes_cannot_hold_is_refused_before_anything_is_written(tables, key):
    with pytest.raises(PlanError) as e:
        slurm.layout(config(**tables), LOGIN_NODE)
    assert e.value.key == key


def test_trainer_nodes_get_a_node_each_after_vllms():
    cfg = config(inference={"gpus": 4}, trainer={"gpus": 8, "nodes": 2}, slurm={"gpus_per_node": 8})
    lay = slurm.layout(cfg, LOGIN_NODE)  # vLLM alone on node 0 even where it would fit beside node rank 0
    assert (lay.nodes, lay.inference_node, lay.trainer_nodes) == (3, True, 2)
    remote = config(inference={"base_url": "http://vllm-host:8000/v1"}, trainer={"gpus": 4, "nodes": 4},
                    slurm={"gpus_per_node": 8})
    lay = slurm.layout(remote, LOGIN_NODE)
    assert (lay.nodes, lay.inference_node, lay.trainer_nodes) == (4, False, 4)


def multi_node_job(tmp_path, **trainer):
    cfg = config(inference={"gpus": 8}, trainer={"gpus": 8, "nodes": 2, **trainer},
                 slurm={"gpus_per_node": 8})
    lay = slurm.layout(cfg, LOGIN_NODE)
    plan = make_plan(cfg, tmp_path / "run", "s", slurm.node_machine(cfg, lay, LOGIN_NODE), ROOT, nodes_from_job=True)
    slurm.place(plan, lay)
    return plan, lay


def test_trainer_nodes_are_one_srun_step_whose_tasks_learn_their_node_rank_from_slurm(tmp_path):
    """The trainer's pane script is the same on every node: its accelerate flags read the node rank
    (SLURM_PROCID of the step's one task per node) and node rank 0's address (the job script's export) from
    the shell there; vf-rl prints no per-node commands, and only node rank 0 records the run's end."""
    from vfrl.launcher.cli import launch

    plan, lay = multi_node_job(tmp_path)
    script = slurm.sbatch_script(plan, lay, ROOT).splitlines()
    assert "#SBATCH --nodes=3" in script and "#SBATCH --gpus-per-node=8" in script
    assert 'export VFRL_TRAINER_MAIN_ADDRESS="${nodes[1]}"  # trainer node rank 0: the others meet it there' in script
    assert (f"srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --relative=1 bash {tmp_path}/run/trainer.sh  "
            f"# one task per node, SLURM_PROCID = its node rank") in script
    assert f'srun --nodes=1 --ntasks=1 -w "${{nodes[0]}}" bash {tmp_path}/run/inference.sh &' in script
    assert not any("trainer node rank 1:" in n for n in plan.notes) and plan.config.trainer.main_address is None
    launch(None, plan, tmp_path / "cfg.toml", tmp_path / "run", ROOT)
    pane = (tmp_path / "run" / "trainer.sh").read_text()
    command = next(line for line in pane.splitlines() if "vf-train" in line).split(" 2>&1 |")[0]
    assert '--machine-rank "$SLURM_PROCID"' in command and '--main-process-ip "$VFRL_TRAINER_MAIN_ADDRESS"' in command
    # what bash makes of that line on node rank 1: the words accelerate gets
    words = subprocess.run(["bash", "-c", "printf '%s\\n' " + command.split(" ", 1)[1]], capture_output=True, text=True,
                           env={**os.environ, "SLURM_PROCID": "1", "VFRL_TRAINER_MAIN_ADDRESS": "gpu-node-7"},
                           check=True).stdout.splitlines()
    flag = lambda name: words[words.index(name) + 1]  # noqa: E731
    assert (flag("--num-machines"), flag("--machine-rank"), flag("--num-processes")) == ("2", "1", "16")
    assert (flag("--main-process-ip"), flag("--main-process-port")) == ("gpu-node-7", "29500")
    epilogue = pane.split(" 2>&1 |", 1)[1].splitlines()
    assert epilogue[1] == '[ "$SLURM_PROCID" = 0 ] || exit $code  # trainer node ranks > 0: node rank 0 records the end'
    done = subprocess.run(["bash", "-c", "code=3; " + "; ".join(epilogue[1:3])], capture_output=True, text=True,
                          env={**os.environ, "SLURM_PROCID": "1"})
    assert done.returncode == 3 and not (tmp_path / "run" / "trainer.exitcode").exists()


def test_a_named_main_address_is_used_as_it_is(tmp_path):
    plan, _ = multi_node_job(tmp_path, main_address="10.1.2.3")
    command = plan.trainer.command
    assert command[command.index("--main-process-ip") + 1] == "10.1.2.3"


def test_the_sbatch_script_runs_the_pane_scripts_and_records_the_job(tmp_path):
    cfg = config(slurm={"partition": "debug", "account": "me", "time": "1-00:00:00", "cpus_per_node": 2,
                        "extra_sbatch": ["--qos=low", "--mail-type=END"]})
    lay = slurm.layout(cfg, LOGIN_NODE)
    plan = make_plan(cfg, tmp_path / "run", "s", slurm.node_machine(cfg, lay, LOGIN_NODE), ROOT)
    script = slurm.sbatch_script(plan, lay, ROOT)
    for line in ["#SBATCH --nodes=1", "#SBATCH --partition=debug", "#SBATCH --account=me", "#SBATCH --time=1-00:00:00",
                 "#SBATCH --cpus-per-task=2", "#SBATCH --qos=low", "#SBATCH --mail-type=END",
                 f"#SBATCH --output={tmp_path}/run/logs/slurm-%j.out", f"bash {tmp_path}/run/inference.sh &",
                 f"bash {tmp_path}/run/trainer.sh", f'echo "$SLURM_JOB_ID" > {tmp_path}/run/slurm.jobid']:
        assert line in script.splitlines(), line
    assert "--gpus-per-node" not in script and "srun" not in script
    assert plan.trainer.env["OMP_NUM_THREADS"] == "1"  # the job's 2 cores split as on a 2-core machine


@pytest.mark.parametrize("slurm_table, error", [
    ({"extra_sbatch": ["qos=high"]}, 'slurm.extra_sbatch = ["qos=high"] is invalid'),
    ({"time": "four hours"}, "slurm.time"),
    ({"partion": "gpu"}, "did you mean 'slurm.partition'"),
])
def test_slurm_table_mistakes_are_one_line(tmp_path, monkeypatch, slurm_table, error):
    monkeypatch.chdir(tmp_path)
    lines = [f"{k} = {v!r}".replace("'", '"') for k, v in slurm_table.items()]
    (tmp_path / "cfg.toml").write_text((ROOT / "configs/rl/quickstart.toml").read_text()
                                       + "\n[slurm]\n" + "\n".join(lines) + "\n")
    result = CliRunner().invoke(cli.app, ["run", "cfg.toml", "--slurm", "--dry-run"])
    assert result.exit_code == 2
    assert error in result.output and "Traceback" not in result.output


def test_submit_needs_slurm_and_sbatch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").symlink_to(ROOT / "models")
    (tmp_path / "cfg.toml").write_text((ROOT / "configs/rl/quickstart.toml").read_text())
    result = CliRunner().invoke(cli.app, ["run", "cfg.toml", "--submit"])
    assert result.exit_code == 2 and "add --slurm" in result.output
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    result = CliRunner().invoke(cli.app, ["run", "cfg.toml", "--slurm", "--submit"])
    assert result.exit_code == 2
    assert "sbatch, squeue, scancel not found on PATH" in result.output
    assert not (tmp_path / "outputs").exists()  # refused before anything was written


def fake_slurm(bin_dir: Path, state_file: Path) -> None:
    """squeue prints the job's state from state_file (empty: gone); scancel empties it and records the call."""
    tools = {
        "squeue": f'#!/bin/sh\ncat {state_file}\n',
        "scancel": f'#!/bin/sh\necho "$@" > {state_file}.cancelled\n: > {state_file}\n',
        "sbatch": f'#!/bin/sh\necho "$@" > {state_file}.submitted\necho "4242;cluster"\n',
    }
    bin_dir.mkdir()
    for name, text in tools.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)


def test_status_and_stop_read_the_job_of_a_run_directory(tmp_path, monkeypatch):
    state = tmp_path / "state"
    fake_slurm(tmp_path / "bin", state)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "slurm.jobid").write_text("4242\n")
    (run_dir / "metrics.jsonl").write_text('{"step": 3, "max_steps": 10, "reward_mean": 0.25}\n')
    state.write_text("RUNNING\n")
    out = CliRunner().invoke(cli.app, ["status", str(run_dir)]).output
    assert out.startswith("slurm job 4242: RUNNING, trainer running, inference running, step 3/10, reward 0.250")
    # vf-train listens (its pid file): the stop is SIGUSR2, which only the trainer takes, to every process
    (run_dir / "trainer.pid").write_text("1\n")
    result = CliRunner().invoke(cli.app, ["stop", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "state.cancelled").read_text().split() == ["--signal=USR2", "--full", "4242"]
    assert "the trainer stops as on Ctrl-C" in result.output and "then its pane script stops vLLM" in result.output
    # the trainer has exited (or never listened): plain scancel
    state.write_text("RUNNING\n")
    (run_dir / "trainer.exitcode").write_text("130\n")
    result = CliRunner().invoke(cli.app, ["stop", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "state.cancelled").read_text().strip() == "4242"
    assert "stopped slurm job 4242 (trainer exit code 130)" in result.output
    assert CliRunner().invoke(cli.app, ["status", str(run_dir)]).output.startswith(
        "slurm job 4242: ended, trainer exited 130")
    result = CliRunner().invoke(cli.app, ["status", str(tmp_path)])
    assert result.exit_code == 2 and "no slurm.jobid" in result.output


def test_submit_writes_the_run_directory_and_records_the_job_id(tmp_path, monkeypatch):
    state = tmp_path / "state"
    fake_slurm(tmp_path / "bin", state)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").symlink_to(ROOT / "models")
    (tmp_path / "cfg.toml").write_text((ROOT / "configs/rl/quickstart.toml").read_text())
    result = CliRunner().invoke(cli.app, ["run", "cfg.toml", "--slurm", "--submit", "--inference.port", "18555"])
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "outputs" / "quickstart"
    assert "submitted batch job 4242" in result.output
    assert (run_dir / "slurm.jobid").read_text().strip() == "4242"
    assert (tmp_path / "state.submitted").read_text().split() == ["--parsable", str(run_dir / "job.sbatch")]
    for name in ("config.toml", "inference.sh", "trainer.sh", "job.sbatch", ".api_key"):
        assert (run_dir / name).is_file(), name
    assert "--slurm --submit" in (run_dir / "trainer.sh").read_text()  # the resume command a failure prints
    assert subprocess.run(["bash", "-n", str(run_dir / "job.sbatch")]).returncode == 0


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGUSR2"])
def test_vf_train_takes_scancels_signals_as_a_stop(tmp_path, sig):
    """scancel sends SIGTERM, `vf-rl stop RUN_DIR` SIGUSR2: vf-train's handler makes either the KeyboardInterrupt
    path (exit 130, one line)."""
    code = ("import signal, os; from vfrl.trainer import cli as c; "
            f"c.run = lambda *a: os.kill(os.getpid(), signal.{sig}); "
            "import sys; sys.argv = ['vf-train', '@', sys.argv[1]]; c.main()")
    cfg = tmp_path / "config.toml"
    cfg.write_text((ROOT / "configs/rl/quickstart.toml").read_text())
    done = subprocess.run([sys.executable, "-c", code, str(cfg)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stderr
    assert "vf-train: interrupted" in done.stdout and "Traceback" not in done.stderr


def test_every_process_of_a_pane_script_but_vf_train_ignores_the_stop_signal(tmp_path):
    """The pane scripts' `trap '' USR2` reaches what they start (vf-vllm, vLLM, tee): SIGUSR2 sent to the whole
    process group leaves the script and a stand-in server running, as `vf-rl stop` of a Slurm job needs."""
    script = tmp_path / "pane.sh"
    script.write_text("trap '' USR2\nsleep 60 &\necho ready\nwait\n")
    proc = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        os.killpg(proc.pid, signal.SIGUSR2)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=2)  # the script lives on
        server = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert len(server) == 1  # and so does what it started
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
