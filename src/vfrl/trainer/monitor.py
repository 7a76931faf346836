"""Where step records go besides the console: metrics.jsonl, wandb, and the mismatch-KL watch.

wandb is imported only when `report_to = "wandb"`; it honours WANDB_MODE=offline (the run files
then land in `<run_dir>/wandb/offline-run-*`) and WANDB_PROJECT (default "vfrl").
"""

from __future__ import annotations

import json
import math
import os
from collections import deque
from pathlib import Path
from statistics import median
from typing import Any

from vfrl.run_dir import RunDir


class MismatchWatch:
    """Flags a mismatch_kl (trainer vs sampler logprobs) that is too high or jumps.

    Too high: above `warn_at`. A jump: above `jump` x the running median of the last `window` steps
    (the median ignores the jumps themselves; values below `warn_at / 100` are never called a jump,
    so fp32 noise around 1e-9 cannot raise alarms). The jump rule starts after `min_history` steps:
    mismatch_kl also holds one step of policy change (one-step off-policy), which grows from ~1e-9
    through the first learning-rate warm-up steps; the quick start's climb to 0.02 at step 6 is not
    an incident. A broken weight sync or a chat-template bug shows up here first.
    """

    def __init__(self, warn_at: float, jump: float, window: int = 20, min_history: int = 10):
        self.warn_at, self.jump, self.min_history = warn_at, jump, min_history
        self.history: deque[float] = deque(maxlen=window)

    def check(self, value: float) -> str | None:
        reason = None
        if not math.isfinite(value):
            reason = f"mismatch_kl is {value}"
        elif value > self.warn_at:
            reason = f"mismatch_kl {value:.3g} is above mismatch_kl_warn = {self.warn_at:g}"
        elif len(self.history) >= self.min_history:
            med = median(self.history)
            if value > self.jump * max(med, self.warn_at / 100):
                reason = f"mismatch_kl jumped to {value:.3g}, {value / max(med, 1e-30):.0f}x its running median {med:.3g}"
        if reason is None:
            self.history.append(value)
        return reason and reason + " (broken weight sync, chat template or tokenizer mismatch?)"


def set_aside_after(metrics_path: Path, step: int) -> int:
    """On resume from checkpoint `step`: move lines of later steps (to be redone) to metrics.discarded.jsonl.

    Returns how many lines moved. Nothing is deleted; metrics.jsonl keeps steps <= `step` and is
    appended from there, so it holds each step once.
    """
    if not metrics_path.exists():
        return 0
    keep, later = [], []
    for line in metrics_path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            (later if json.loads(line).get("step", 0) > step else keep).append(line)
        except json.JSONDecodeError:  # a line cut by the crash
            later.append(line)
    if later:
        with open(RunDir(metrics_path.parent).discarded_metrics, "a") as f:
            f.write("\n".join(later) + "\n")
        tmp = metrics_path.with_name(f".{metrics_path.name}.tmp")
        tmp.write_text("".join(line + "\n" for line in keep))
        tmp.replace(metrics_path)
    return len(later)


class WandbSink:
    def __init__(self, run_dir: Path, run_name: str, config: dict[str, Any]):
        import wandb

        self.wandb = wandb
        id_file = RunDir(run_dir).wandb_run_id
        resume_id = id_file.read_text().strip() if id_file.exists() else None  # a resumed run continues it
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "vfrl"), name=run_name, dir=str(run_dir),
                              config=config, id=resume_id, resume="allow" if resume_id else None)
        id_file.write_text(self.run.id)
        # x axis = our step, so eval lines (logged after a later step's line) still land at their step
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")

    def log(self, record: dict[str, Any]) -> None:
        self.run.log({k: v for k, v in record.items() if isinstance(v, (int, float))})

    def completions(self, step: int, rollouts: list) -> None:
        table = self.wandb.Table(columns=["step", "example_id", "prompt", "completion", "answer", "reward"])
        for r in rollouts:
            table.add_data(step, r.example_id, r.prompt[-1]["content"] if r.prompt else "",
                           r.completion[-1]["content"] if r.completion else "", r.answer, r.reward)
        self.run.log({"completions": table, "step": step})

    def alert(self, title: str, text: str) -> None:
        try:
            self.run.alert(title=title, text=text, level=self.wandb.AlertLevel.WARN)
        except Exception as e:  # offline runs cannot send alerts; the console and metrics still have it
            print(f"wandb alert not sent ({e})", flush=True)

    def finish(self) -> None:
        self.run.finish()
