"""Benchmark the quick start: wall time of `vf-rl @ configs/rl/quickstart.toml` and its reward gain.

    .venv/bin/python benchmarks/quickstart.py [RUNS]     (default 2: sampling in vLLM is not seeded per run)

Writes the numbers and the reward curve to docs/ (docs/benchmarks.md, docs/quickstart_curves.png).
"""

import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

from vfrl.launcher.plot import read_metrics

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run_once() -> tuple[str, Path]:
    t0 = time.time()
    proc = subprocess.run([str(BIN / "vf-rl"), "@", "configs/rl/quickstart.toml", "--no-attach"], cwd=ROOT,
                          capture_output=True, text=True)
    wall = time.time() - t0
    if proc.returncode:
        sys.exit(f"quick start failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    run_dir = Path(re.search(r"run directory (\S+)", proc.stdout).group(1))
    rows = read_metrics(run_dir)
    rewards = [r["reward_mean"] for r in rows]
    first5, last5 = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    step_s = sum(r["train_end"] - r["train_start"] + r["sync_s"] + r["wait_s"] for r in rows) / len(rows)
    row = f"| {len(rows)} | {wall:.0f} s | {step_s:.2f} s | {first5:.3f} | {last5:.3f} | {last5 - first5:+.3f} |\n"
    return row, run_dir


def write_section(path: Path, section: str, heading: str = "## Quick start") -> None:
    """Replace a benchmark's own section of docs/benchmarks.md (the one that starts with `heading`, this one's
    by default; benchmarks/side_by_side.py writes its own), or append it; other sections stay."""
    text = path.read_text() if path.exists() else "# Benchmarks\n\n"
    head, sep, rest = text.partition(heading)
    tail = rest[rest.find("\n## "):] if sep and "\n## " in rest else ""
    path.write_text((head if sep else text.rstrip("\n") + "\n\n") + section.rstrip("\n") + "\n" + tail)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    results = [run_once() for _ in range(runs)]
    run_dir = results[-1][1]
    subprocess.run([str(BIN / "vf-rl"), "plot", str(run_dir), "-o", str(ROOT / "docs" / "quickstart_curves.png")],
                   check=True, capture_output=True)
    machine = f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, no GPU"
    report = (
        f"## Quick start (`configs/rl/quickstart.toml`)\n\n"
        f"Command: `.venv/bin/python benchmarks/quickstart.py {runs}` "
        f"(runs `vf-rl @ configs/rl/quickstart.toml --no-attach` {runs} times, one row each)\n\n"
        f"Machine: {machine}. Measured {time.strftime('%Y-%m-%d')}; load average before the runs "
        f"{os.getloadavg()[0]:.1f}.\n\n"
        f"| steps | wall time (launch to exit) | mean step time | reward, first 5 steps | reward, last 5 steps "
        f"| gain |\n"
        f"|---|---|---|---|---|---|\n"
        + "".join(row for row, _ in results)
        + "\nCurves of the last run:\n\n![quick start curves](quickstart_curves.png)\n"
    )
    write_section(ROOT / "docs" / "benchmarks.md", report)
    print(report)


if __name__ == "__main__":
    main()
