"""vf-train's console script: holds Ctrl-C and SIGTERM before anything else is imported (stop_signals.py)."""

from vfrl import stop_signals


def main() -> None:
    stop_signals.hold()
    from vfrl.trainer.cli import main as train_main  # typer, torch, transformers, the trainer: seconds

    train_main()
