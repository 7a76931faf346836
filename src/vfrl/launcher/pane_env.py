"""The environment the panes run with: the one `vf-rl` was started with.

tmux gives a new session the environment of its *server*, not of the client that asked for it. With a
tmux server already running (most tmux users have one), WANDB_MODE, WANDB_API_KEY, HF_HOME,
CUDA_VISIBLE_DEVICES or anything else exported for this run would never reach vLLM or the trainer.
So vf-rl writes its own environment into the run directory (mode 0600: it may hold tokens) and each
pane script sources it first; the plan's own variables (devices, threads, the run marker) come after
it and win. The file is deleted with the API key once the panes have read it (trainer epilogue, stop).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Mapping

from vfrl.run_dir import RunDir

# set by tmux or by the pane's own shell: copying them would lie about where the pane runs
PANE_OWN = {"TMUX", "TMUX_PANE", "PWD", "OLDPWD", "SHLVL", "_", "COLUMNS", "LINES", "VFRL_API_KEY"}


def handed_over(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables the panes get: all but the pane's own, and names bash cannot export (exported
    functions such as BASH_FUNC_x%%)."""
    return {k: v for k, v in environ.items() if k not in PANE_OWN and k.isidentifier()}


def write_environment(run_dir: Path, environ: Mapping[str, str]) -> Path:
    path = RunDir(run_dir).environment
    path.unlink(missing_ok=True)  # a resumed run's old file: O_CREAT would keep its mode
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        for key, value in sorted(handed_over(environ).items()):
            f.write(f"export {key}={shlex.quote(value)}\n")
    return path


def source_line(run_dir: Path) -> str:
    path = shlex.quote(str(RunDir(run_dir).environment))
    return f"[ -f {path} ] && . {path}  # the environment vf-rl was started with"
