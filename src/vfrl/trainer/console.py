"""The trainer's console: one progress line per step, a sample-completions table, loud warnings (rich).

The trainer's stdout is usually a pipe (`vf-train | tee logs/trainer.log`, streamed by `vf-rl`), so
everything is plain readable text when stdout is not a terminal: no colour codes, no cursor
movement, a fixed width; colours and the progress bar glyphs only on a terminal.
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from vfrl.envs.messages import last_text


def progress_line(r: dict[str, Any]) -> str:
    """`step 3/10 | reward 0.612 | loss +0.0012 | mismatch 1.2e-06 | 812 tok/s | 2.10s: gen 1.52 wait 0.31 ...`."""
    g = lambda key: r.get(key, float("nan"))  # noqa: E731  (a missing metric shows as nan, never a crash)
    return (
        f"step {r['step']}/{r['max_steps']} | reward {g('reward_mean'):.3f} | loss {g('loss'):+.4f} "
        f"| mismatch {g('mismatch_kl'):.1e} | {g('tokens_per_s'):.0f} tok/s "
        f"| {g('step_s'):.2f}s: gen {g('generate_s'):.2f} wait {g('wait_s'):.2f} train {g('train_s'):.2f} "
        f"sync {g('sync_s'):.2f}"
    )


def bar(done: int, total: int, width: int = 20) -> str:
    filled = round(width * done / max(total, 1))
    return "━" * filled + "╺" + "─" * max(width - filled - 1, 0) if filled < width else "━" * width


class OutlivesItsPipe(Console):
    """A console that goes quiet when the pipe it writes to is gone (its pane closed, `tee` killed). rich's own
    answer is SystemExit(1), which would end the run mid-step, and the emergency checkpoint with it."""

    def on_broken_pipe(self) -> None:
        self.quiet = True


class TrainerConsole:
    def __init__(self, file: IO[str] | None = None):
        file = file or sys.stdout
        terminal = file.isatty()
        # pipes get a fixed, wide layout (rich would assume 80 columns); COLUMNS still wins
        width = None if terminal or os.environ.get("COLUMNS") else 160
        self.console = OutlivesItsPipe(file=file, width=width, highlight=False, soft_wrap=not terminal,
                                       force_terminal=terminal, no_color=not terminal)
        self.terminal = terminal

    def step(self, record: dict[str, Any]) -> None:
        line = escape(progress_line(record))
        if self.terminal:
            self.console.print(f"[cyan]{bar(record['step'], record['max_steps'])}[/] {line}")
        else:
            self.console.print(line)

    def eval(self, step: int, stats: dict[str, float]) -> None:
        metrics = " | ".join(f"{k.removeprefix('eval/')} {v:.3f}" for k, v in stats.items() if k != "eval/time_s")
        self.console.print(f"[magenta]eval @ step {step}[/] | {escape(metrics)} | {stats.get('eval/time_s', 0):.1f}s")

    def completions(self, step: int, rollouts: list, limit: int) -> None:
        if limit <= 0 or not rollouts:
            return
        table = Table(title=f"step {step}: sample completions", box=box.SIMPLE_HEAD if self.terminal else box.ASCII,
                      show_lines=False, title_justify="left")
        table.add_column("prompt", overflow="fold", ratio=2)
        table.add_column("completion", overflow="fold", ratio=3)
        table.add_column("reward", justify="right", no_wrap=True)
        for r in rollouts[:limit]:
            table.add_row(escape(repr(last_text(r.prompt))), escape(repr(last_text(r.completion))), f"{r.reward:.3f}")
        self.console.print(table)

    def warn(self, message: str) -> None:
        self.console.print(f"[bold red]WARNING[/] [red]{escape(message)}[/]" if self.terminal
                           else f"!!! WARNING: {message}")

    def info(self, message: str) -> None:
        self.console.print(escape(message))
