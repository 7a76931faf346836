"""What num_batches_ahead = k buys: the quick start at several k, side by side in one run, interleaved.

    .venv/bin/python benchmarks/batches_ahead.py [--ks 0,1,2,4] [--rounds 1] [--config configs/rl/quickstart.toml]
                                                 [--max-steps N] [--target R] [--corrections MODES]

Each run is `vf-rl @ CONFIG --no-attach --trainer.args.num_batches_ahead K` in its own output dir; the rounds
go k by k in turn, so a load that changes over time hits every k alike. Per run, from metrics.jsonl: the wall
time (launch to exit), the median step time, the steps and seconds of training until the reward (the mean of
5 steps) first reaches `--target`, the last 5 steps' reward, the mean staleness (step - 1 - policy_version)
and mismatch_kl, and each step's reward and mismatch_kl (the curves, in the JSON). `--corrections
token_truncate,token_mask` (vllm_importance_sampling_mode values) adds, for every k > 0, a run per mode with
`vllm_importance_sampling_correction = true`, in the same rounds; those rows also give the mean importance
weight and the fraction of tokens the mask took out. Writes
docs/benchmarks/batches_ahead_<config>.json and its section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vfrl.launcher.plot import read_metrics

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from quickstart import write_section  # noqa: E402  (the section writer the quick start's report uses)


def run(config: str, k: int, out: Path, target: float, extra: list[str], correction: str | None = None) -> dict:
    if correction:
        extra = [*extra, "--trainer.args.vllm_importance_sampling_correction", "true",
                 "--trainer.args.vllm_importance_sampling_mode", correction]
    t0 = time.time()
    proc = subprocess.run([str(BIN / "vf-rl"), "@", config, "--no-attach", "--trainer.args.num_batches_ahead", str(k),
                           "--trainer.args.output_dir", str(out), "--tmux-socket", f"vfrl-bench-ahead-{os.getpid()}",
                           *extra], cwd=ROOT, capture_output=True, text=True)
    wall = time.time() - t0
    if proc.returncode:
        sys.exit(f"k = {k} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    [run_dir] = [p for p in out.iterdir() if (p / "metrics.jsonl").exists()]
    rows = [r for r in read_metrics(run_dir) if "loss" in r]
    rewards = [r["reward_mean"] for r in rows]
    smooth = [statistics.fmean(rewards[max(0, i - 4):i + 1]) for i in range(len(rewards))]
    reached = next((i for i, r in enumerate(smooth) if r >= target), None)
    weights = [r["importance_sampling_ratio"] for r in rows if "importance_sampling_ratio" in r]
    masked = [r["importance_sampling_masked_fraction"] for r in rows if "importance_sampling_masked_fraction" in r]
    return {
        "k": k, "correction": correction, "steps": len(rows), "wall_s": round(wall, 1),
        "step_s_median": round(statistics.median(r["step_s"] for r in rows), 4),
        "steps_to_target": None if reached is None else reached + 1,
        "seconds_to_target": None if reached is None else round(rows[reached]["train_end"] - rows[0]["gen_start"], 1),
        "reward_last5": round(statistics.fmean(rewards[-5:]), 4),
        "staleness_mean": round(statistics.fmean(r["step"] - 1 - r["policy_version"] for r in rows), 3),
        "mismatch_kl_mean": statistics.fmean(r["mismatch_kl"] for r in rows),
        "importance_weight_mean": round(statistics.fmean(weights), 4) if weights else None,
        "masked_fraction_mean": round(statistics.fmean(masked), 5) if masked else None,
        "curves": {"reward_mean": [round(x, 4) for x in rewards],
                   "mismatch_kl": [float(f"{r['mismatch_kl']:.3g}") for r in rows]},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ks", default="0,1,2,4")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--config", default="configs/rl/quickstart.toml")
    p.add_argument("--target", type=float, default=0.8, help="the reward (mean of 5 steps) timed to")
    p.add_argument("--max-steps", type=int, help="the config's max_steps otherwise")
    p.add_argument("--corrections", default="", help="vllm_importance_sampling_mode values to add for k > 0")
    p.add_argument("--name", help="names the results file and the docs section (default: the config's stem), so a "
                                  "second table on one config keeps the first")
    a = p.parse_args()
    modes = [m for m in a.corrections.split(",") if m]
    extra = ["--trainer.args.max_steps", str(a.max_steps)] if a.max_steps else []
    ks = [int(k) for k in a.ks.split(",")]
    load = os.getloadavg()[0]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for k in ks:
                for mode in [None, *(modes if k > 0 else [])]:
                    out = Path(tmp) / f"r{r}-k{k}-{mode or 'plain'}"
                    results.append(run(a.config, k, out, a.target, extra, mode) | {"round": r})
                    print(json.dumps(results[-1]), flush=True)
    name = a.name or Path(a.config).stem
    machine = f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, no GPU"
    out = ROOT / "docs" / "benchmarks" / f"batches_ahead_{name}.json"
    out.write_text(json.dumps({"config": a.config, "target": a.target, "machine": machine, "load_before": load,
                               "measured": time.strftime("%Y-%m-%d"), "runs": results}, indent=1) + "\n")
    table = "".join(
        f"| {x['k']} | {x['correction'] or '-'} | {x['wall_s']:.0f} s | {x['step_s_median']:.3f} s | "
        f"{x['steps_to_target'] if x['steps_to_target'] else '-'} | "
        f"{str(x['seconds_to_target']) + ' s' if x['seconds_to_target'] else '-'} | {x['reward_last5']:.3f} | "
        f"{x['staleness_mean']:.2f} | {x['mismatch_kl_mean']:.1e} | "
        f"{x['importance_weight_mean'] if x['importance_weight_mean'] is not None else '-'} | "
        f"{x['masked_fraction_mean'] if x['masked_fraction_mean'] is not None else '-'} |\n" for x in results)
    heading = f"## num_batches_ahead on `{a.config}`" + (f" ({a.name})" if a.name else "")
    section = (f"{heading}\n\n"
               f"Command: `.venv/bin/python benchmarks/batches_ahead.py --ks {a.ks} --rounds {a.rounds} --config "
               f"{a.config}{f' --max-steps {a.max_steps}' if a.max_steps else ''} --target {a.target}"
               f"{f' --corrections {a.corrections}' if modes else ''}{f' --name {a.name}' if a.name else ''}` "
               f"(results: `docs/benchmarks/{out.name}`)\n\nMachine: {machine}; load average before "
               f"the runs {load:.1f}. Interleaved: each round runs every k in turn.\n\n"
               f"| k | correction | wall time | median step | steps to reward {a.target} | training time to it "
               f"| reward, last 5 | mean staleness | mismatch_kl | importance weight | masked |\n"
               f"|---|---|---|---|---|---|---|---|---|---|---|\n" + table)
    write_section(ROOT / "docs" / "benchmarks.md", section, heading=heading)
    print(section)


if __name__ == "__main__":
    main()
