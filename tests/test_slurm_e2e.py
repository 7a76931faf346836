"""A real Slurm: scripts/install_slurm.sh makes this machine a one-node cluster (Debian's slurmctld, slurmd,
munge), then `vf-rl @ configs/rl/quickstart.toml --slurm --submit` runs the quick start as a batch job. One
job, the real vLLM CPU server and the real trainer started by the job's script instead of tmux, is seen
running by `vf-rl status RUN_DIR` and ended by `vf-rl stop RUN_DIR` (scancel --signal=USR2: the trainer, then
its pane script stops vLLM), leaving no process. Another,
the trainer alone against the session's vf-vllm (inference.base_url: a server the cluster already runs),
trains 3 steps and must end with exit 0 and its metrics. Skipped, in one line, where Slurm cannot be installed."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import log_since
from vfrl.launcher import procs, slurm

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]
VF_RL = str(Path(sys.executable).parent / "vf-rl")


@pytest.fixture(scope="module")
def cluster():
    done = subprocess.run(["bash", str(ROOT / "scripts/install_slurm.sh")], capture_output=True, text=True,
                          timeout=1200)
    if done.returncode == 3:
        pytest.skip(f"no Slurm here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "models").symlink_to(ROOT / "models")
    return tmp_path


def submit(workdir: Path, *overrides: str, env: dict | None = None) -> Path:
    done = subprocess.run([VF_RL, "@", str(ROOT / "configs/rl/quickstart.toml"), "--slurm", "--submit", *overrides],
                          capture_output=True, text=True, cwd=workdir, timeout=120, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "submitted batch job" in done.stdout
    return workdir / "outputs" / "quickstart"


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen in {timeout:.0f}s"
        time.sleep(1)


def metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def job_exit_code(job: str) -> str:
    shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
    return next(word.split("=", 1)[1] for word in shown.split() if word.startswith("ExitCode="))


def vf_rl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([VF_RL, *args], capture_output=True, text=True, timeout=300)


def test_the_quick_start_runs_as_a_slurm_job_and_ends_with_exit_0(cluster, workdir, shared_vllm_server, tiny_model):
    """Against a running server: the next test's job starts its own vLLM, and a second start-up costs ~30 s."""
    srv = shared_vllm_server
    loaded_from = srv.log.stat().st_size
    run_dir = submit(workdir, "--trainer.args.max_steps", "3", "--model", str(tiny_model),
                     "--inference.base_url", srv.base_url,
                     "--inference.api_key_var", "REMOTE_VLLM_KEY",
                     # the shared server serves runtime LoRA; the quick start merges
                     "--trainer.args.lora_sync", "adapter",
                     env={**os.environ, "REMOTE_VLLM_KEY": srv.api_key})
    job = slurm.job_id(run_dir)
    assert job, "vf-rl recorded no job id"
    wait_until(lambda: slurm.job_state(job) is None, 900, f"slurm job {job} ending")
    assert (run_dir / "trainer.exitcode").read_text().strip() == "0", (run_dir / "logs/trainer.log").read_text()[-3000:]
    assert job_exit_code(job) == "0:0"
    steps = [m for m in metrics(run_dir) if "loss" in m]
    assert [m["step"] for m in steps] == [1, 2, 3]
    assert all(0 <= m["reward_mean"] <= 1 and m["rollouts_dropped"] == 0 and m["loss_tokens"] > 0 for m in steps), steps
    assert (run_dir / "adapters").is_dir()
    # the pane scripts' own words go to Slurm's output of the batch script, under the run directory
    assert ("vf-rl: trainer exited with code 0; the inference server at " in
            (run_dir / f"logs/slurm-{job}.out").read_text())
    server_log = log_since(srv.log, loaded_from)
    for version in range(4):  # the job's trainer pushed each policy into the server it was given
        assert f"Loaded new LoRA adapter: name 'policy-{version}'" in server_log
    assert vf_rl("status", str(run_dir)).stdout.startswith(f"slurm job {job}: ended, trainer exited 0, ")
    assert not procs.pane_processes([], run_dir.resolve())


def test_status_and_stop_work_on_a_running_slurm_job(cluster, workdir):
    run_dir = submit(workdir, "--trainer.args.max_steps", "1000")
    job = slurm.job_id(run_dir)
    try:
        wait_until(lambda: metrics(run_dir), 900, "the job's first step")
        # the quick start's own vLLM (configs/rl/quickstart.toml): policies pushed through /vfrl/reload_weights,
        # which resets no prefix cache where vLLM keeps none; no periodic stats, no access log line per request;
        # the first push loads in place, later ones were loaded beside generation (staged_weights.py)
        log = run_dir / "logs/inference.log"
        wait_until(lambda: "(staged: loaded in " in log.read_text(), 600, "a staged push in the inference log")
        vllm_log = log.read_text()
        assert "vfrl: loaded weights version 0 " in vllm_log and "pushes load beside generation" in vllm_log, (
            vllm_log[-3000:])
        assert "TORCH_COMPILE_DISABLE is set, disabling torch.compile" in vllm_log  # eager, all of it (server.py)
        assert not [line for line in vllm_log.splitlines() if "reset prefix cache" in line
                    or "Avg prompt throughput" in line or "POST /v1/chat/completions" in line], vllm_log[-3000:]
        status = vf_rl("status", str(run_dir))
        assert status.stdout.startswith(f"slurm job {job}: RUNNING, trainer running, inference running, step "), status
        stopped = vf_rl("stop", str(run_dir))
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert f"stopped slurm job {job} (trainer exit code 130)" in stopped.stdout, (
            stopped.stdout + (run_dir / "logs/trainer.log").read_text()[-3000:])
        # in the order of a tmux stop: the trainer first (SIGUSR2, which the job's other processes ignore), then
        # its pane script stops vLLM; scancel's SIGTERM to every process at once is not needed
        assert "then its pane script stops vLLM" in stopped.stdout and "still running" not in stopped.stdout
        assert ("vf-rl: trainer exited with code 130; inference server stopped."
                in (run_dir / f"logs/slurm-{job}.out").read_text())
    finally:
        subprocess.run(["scancel", job], capture_output=True)
    assert slurm.job_state(job) is None
    assert not procs.pane_processes([], run_dir.resolve())  # vf-rl stop waited for every process of the run
    assert "vf-train: interrupted" in (run_dir / "logs/trainer.log").read_text()  # its last words reached the log
    # vf-vllm ended by the epilogue's SIGTERM (0), not by the stop's SIGUSR2 (its default action: exit 140)
    assert (run_dir / "inference.exitcode").read_text().strip() == "0"
