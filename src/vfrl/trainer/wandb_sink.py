"""wandb: the step and eval records, sample completions and mismatch alerts, beside metrics.jsonl and the console.

wandb is imported only when `report_to = "wandb"`; it honours WANDB_MODE=offline (the run files
then land in `<run_dir>/wandb/offline-run-*`) and WANDB_PROJECT (default "vfrl"). Otherwise the
trainer gets NoWandb, which has the same methods and does nothing (nanochat's DummyWandb).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vfrl.envs.messages import last_text
from vfrl.run_dir import RunDir


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
            # every cell of a column one type, or wandb refuses the row: answers are ints in one env, text in another
            table.add_data(step, r.example_id, last_text(r.prompt), last_text(r.completion), str(r.answer), r.reward)
        self.run.log({"completions": table, "step": step})

    def alert(self, title: str, text: str) -> None:
        try:
            self.run.alert(title=title, text=text, level=self.wandb.AlertLevel.WARN)
        except Exception as e:  # offline runs cannot send alerts; the console and metrics still have it
            print(f"wandb alert not sent ({e})", flush=True)

    def finish(self) -> None:
        self.run.finish()


class NoWandb:
    """report_to = "none", and every rank but 0: WandbSink's methods, doing nothing."""

    def log(self, record: dict[str, Any]) -> None:
        pass

    def completions(self, step: int, rollouts: list) -> None:
        pass

    def alert(self, title: str, text: str) -> None:
        pass

    def finish(self) -> None:
        pass
