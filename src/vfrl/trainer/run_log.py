"""What a run writes as it goes: metrics.jsonl, rollouts/step_N.jsonl and eval_N.jsonl, the console, wandb or
TensorBoard.

One line per step (step_record) and per eval, the step's rollouts beside it, and the mismatch watch's
alert (mismatch.py) in all three places. Rank 0 only.

A full disk (or any error writing them): a rollout file is not worth a run, so it is removed, said once
on the console, counted (`rollout_files_lost` in every metrics line from the first one lost) and the run goes
on. metrics.jsonl gets each line whole or not at all (run_dir.append_jsonl), and a line it cannot write stops the
run (the trainer's failure path: failure.py), as a checkpoint or an adapter it cannot write does.
"""

from __future__ import annotations

import json
from pathlib import Path

from vfrl.config import TrainerArgs
from vfrl.rollout_types import json_default
from vfrl.run_dir import RunDir, append_jsonl
from vfrl.trainer.console import TrainerConsole
from vfrl.trainer.mismatch import MismatchWatch
from vfrl.rollout_types import Batch
from vfrl.trainer.wandb_sink import NoWandb, WandbSink


class RunLog:
    def __init__(self, paths: RunDir, args: TrainerArgs, console: TrainerConsole, config: dict | None):
        """`config`: the run's config, for the tracker `report_to` names (rank 0); None for none (other ranks)."""
        self.paths, self.console = paths, console
        self.log, self.max_steps = args.run_log, args.max_steps  # its section (sections.py), and the run's length
        self.mismatch = MismatchWatch(self.log.mismatch_kl_warn, self.log.mismatch_kl_jump)
        # a tracker's package is imported only here: report_to = "none" needs neither it nor an account
        if config is None or self.log.report_to == "none":
            self.tracker = NoWandb()
        elif self.log.report_to == "tensorboard":
            from vfrl.trainer.tensorboard_sink import TensorboardSink

            self.tracker = TensorboardSink(paths.tensorboard)
        else:
            self.tracker = WandbSink(paths.path, self.log.run_name, config)
        self.rollout_files_lost = 0

    def step(self, step: int, record: dict, batch: Batch) -> None:
        """Training step `step`'s line (step_record), its rollouts, and what the console and the tracker show of it."""
        a = self.log
        # the same-policy figure where the trainer measured it: mismatch_kl also holds one step of policy change
        alert = self.mismatch.check(record.get("sampler_mismatch_kl", record.get("mismatch_kl", 0.0)))
        record["mismatch_kl_alert"] = int(alert is not None)
        self.write_rollouts(self.paths.step_rollouts(step), batch.rollouts)
        if self.rollout_files_lost:
            record["rollout_files_lost"] = self.rollout_files_lost
        append_jsonl(self.paths.metrics, record)
        self.console.step(record)
        if batch.warning:
            self.console.warn(batch.warning)
        if alert:
            self.console.warn(f"step {step}: {alert}")
        show = a.log_completions and step % a.logging_steps == 0
        if show:
            self.console.completions(step, batch.rollouts, a.num_completions_to_print)
        self.tracker.log(record)
        if show:
            self.tracker.completions(step, batch.rollouts)
        if alert:
            self.tracker.alert(f"mismatch_kl at step {step}", alert)

    def eval(self, version: int, stats: dict, rollouts: list) -> None:
        record = {"step": version, "max_steps": self.max_steps, **stats}
        self.write_rollouts(self.paths.eval_rollouts(version), rollouts)
        append_jsonl(self.paths.metrics, record)
        self.tracker.log(record)
        self.console.eval(version, stats)

    def write_rollouts(self, path: Path, rollouts: list) -> None:
        """write_rollouts, or when it fails (a full disk) no file at all, a count, and one warning in the run."""
        try:
            write_rollouts(path, rollouts)
        except OSError as e:
            path.unlink(missing_ok=True)  # a cut file would read as fewer rollouts; gone, it gives its space back
            self.rollout_files_lost += 1
            if self.rollout_files_lost == 1:
                self.console.warn(f"{path.parent.name}/{path.name} could not be written ({e.strerror or e}); the run "
                                  "goes on without the rollout files it cannot write (rollout_files_lost in "
                                  "metrics.jsonl counts them)")


def step_record(step: int, batch: Batch, stats: dict, model_name: str | None, times: dict, max_steps: int,
                resumed_from: int | None = None) -> dict:
    """metrics.jsonl's line for training step `step` (0-based): the step's stats, which policy sampled the batch
    and which trained on it, and where the time went. `model_name`: None when the push of its policy failed."""
    train_s = times["train_end"] - times["train_start"]
    record = {
        "step": step + 1, "max_steps": max_steps, **stats,
        "policy_version": batch.policy_version, "trained_version": step, "adapter_loaded": model_name,
        "gen_start": batch.gen_start, "gen_end": batch.gen_end, "generate_s": batch.gen_end - batch.gen_start,
        "load_s": batch.load_s,  # vLLM's load of the policy that sampled it, beside the step before
        "train_s": train_s, **times,
        "tokens_per_s": sum(len(r.prompt_ids) + len(r.completion_ids) for r in batch.rollouts) / max(train_s, 1e-9),
    }
    if resumed_from is not None:
        record["resumed_from"] = resumed_from
    return record


def rollout_row(r) -> dict:
    return {"example_id": r.example_id, "prompt": r.prompt, "completion": r.completion, "answer": r.answer,
            "reward": r.reward, "metrics": r.metrics, "policy": r.policy,
            "reward_errors": r.reward_errors, "error": r.error,  # why it scored 0 / ended early
            # training rows (a forked verifiers trace has several) and the policy's tokens among them
            "branches": len(r.sequences()), "sampled_tokens": sum(sum(s.completion_mask) for s in r.sequences())}


def write_rollouts(path: Path, rollouts: list) -> None:
    """One line per rollout; a message of any shape (an object, a pydantic model) is saved, never an error."""
    with open(path, "w") as f:
        for r in rollouts:
            f.write(json.dumps(rollout_row(r), default=json_default) + "\n")
