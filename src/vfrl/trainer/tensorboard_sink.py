"""TensorBoard: the step and eval records, sample completions and mismatch alerts as event files.

`report_to = "tensorboard"` writes them under `<run_dir>/tensorboard/` with torch's SummaryWriter (the
`tensorboard` package, the `tensorboard` extra); `tensorboard --logdir outputs/<run_name>/tensorboard` shows
them. The same methods as WandbSink (wandb_sink.py), so the run log hands either the same records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vfrl.envs.messages import last_text


class TensorboardSink:
    def __init__(self, log_dir: Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:  # torch imports it only when the tensorboard package is there
            raise RuntimeError("report_to = \"tensorboard\" needs the tensorboard package: "
                               "pip install 'vfrl[tensorboard]' (or pip install tensorboard)") from e
        self.writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, record: dict[str, Any]) -> None:
        step = int(record["step"])
        for key, value in record.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def completions(self, step: int, rollouts: list) -> None:
        rows = ["| example | prompt | completion | reward |", "|---|---|---|---|"]
        for r in rollouts:
            cells = (last_text(r.prompt), last_text(r.completion))
            prompt, completion = (" ".join(str(c).split()).replace("|", "\\|") for c in cells)
            rows.append(f"| {r.example_id} | {prompt} | {completion} | {r.reward:.3f} |")
        self.writer.add_text("completions", "\n".join(rows), step)

    def alert(self, title: str, text: str) -> None:
        self.writer.add_text("alerts", f"**{title}**: {text}")

    def finish(self) -> None:
        self.writer.close()
