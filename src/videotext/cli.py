"""The `videotext` command. Thin: parse arguments, call library functions, print results.

Library modules are imported inside each command so that `videotext --help` is instant
and a command only pays for what it uses.
"""
from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Callable, List, Optional

import typer

from videotext.errors import VideoTextError

app = typer.Typer(
    name="videotext",
    help="Learn joint video-text embeddings and search videos with text.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
dataset_app = typer.Typer(help="Read official dataset annotations into videotext manifests.", no_args_is_help=True)
app.add_typer(dataset_app, name="dataset")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def user_errors(command: Callable) -> Callable:
    """Turn errors a user can cause into one clear line and exit status 2 (no traceback)."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except VideoTextError as exc:
            typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
            raise typer.Exit(2) from None

    return wrapper


def split_list(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


@app.command()
@user_errors
def synth(
    out: Path = typer.Argument(..., help="Output folder (videos/ and manifest.json are written there)."),
    videos: int = typer.Option(32, "--videos", "-n", min=1, help="Number of videos."),
    seed: int = typer.Option(0, help="Random seed; the same seed gives the same dataset."),
    workers: int = typer.Option(min(2, os.cpu_count() or 1), help="Rendering processes."),
) -> None:
    """Render the procedural video-text dataset (real H.264 + AAC mp4 files and a manifest)."""
    from videotext.data.synthetic import synthesize

    dataset = synthesize(out, num_videos=videos, seed=seed, workers=workers)
    sizes = ", ".join(f"{name} {len(ids)}" for name, ids in dataset.splits.items())
    typer.echo(f"wrote {len(dataset)} videos ({sizes}) and {out / 'manifest.json'}")


@app.command()
@user_errors
def extract(
    source: Path = typer.Argument(..., help="A manifest.json or any folder of videos."),
    out: Path = typer.Option(..., "--out", "-o", help="Feature store folder (one HDF5 file per expert)."),
    experts: str = typer.Option("appearance,motion,audio", help="Comma-separated experts: appearance, motion, audio, words."),
    workers: int = typer.Option(min(2, os.cpu_count() or 1), help="Decoding processes."),
    batch_size: int = typer.Option(32, help="Frames per forward pass of the appearance network."),
    device: str = typer.Option("cpu", help="Torch device for neural experts."),
) -> None:
    """Extract per-expert [T, D] features with timestamps; resumable, skips and records broken videos."""
    from videotext.data.experts import extract_features

    summary = extract_features(
        source, split_list(experts), out, workers=workers, batch_size=batch_size, device=device
    )
    typer.echo(json.dumps(summary, indent=1, default=str))


@app.command("import-features")
@user_errors
def import_features_command(
    src: Path = typer.Argument(..., help="A folder of .npy/.npz files or one .h5 file of per-video features."),
    out: Path = typer.Option(..., "--out", "-o", help="Feature store folder."),
    expert: str = typer.Option(..., help="Expert name to store the features under."),
) -> None:
    """Import existing per-video feature files (COOT / MMT layouts) into a feature store."""
    from videotext.data.features import import_features

    summary = import_features(src, out, expert)
    typer.echo(json.dumps(summary, indent=1, default=str))


@dataset_app.command("convert")
@user_errors
def dataset_convert(
    format: str = typer.Argument(..., help="Annotation format, e.g. msrvtt, activitynet, youcook2, tuxpaint."),
    path: Path = typer.Argument(..., help="The official annotation file or folder."),
    out: Path = typer.Option(..., "--out", "-o", help="Manifest to write."),
    option: Optional[List[str]] = typer.Option(None, "--option", help="Reader option key=value (repeatable)."),
) -> None:
    """Read an official annotation format and write a videotext manifest."""
    from videotext.data.readers import read_dataset

    options = {}
    for item in option or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise VideoTextError(f"--option {item!r}: expected key=value")
        options[key] = _parse_scalar(value)
    dataset = read_dataset(format, path, **options)
    dataset.save(out)
    typer.echo(f"{dataset!r} → {out}")


@dataset_app.command("formats")
def dataset_formats() -> None:
    """List the annotation formats videotext can read."""
    from videotext.data.readers import READERS

    for name in sorted(READERS):
        typer.echo(name)


def _parse_scalar(value: str):
    """`--option` values: numbers and booleans as such, anything else as a string."""
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    app(args=argv, prog_name="videotext")


if __name__ == "__main__":  # `python -m videotext.cli`
    main(sys.argv[1:])
