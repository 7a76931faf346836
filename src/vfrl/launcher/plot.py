"""Curves of a run from its metrics.jsonl (matplotlib, imported only when plotting).

`vf-rl plot RUN_DIR` writes RUN_DIR/curves.png (all panels) and one PNG per panel in RUN_DIR/plots/:
reward.png (train reward, with eval reward when the run evaluated), loss.png, mismatch_kl.png (mismatch KL,
log scale, warnings marked) and step_time.png (step time and its generate / wait / train / sync parts).
Step lines and eval lines (`eval/*` keys) share metrics.jsonl; a line cut short by a crash is skipped.
"""

from __future__ import annotations

from pathlib import Path

from vfrl.run_dir import RunDir, read_jsonl


def read_metrics(run_dir: Path) -> list[dict]:
    return read_jsonl(RunDir(run_dir).metrics)


def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    picked = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    return [s for s, _ in picked], [v for _, v in picked]


def moving_mean(values: list[float], k: int) -> list[float]:
    return [sum(values[max(0, i - k + 1) : i + 1]) / len(values[max(0, i - k + 1) : i + 1]) for i in range(len(values))]


def draw_reward(ax, rows):
    steps, values = series(rows, "reward_mean")
    ax.plot(steps, values, lw=1, label="train reward")
    if len(values) >= 10:
        ax.plot(steps, moving_mean(values, 10), lw=2, label="10-step mean")
    eval_steps, eval_values = series(rows, "eval/reward_mean")
    if eval_steps:
        ax.plot(eval_steps, eval_values, "o-", lw=2, label="eval reward")
    ax.set_title("reward")


def draw_loss(ax, rows):
    ax.plot(*series(rows, "loss"), lw=1)
    ax.set_title("loss")


def draw_mismatch_kl(ax, rows):
    """mismatch_kl (one step of policy change included) and, where measured, sampler_mismatch_kl (the same policy
    on both sides), which the warnings watch."""
    steps, values = series(rows, "mismatch_kl")
    ax.plot(steps, values, lw=1, label="mismatch_kl")
    same_steps, same = series(rows, "sampler_mismatch_kl")
    if same:
        ax.plot(same_steps, same, lw=1, label="sampler_mismatch_kl (same policy)")
    if values and min(values + same) > 0:
        ax.set_yscale("log")
    watched = "sampler_mismatch_kl" if same else "mismatch_kl"
    flagged = [(r["step"], r[watched]) for r in rows
               if r.get("mismatch_kl_alert") and isinstance(r.get(watched), (int, float))]
    if flagged:
        ax.scatter(*zip(*flagged), color="red", zorder=3, label="warning")
    ax.set_title("mismatch KL (trainer vs vLLM)")


def draw_step_time(ax, rows):
    for key, label in (("step_s", "step"), ("generate_s", "generate"), ("wait_s", "wait"),
                       ("train_s", "train"), ("sync_s", "sync")):
        steps, values = series(rows, key)
        if steps:
            ax.plot(steps, values, lw=2 if key == "step_s" else 1, label=label)
    ax.set_title("step time (s)")


PANELS = {"reward": draw_reward, "loss": draw_loss, "mismatch_kl": draw_mismatch_kl, "step_time": draw_step_time}


def _draw_panel(ax, draw, rows: list[dict]) -> None:
    draw(ax, rows)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()


def plot_run(run_dir: Path, out: Path | None = None) -> list[Path]:
    """Write the combined figure (`out`, default RUN_DIR/curves.png) and RUN_DIR/plots/<panel>.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = RunDir(run_dir)
    rows = read_metrics(run_dir)
    out = out or paths.curves
    fig, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 3.6))
    for ax, draw in zip(axes, PANELS.values()):
        _draw_panel(ax, draw, rows)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    written = [out]
    paths.plots.mkdir(exist_ok=True)
    for name, draw in PANELS.items():
        fig, ax = plt.subplots(figsize=(5, 3.6))
        _draw_panel(ax, draw, rows)
        fig.tight_layout()
        fig.savefig(paths.plots / f"{name}.png", dpi=110)
        plt.close(fig)
        written.append(paths.plots / f"{name}.png")
    return written


def final_numbers(run_dir: Path) -> dict:
    """A run's end in numbers: steps, the mean train reward of its last 5 steps, its last eval reward."""
    rows = read_metrics(run_dir)
    _, rewards = series(rows, "reward_mean")
    _, evals = series(rows, "eval/reward_mean")
    return {"steps": max((r["step"] for r in rows if "reward_mean" in r), default=0),
            "reward_last5": sum(rewards[-5:]) / len(rewards[-5:]) if rewards else None,
            "eval_reward": evals[-1] if evals else None}


def plot_runs(run_dirs: list[Path], out: Path) -> list[Path]:
    """The runs of a sweep in one figure (`out`): each run's train reward (10-step mean) and eval reward."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (train, evaluated) = plt.subplots(1, 2, figsize=(11, 4))
    for run_dir in run_dirs:
        rows = read_metrics(run_dir)
        steps, values = series(rows, "reward_mean")
        if steps:
            train.plot(steps, moving_mean(values, 10), lw=1.5, label=run_dir.name)
        eval_steps, eval_values = series(rows, "eval/reward_mean")
        if eval_steps:
            evaluated.plot(eval_steps, eval_values, "o-", lw=1.5, label=run_dir.name)
    for ax, title in ((train, "train reward (10-step mean)"), (evaluated, "eval reward")):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return [out]
