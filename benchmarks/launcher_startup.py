"""Wall time of the launcher's quick paths: `vf-rl --help`, a config error, a --dry-run plan.

    .venv/bin/python benchmarks/launcher_startup.py [RUNS]

Runs each command RUNS times (default 10) as a fresh process, like hyperfine, and prints a markdown
table (wall min / median / max, median CPU seconds) with the machine's load average, for docs/benchmarks.md.
These paths import no torch or vLLM (tests/test_launcher_plan.py checks that).
"""

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VF_RL = str(Path(sys.executable).parent / "vf-rl")


def timed(cmd: list[str], runs: int) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds of the child) per run; CPU time is the steadier number on a busy machine."""
    wall, cpu = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, capture_output=True)
        wall.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as bad:
        bad.write('model = "m"\n[env]\nid = "e"\n[trainer.args]\nbatch_sise = 8\n')
    commands = {
        "vf-rl --help": [VF_RL, "--help"],
        "vf-rl @ bad.toml (one-line error)": [VF_RL, "@", bad.name],
        "vf-rl @ configs/rl/quickstart.toml --dry-run": [VF_RL, "@", "configs/rl/quickstart.toml", "--dry-run"],
    }
    timed([VF_RL, "--help"], 2)  # warm the page cache
    load = os.getloadavg()
    print(f"Machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, load average "
          f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min) at the start. {runs} runs each.\n")
    print("| command | wall min | wall median | wall max | CPU median |\n|---|---|---|---|---|")
    for name, cmd in commands.items():
        t, c = timed(cmd, runs)
        print(f"| `{name}` | {min(t):.2f} s | {statistics.median(t):.2f} s | {max(t):.2f} s | "
              f"{statistics.median(c):.2f} s |")
    os.unlink(bad.name)


if __name__ == "__main__":
    main()
