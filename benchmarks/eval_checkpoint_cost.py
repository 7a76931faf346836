"""What eval during training and checkpointing cost per step: the same short run with and without them.

    .venv/bin/python benchmarks/eval_checkpoint_cost.py [STEPS]

Runs `vf-rl` twice on the tiny model (reverse-text, 32 rollouts per step): once plain, once with
eval every 2 steps (32 eval rollouts) and a checkpoint every 2 steps. Prints mean step time (after
step 1, which includes vLLM warm-up), mean wait for generation, checkpoint save time and eval time.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from vfrl.testing import write_config  # noqa: E402
from vfrl.launcher.plot import read_metrics  # noqa: E402


def run(tmp: Path, name: str, steps: int, **extra) -> list[dict]:
    cfg = write_config(tmp / f"{name}.toml", ROOT / "models" / "tiny-reverse", port=0, output_dir=tmp / "outputs",
                       run_name=name, max_steps=steps, batch_size=32, rollouts_per_example=8, micro_batch_size=32,
                       max_tokens=12, **extra)
    bin_dir = Path(sys.executable).parent
    proc = subprocess.run([str(bin_dir / "vf-rl"), "@", str(cfg), "--no-attach", "--tmux-socket", f"bench-{name}"],
                          capture_output=True, text=True, cwd=tmp)
    if proc.returncode:
        raise SystemExit(f"{name} failed; see {tmp / 'outputs' / name / 'logs'}\n" + proc.stdout[-2000:])
    return read_metrics(tmp / "outputs" / name)


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    tmp = Path(tempfile.mkdtemp(prefix="vfrl-bench-"))
    plain = run(tmp, "plain", steps)
    both = run(tmp, "eval_ckpt", steps, eval_strategy="steps", eval_steps=2, num_eval_examples=32,
               save_strategy="steps", save_steps=2)
    shutil.rmtree(tmp)
    for name, rows in (("plain", plain), ("eval+checkpoint", both)):
        train = [r for r in rows if "loss" in r and r["step"] > 1]
        evals = [r for r in rows if "eval/time_s" in r]
        saves = [r["save_s"] for r in train if r.get("save_s")]
        print(f"{name:16s} step_s {statistics.mean(r['step_s'] for r in train):.3f}  "
              f"wait_s {statistics.mean(r['wait_s'] for r in train):.3f}  "
              f"train_s {statistics.mean(r['train_s'] for r in train):.3f}  "
              + (f"save_s {statistics.mean(saves):.3f} (n={len(saves)})  " if saves else "")
              + (f"eval_s {statistics.mean(r['eval/time_s'] for r in evals):.2f} (n={len(evals)})" if evals else ""))
    print(f"machine: {os.cpu_count()} cores; steps {steps}")


if __name__ == "__main__":
    main()
