"""Curves of a run from its metrics.jsonl (matplotlib, imported only when plotting)."""

from __future__ import annotations

import json
from pathlib import Path


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def plot_run(run_dir: Path, out: Path | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(run_dir)
    steps = [r["step"] for r in rows]
    panels = [("reward_mean", "mean reward"), ("loss", "loss"), ("mismatch_kl", "mismatch KL (trainer vs vLLM)")]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6))
    for ax, (key, title) in zip(axes, panels):
        ax.plot(steps, [r[key] for r in rows], lw=1)
        if key == "reward_mean" and len(rows) >= 10:
            k = 10
            values = [r[key] for r in rows]
            windows = [values[max(0, i - k + 1) : i + 1] for i in range(len(values))]
            avg = [sum(w) / len(w) for w in windows]
            ax.plot(steps, avg, lw=2, label=f"{k}-step mean")
            ax.legend()
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    out = out or run_dir / "curves.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
