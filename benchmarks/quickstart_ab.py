"""One quick-start run for an A/B comparison: medians of step_s, generate_s, train_s, sync_s over steps 3..N, the
loop's cadence (median and mean), and the CPU seconds each side's process tree (vf-vllm with vLLM's API server,
engine core and workers; vf-train) spent per step over those steps (psutil, sampled every 0.25 s).

    .venv/bin/python benchmarks/quickstart_ab.py STEPS LABEL [VF-RL OPTION ...]   # e.g. --trainer.args.use_lora false

Run it once per side (check out or stash the change in between), alternating A B A B on an idle machine.
AB_CONFIG=benchmarks/configs/19m.toml runs that config instead of configs/rl/quickstart.toml.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from cpu_time import RunCpu, spent

ROOT = Path(__file__).resolve().parents[1]
steps, label = int(sys.argv[1]), sys.argv[2]
tmp = Path(tempfile.mkdtemp(prefix=f"ab-{label}-"))
(tmp / "models").symlink_to(ROOT / "models")
config = ROOT / os.environ.get("AB_CONFIG", "configs/rl/quickstart.toml")
run_dir = tmp / "outputs" / tomllib.loads(config.read_text())["trainer"]["args"]["run_name"]
load0 = os.getloadavg()[0]
t0 = time.time()
with RunCpu(run_dir) as cpu:
    p = subprocess.run([str(Path(sys.executable).parent / "vf-rl"), "@", str(config), "--no-attach",
                        "--tmux-socket", f"ab-{label}-{os.getpid()}", "--trainer.args.max_steps", str(steps),
                        "--inference.port", "0", *sys.argv[3:]], cwd=tmp, capture_output=True, text=True)
rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
rows = [r for r in rows if "loss" in r and r["step"] >= 3]


def med(key: str) -> float:
    return statistics.median(r[key] for r in rows)


def cpu_per_step(tree: int) -> dict[str, float]:
    """CPU seconds per step of each process of a tree (0: vLLM's, 1: the trainer's) between the ends of the
    first and last steps kept's generation (nearest samples before them)."""
    n = rows[-1]["step"] - rows[0]["step"]
    used = spent(cpu.at(rows[0]["gen_end"])[tree], cpu.at(rows[-1]["gen_end"])[tree])
    return {name: s / n for name, s in used.items()}


vllm_cpu, trainer_cpu = cpu_per_step(0), cpu_per_step(1)
# the loop's cadence, whatever a step's own timings count: one training start to the next
cadence = statistics.median(b["train_start"] - a["train_start"] for a, b in zip(rows, rows[1:]))
# and its mean: the run's pace, with the slow steps a median leaves out (a pause every few steps)
pace = (rows[-1]["train_start"] - rows[0]["train_start"]) / (len(rows) - 1)
print(f"{label}: exit {p.returncode}, {len(rows)} steps, step_s {med('step_s'):.3f}, "
      f"generate_s {med('generate_s'):.3f}, train_s {med('train_s'):.3f}, sync_s {med('sync_s'):.3f}, "
      f"cadence {cadence:.3f} (mean {pace:.3f}), CPU s/step vLLM {sum(vllm_cpu.values()):.3f} "
      f"trainer {sum(trainer_cpu.values()):.3f}, wall {time.time()-t0:.0f}s, load before {load0:.2f}")
by_cpu = sorted({**vllm_cpu, **trainer_cpu}.items(), key=lambda kv: -kv[1])
print("  CPU s/step by process:", ", ".join(f"{k} {v:.3f}" for k, v in by_cpu))
