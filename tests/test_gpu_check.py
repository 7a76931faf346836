"""scripts/gpu_check.py works: its trainer-side checks, small, on the CPU (the GPU run uses the same code)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAINER_CHECKS = ["machine", "model", "logprobs", "shared_prefix", "train_lora", "train_full", "resume_lora",
                  "resume_full", "shared_plan"]


def test_gpu_check_script_runs_its_trainer_checks_on_the_cpu_and_writes_results(tmp_path):
    out = tmp_path / "results.json"
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--device", "cpu", "--tiny",
                          "--no-isolate", "--workdir", str(tmp_path / "work"), "--out", str(out),
                          "--only", *TRAINER_CHECKS], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    checks = json.loads(out.read_text())["checks"]
    assert {name: c["status"] for name, c in checks.items()} == dict.fromkeys(TRAINER_CHECKS, "ok")
    assert checks["model"]["result"]["params"] == checks["model"]["result"]["launcher_params"]
    assert checks["logprobs"]["result"]["max_abs_logprob_diff"] < 1e-4
    packed = checks["shared_prefix"]["result"]
    assert packed["packed_tokens"] < packed["row_tokens"] and packed["fp32_packed_vs_rows"]["max_abs_logprob"] < 1e-4
    for name in ("train_lora", "train_full"):
        r = checks[name]["result"]
        assert r["tokens_per_s"] > 0 and r["tensors_changed"].split(" of ")[0] == r["tensors_changed"].split(" of ")[1]
    for name in ("resume_lora", "resume_full"):  # the resumed step is the continued one, bit for bit on a CPU
        r = checks[name]["result"]
        assert r["resumed_vs_continued"] == r["noise_resumed_twice"] == 0.0 < r["update_norm"]
        assert all(r["rng_restored"].values()) and r["loss"]["continued"] == r["loss"]["resumed"]
    assert checks["resume_lora"]["result"]["other_seed_vs_continued"] > 0.01  # dropout drew from the RNG
    plan = checks["shared_plan"]["result"]
    assert plan["derived"] and 0 < plan["gpu_memory_utilization"] < 1
    assert "logprobs" in run.stdout and "9 checks: 0 failed" in run.stdout  # the printed summary


def test_a_check_that_cannot_run_here_is_skipped_with_the_reason(tmp_path):
    out = tmp_path / "results.json"
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--device", "cpu", "--tiny",
                          "--no-isolate", "--workdir", str(tmp_path / "work"), "--out", str(out),
                          "--only", "accelerate_zero3_lora", "accelerate_ddp_lora"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    checks = json.loads(out.read_text())["checks"]
    assert all(c["status"] == "skipped" and c["reason"] for c in checks.values())
