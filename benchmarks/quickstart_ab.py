"""One quick-start run for an A/B comparison: medians of step_s, generate_s, train_s, sync_s over steps 3..N.

    .venv/bin/python benchmarks/quickstart_ab.py STEPS LABEL

Run it once per side (check out or stash the change in between), alternating A B A B on an idle machine.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
steps, label = int(sys.argv[1]), sys.argv[2]
tmp = Path(tempfile.mkdtemp(prefix=f"ab-{label}-"))
(tmp / "models").symlink_to(ROOT / "models")
load0 = os.getloadavg()[0]
t0 = time.time()
p = subprocess.run([str(Path(sys.executable).parent / "vf-rl"), "@", str(ROOT / "configs/rl/quickstart.toml"), "--no-attach",
                    "--tmux-socket", f"ab-{label}-{os.getpid()}", "--trainer.args.max_steps", str(steps),
                    "--inference.port", "0"], cwd=tmp, capture_output=True, text=True)
rows = [json.loads(l) for l in (tmp / "outputs/quickstart/metrics.jsonl").read_text().splitlines()]
rows = [r for r in rows if "loss" in r and r["step"] >= 3]


def med(key: str) -> float:
    return statistics.median(r[key] for r in rows)


print(f"{label}: exit {p.returncode}, {len(rows)} steps, step_s {med('step_s'):.3f}, generate_s {med('generate_s'):.3f}, "
      f"train_s {med('train_s'):.3f}, sync_s {med('sync_s'):.3f}, wall {time.time()-t0:.0f}s, load before {load0:.2f}")
