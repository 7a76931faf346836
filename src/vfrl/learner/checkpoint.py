"""Training checkpoints: `<run_dir>/checkpoints/step-N`, written atomically, newest `keep_last` kept.

A checkpoint holds everything needed to continue exactly where step N ended:

    model/               the model's save_pretrained(): the LoRA adapter, or all weights (use_lora = false)
    trainer_state.pt     optimizer, LR scheduler, RNG states (python, numpy if loaded, torch, cuda); with
                         several trainer processes also each rank's RNG states (rank 0 writes for all)
    trainer_state.json   step (= next batch index = policy version), seed, batch shape (readable)
    pending_batch.json   the batch for step N+1 when it was already generated (by policy N-1, as in
                         the uninterrupted run), so a resumed run trains on the very same rollouts;
    pending_batch.K.json with num_batches_ahead > 1, the batches after it that older policies sampled
    COMPLETE             written last; a directory without it is not a checkpoint

Everything is written into `.step-N.tmp`, fsynced, and renamed to `step-N`: a crash mid-save
leaves only a tmp dir (removed on the next save), never a `step-N` that looks complete.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vfrl.rollout_types import Batch, Rollout
from vfrl.rollout_types import json_default
from vfrl.run_dir import atomic_directory

if TYPE_CHECKING:
    import torch

MARKER = "COMPLETE"
PREFIX = "step-"


@dataclass
class TrainingState:
    step: int  # optimizer steps done: also the next batch's index and the version of the weights in model/
    seed: int
    examples_per_step: int
    dataset_size: int

    @classmethod
    def from_json(cls, text: str) -> TrainingState:
        """Read trainer_state.json; keys this version no longer writes (data_position, policy_version: both
        always equalled step) are ignored, so older checkpoints still load."""
        data = json.loads(text)
        return cls(**{f.name: data[f.name] for f in fields(cls)})


# ---------- finding checkpoints ----------
def is_complete(path: Path) -> bool:
    return path.is_dir() and path.name.startswith(PREFIX) and (path / MARKER).is_file()


def step_of(path: Path) -> int:
    return int(path.name.removeprefix(PREFIX))


def list_checkpoints(checkpoints_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    if not checkpoints_dir.is_dir():
        return []
    found = [p for p in checkpoints_dir.iterdir() if is_complete(p) and p.name.removeprefix(PREFIX).isdigit()]
    return sorted(found, key=step_of)


def latest_checkpoint(checkpoints_dir: Path) -> Path | None:
    found = list_checkpoints(checkpoints_dir)
    return found[-1] if found else None


# ---------- writing ----------
def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            _fsync(Path(dirpath) / name)
        _fsync(Path(dirpath))


def _fsync(path: Path) -> None:
    """Flush a file's data, or a directory's entries, to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rng_states() -> dict[str, Any]:
    import torch

    states: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if "numpy" in sys.modules:
        states["numpy"] = sys.modules["numpy"].random.get_state()
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    import torch

    random.setstate(states["python"])
    torch.set_rng_state(states["torch"])
    if "numpy" in states:
        import numpy

        numpy.random.set_state(states["numpy"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def batch_to_json(batch: Batch) -> dict[str, Any]:
    return {"step": batch.step, "policy_version": batch.policy_version, "example_ids": batch.example_ids,
            "gen_start": batch.gen_start, "gen_end": batch.gen_end, "metrics": batch.metrics,
            "group_sizes": batch.group_sizes, "warning": batch.warning,
            "rollouts": [dataclasses.asdict(r) for r in batch.rollouts]}


def batch_from_json(data: dict[str, Any]) -> Batch:
    # group_sizes and warning: absent from checkpoints written before rollouts could be dropped
    return Batch(step=data["step"], policy_version=data["policy_version"], example_ids=data["example_ids"],
                 rollouts=[Rollout.from_dict(r) for r in data["rollouts"]], gen_start=data["gen_start"],
                 gen_end=data["gen_end"], metrics=data.get("metrics", {}), group_sizes=data.get("group_sizes"),
                 warning=data.get("warning"))


def save_checkpoint(checkpoints_dir: Path, model, optimizer, scheduler, state: TrainingState,
                    pending: list[Batch] = (), keep_last: int | None = None,
                    rng_per_rank: list[dict[str, Any]] | None = None) -> Path:
    """Write checkpoint `step-{state.step}` atomically; then apply `keep_last`. Returns its path.
    `rng_per_rank`: every trainer process's rng_states(), in rank order (several processes)."""
    import torch

    checkpoints_dir.mkdir(parents=True, exist_ok=True)
    final = checkpoints_dir / f"{PREFIX}{state.step}"
    with atomic_directory(final) as tmp:
        tmp.mkdir()
        model.save_pretrained(tmp / "model")
        saved = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "rng": rng_states()}
        if rng_per_rank is not None and len(rng_per_rank) > 1:
            saved["rng_per_rank"] = rng_per_rank
        torch.save(saved, tmp / "trainer_state.pt")
        (tmp / "trainer_state.json").write_text(json.dumps(dataclasses.asdict(state), indent=1))
        for k, batch in enumerate(pending):
            name = "pending_batch.json" if k == 0 else f"pending_batch.{k}.json"
            (tmp / name).write_text(json.dumps(batch_to_json(batch), default=json_default))
        _fsync_tree(tmp)  # every file is on disk before the marker says so
        marker = tmp / MARKER
        marker.write_text(f"step {state.step}\n")
        _fsync(marker)
        _fsync(tmp)
    _fsync(checkpoints_dir)
    if keep_last:
        for old in list_checkpoints(checkpoints_dir)[:-keep_last]:
            shutil.rmtree(old)
    return final


# ---------- reading ----------
def load_model_weights(model, model_dir: Path) -> None:
    """Load what save_pretrained() wrote back into `model` (the peft model or the plain model), strictly."""
    from safetensors.torch import load_file

    adapter = model_dir / "adapter_model.safetensors"
    if adapter.exists():
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(model, load_file(adapter))
        if result.unexpected_keys:
            raise RuntimeError(f"{adapter}: keys the model does not have: {result.unexpected_keys[:5]}")
        return
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{model_dir}: no safetensors weights")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(f))
    result = model.load_state_dict(state, strict=False)
    # save_pretrained drops tied copies (lm_head tied to the embeddings); those stay tied, nothing is lost
    tied = {n for n, p in model.named_parameters(remove_duplicate=False)} - {n for n, _ in model.named_parameters()}
    missing = [k for k in result.missing_keys if k not in tied]
    if missing or result.unexpected_keys:
        raise RuntimeError(f"{model_dir}: missing {missing[:5]}, unexpected {result.unexpected_keys[:5]}")


def load_checkpoint(path: Path, model, optimizer, scheduler, rank: int = 0) -> tuple[TrainingState, list[Batch]]:
    """Restore model weights, optimizer, scheduler and RNG states in place; return the state and pending batches.
    `rank`: the trainer process restoring; it gets its own RNG states when the checkpoint has them (else rank 0's)."""
    import torch

    if not is_complete(path):
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no {MARKER} file)")
    load_model_weights(model, path / "model")
    saved = torch.load(path / "trainer_state.pt", weights_only=False)
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    per_rank = saved.get("rng_per_rank") or [saved["rng"]]
    set_rng_states(per_rank[rank] if rank < len(per_rank) else saved["rng"])
    state = TrainingState.from_json((path / "trainer_state.json").read_text())
    files = [path / "pending_batch.json"] if (path / "pending_batch.json").exists() else []
    while (more := path / f"pending_batch.{len(files)}.json").exists():
        files.append(more)
    return state, [batch_from_json(json.loads(f.read_text())) for f in files]
