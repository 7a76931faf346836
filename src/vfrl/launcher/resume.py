"""`vf-rl @ cfg --resume [STEP|PATH]`: find the checkpoint and reuse its run directory.

    --resume             the newest checkpoint of the newest run dir of this run_name that has one
    --resume 40          checkpoints/step-40 of that run dir
    --resume PATH        a checkpoint dir (…/checkpoints/step-N) or a run dir (its newest checkpoint)
"""

from __future__ import annotations

import time
from pathlib import Path

from vfrl.run_dir import RunDir


class ResumeError(ValueError):
    pass


def run_dirs(base: Path) -> list[Path]:
    """outputs/name, outputs/name-2, -3, ... that exist, oldest first (the order new_run_dir makes them)."""
    found = [base] if base.is_dir() else []
    if base.parent.is_dir():
        numbered = [p for p in base.parent.glob(f"{base.name}-*") if p.name.removeprefix(f"{base.name}-").isdigit()]
        found += sorted(numbered, key=lambda p: int(p.name.rsplit("-", 1)[1]))
    return found


def find_checkpoint(base: Path, resume: str) -> tuple[Path, Path]:
    """(run dir, checkpoint dir) for `--resume` value `resume` ("latest", a step number or a path)."""
    # imported here: vf-rl's main() loads this module, and trainer.checkpoint pulls in openai (slow --help)
    from vfrl.learner.checkpoint import PREFIX, is_complete, latest_checkpoint

    if resume != "latest" and not resume.isdigit():
        path = Path(resume).expanduser().resolve()
        if is_complete(path):
            return path.parent.parent, path
        if (ckpt := latest_checkpoint(RunDir(path).checkpoints)) is not None:
            return path, ckpt
        raise ResumeError(f"--resume {resume}: not a complete checkpoint (a checkpoints/step-N dir with a "
                          f"COMPLETE file) nor a run dir that has one")
    with_ckpts = [d for d in run_dirs(base) if latest_checkpoint(RunDir(d).checkpoints) is not None]
    if not with_ckpts:
        raise ResumeError(f"--resume: no run directory {base}[-N] has a complete checkpoint; "
                          f"set save_strategy = \"steps\" and save_steps in [trainer.args] for the next run")
    run_dir = with_ckpts[-1]
    checkpoints = RunDir(run_dir).checkpoints
    if resume == "latest":
        return run_dir, latest_checkpoint(checkpoints)
    ckpt = checkpoints / f"{PREFIX}{int(resume)}"
    if not is_complete(ckpt):
        have = ", ".join(p.name for p in sorted(checkpoints.glob(f"{PREFIX}*")) if is_complete(p))
        raise ResumeError(f"--resume {resume}: {run_dir} has no complete checkpoint step-{int(resume)} "
                          f"(it has: {have})")
    return run_dir, ckpt


def prepare_run_dir(run_dir: Path) -> None:
    """Make an old run dir ready to run again: keep its config, forget its panes' exit codes and pids (the old
    vf-vllm's pid names a dead process: the trainer, reading it before the new vf-vllm rewrites it or when the
    resumed run has no vf-vllm (inference.base_url), would take the server for lost)."""
    paths = RunDir(run_dir)
    if paths.config.exists():
        paths.config.rename(paths.config_before_resume(time.strftime('%Y%m%d-%H%M%S')))
    for role in ("trainer", "inference"):
        paths.exit_code(role).unlink(missing_ok=True)
    for pid_file in (paths.inference_pid, paths.trainer_pid):
        pid_file.unlink(missing_ok=True)


def with_resume_default(argv: list[str]) -> list[str]:
    """`--resume` given without a value means "latest" (click would take the next option as its value)."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--resume" and (i + 1 == len(out) or out[i + 1].startswith("-")):
            out.insert(i + 1, "latest")
            break
    return out
