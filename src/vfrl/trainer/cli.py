"""vf-train: the trainer process. Reads the resolved run config and trains against the vLLM server."""

from __future__ import annotations

import os
import traceback
from pathlib import Path
from typing import Annotated

import typer

from vfrl.inference.server import API_KEY_ENV

app = typer.Typer(add_completion=False, help=__doc__)


@app.command()
def train(
    at: Annotated[str, typer.Argument(metavar="@", help="Literal '@' followed by the resolved config file.")],
    config_path: Annotated[Path, typer.Argument(metavar="CONFIG", exists=True, dir_okay=False)],
    base_url: Annotated[str | None, typer.Option(help="vLLM base URL; default from [inference] host/port.")] = None,
) -> None:
    """Train the run described by CONFIG (as written by vf-rl into the run directory)."""
    if at != "@":
        raise typer.BadParameter("usage: vf-train @ CONFIG")
    from transformers.utils import logging as hf_logging

    from vfrl.config import load_config
    from vfrl.environments.loader import EnvironmentLoadError
    from vfrl.trainer.step_faults import RolloutFaultError
    from vfrl.trainer.trainer import RLTrainer

    hf_logging.disable_progress_bar()  # save_pretrained's "Writing model shards" bar, every sync and checkpoint

    cfg = load_config(config_path)
    run_dir = config_path.resolve().parent
    host = "127.0.0.1" if cfg.inference.host in ("0.0.0.0", "::") else cfg.inference.host
    url = base_url or f"http://{host}:{cfg.inference.port}/v1"
    try:
        RLTrainer(cfg, run_dir, url, os.environ.get(API_KEY_ENV, "EMPTY")).train()
    except (EnvironmentLoadError, RolloutFaultError) as e:
        # one line in the pane; the traceback only in the log that vf-rl tees this output to (launcher/plan.py)
        log = run_dir / "logs" / "trainer.log"
        if log.exists():
            with open(log, "a") as f:
                traceback.print_exception(e, file=f)
        typer.secho(f"vf-train: error: {e}", err=True, fg=typer.colors.RED)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:  # Ctrl-C in the pane or `vf-rl stop`: adapters are written atomically, so whole
        print("vf-train: interrupted; the adapters in the run directory are complete", flush=True)
        raise typer.Exit(130)


def main() -> None:
    app()
