"""`videotext synth`, `extract`, `transcribe`, `import-features` and `dataset …`: data in, manifests and features out."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List, Optional

import typer

from videotext.cli.common import (app, dataset_app, on_bad_option, parse_options, reader_options, split_list,
                                  threads_option, precision_option, asr_engine_option, asr_model_option, user_errors)
from videotext.errors import VideoTextError


@app.command()
@user_errors
def synth(
    out: Path = typer.Argument(..., help="Output folder (videos/ and manifest.json are written there)."),
    videos: int = typer.Option(32, "--videos", "-n", min=1, help="Number of videos."),
    seed: int = typer.Option(0, help="Random seed; the same seed gives the same dataset."),
    workers: int = typer.Option(min(2, os.cpu_count() or 1), help="Rendering processes."),
    narration: bool = typer.Option(False, "--narration", help="Add a noisy narration track (speech segments) for pre-training."),
    splits: str = typer.Option("0.8,0.1,0.1", help="Train, val, test fractions; the demo uses 0.64,0.1,0.26."),
    shared_events: float = typer.Option(0.0, "--shared-events", min=0.0, max=1.0,
                                        help="Share of videos whose events recur in other videos (0 = the default data)."),
    moments: bool = typer.Option(False, "--moments", help="The long-video moment set instead: videos of "
                                 "--minutes with moment queries (docs/moments.md)."),
    long_videos: str = typer.Option("100,20,40", "--long-videos", help="With --moments: train, val, test videos."),
    minutes: str = typer.Option("1,30", "--minutes", help="With --moments: shortest and longest video, minutes."),
    queries_per_minute: float = typer.Option(2.0, "--queries-per-minute", min=0.01,
                                             help="With --moments: queries per minute of video."),
) -> None:
    """Render the procedural video-text dataset (real H.264 + AAC mp4 files and a manifest)."""
    if moments:
        from videotext.data.synthetic.moments_build import synthesize_moments

        counts, span = _numbers(long_videos, "--long-videos", 3, int), _numbers(minutes, "--minutes", 2, float)
        dataset = synthesize_moments(out, seed, videos=dict(zip(("train", "val", "test"), counts)),
                                     minutes=tuple(span), queries_per_minute=queries_per_minute, workers=workers)
        sizes = ", ".join(f"{name} {info['videos']} videos / {info['queries']} queries / {info['hours']} h"
                          for name, info in dataset.meta["sizes"].items())
        typer.echo(f"wrote {sizes}; rendering {dataset.meta['cost']['render_cpu_s']} CPU-s; {out / 'manifest.json'}")
        return
    from videotext.data.synthetic import synthesize

    try:
        fractions = tuple(float(f) for f in split_list(splits))
    except ValueError:
        raise VideoTextError(f"--splits: expected three comma-separated numbers, got {splits!r}") from None
    dataset = synthesize(out, num_videos=videos, seed=seed, workers=workers, narration=narration,
                         split_fractions=fractions, shared_events=shared_events)
    sizes = ", ".join(f"{name} {len(ids)}" for name, ids in dataset.splits.items())
    typer.echo(f"wrote {len(dataset)} videos ({sizes}) and {out / 'manifest.json'}")


def _numbers(text: str, option: str, count: int, kind: type) -> list:
    """`count` comma-separated numbers of `kind`, or one VideoTextError naming `option`."""
    try:
        values = [kind(part) for part in split_list(text)]
    except ValueError:
        values = []
    if len(values) != count:
        raise VideoTextError(f"{option}: expected {count} comma-separated {kind.__name__} values, got {text!r}")
    return values


@app.command()
@user_errors
def extract(
    source: str = typer.Argument(..., help="A manifest.json, any folder of videos, or media shards "
                                            "(`videotext dataset shard`): a brace pattern of .tar paths or URLs."),
    out: Path = typer.Option(..., "--out", "-o", help="Feature store folder (one HDF5 file per expert)."),
    experts: str = typer.Option("appearance,motion,audio", help="Comma-separated experts: appearance, motion, audio, words, clip, speech (transcribes first), ocr (reads on-screen text first)."),
    workers: int = typer.Option(min(2, os.cpu_count() or 1), help="Decoding processes."),
    batch_size: int = typer.Option(32, help="Frames per forward pass of the appearance network."),
    device: str = typer.Option("cpu", help="Torch device for neural experts."),
    option: Optional[List[str]] = typer.Option(None, "--option", help="Expert option EXPERT.KEY=VALUE (repeatable), e.g. clip.model=ViT-B-32, clip.pretrained=openai."),
    precision: str = precision_option("auto"),
    threads: int = threads_option(0),
    networks_in_workers: bool = typer.Option(
        False, "--networks-in-workers/--networks-in-main",
        help="CPU: each decoding worker also runs the networks (one thread each) instead of the main process. "
             "Appearance alone at the demo settings ran 1.25-1.55x faster this way on 2 cores (bench/extract.py); the demo uses it."),
    chunk_seconds: float = typer.Option(
        300.0, min=0.0, help="A longer video is extracted and staged this many seconds at a time (bounded memory; "
                             "a killed run resumes at its first unfinished chunk); 0 = whole videos."),
) -> None:
    """Extract per-expert [T, D] features with timestamps; resumable, skips and records broken videos."""
    from videotext.data.experts.settings import ExtractionSettings

    settings = ExtractionSettings.from_cli(
        options=parse_options(option), chunk_seconds=chunk_seconds, workers=workers, batch_size=batch_size,
        device=device, precision=precision, threads=threads, networks_in_workers=networks_in_workers,
    )
    from videotext.data.experts.from_shards import extract_source

    summary = extract_source(source, split_list(experts), out, settings)
    typer.echo(json.dumps(summary, indent=1, default=str))


@app.command()
@user_errors
def transcribe(
    source: Path = typer.Argument(..., help="A folder of videos or a manifest.json."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for transcripts.jsonl (a feature store's folder)."),
    asr_engine: str = asr_engine_option(),
    asr_model: Optional[str] = asr_model_option(),
    subtitles_only: bool = typer.Option(False, "--subtitles-only", help="Read subtitles only, recognize nothing."),
) -> None:
    """Timed transcripts of every video: subtitles (.srt/.vtt beside it, or inside it), else speech recognition;
    resumable, failures in OUT/failures.jsonl."""
    from videotext.data.experts.extract import resolve_source
    from videotext.data.speech.transcripts import transcribe as run

    items = [(item.key, item.path) for item in resolve_source(source) if item.path is not None]
    summary = run(items, out, asr_engine, asr_model, recognize=not subtitles_only)
    typer.echo(json.dumps(summary, indent=1, default=str))


@app.command("import-features")
@user_errors
def import_features_command(
    src: Path = typer.Argument(..., help="A folder of .npy/.npz files or one .h5 file of per-video features."),
    out: Path = typer.Option(..., "--out", "-o", help="Feature store folder."),
    expert: str = typer.Option(..., help="Expert name to store the features under."),
    array: Optional[str] = typer.Option(None, help="Array/dataset name in each file (ActivityNet .npz: frame_scores)."),
    strip_prefix: str = typer.Option("", help="Prefix removed from keys (e.g. v_ of ActivityNet files)."),
    step: float = typer.Option(1.0, help="Seconds between feature steps when the files store no times."),
) -> None:
    """Import existing per-video feature files (COOT video/text h5 + sentence splits, npz, MMT) into a store."""
    from videotext.data.feature_import import import_features

    summary = import_features(src, out, expert, array=array, strip_prefix=strip_prefix, step=step)
    typer.echo(json.dumps(summary, indent=1, default=str))


@dataset_app.command("convert")
@user_errors
def dataset_convert(
    format: str = typer.Argument(..., help="Annotation format, e.g. msrvtt, activitynet, youcook2, tuxpaint."),
    path: Path = typer.Argument(..., help="The official annotation file or folder."),
    out: Path = typer.Option(..., "--out", "-o", help="Manifest to write."),
    option: Optional[List[str]] = typer.Option(None, "--option", help="Reader option key=value (repeatable)."),
    on_bad: Optional[str] = on_bad_option(),
) -> None:
    """Read an official annotation format and write a videotext manifest (and its bad-record report beside it)."""
    from videotext.data.readers.convert import convert_dataset

    dataset, report, summary = convert_dataset(format, path, out, **reader_options(option, on_bad))
    typer.echo(f"{dataset!r} → {out}")
    typer.echo(f"{summary} → {report}")


@dataset_app.command("check")
@user_errors
def dataset_check(
    name: str = typer.Argument(..., help="Dataset format, e.g. activitynet, youcook2, msrvtt."),
    path: Path = typer.Argument(..., help="The official annotation file or folder, or a manifest made by convert."),
    option: Optional[List[str]] = typer.Option(None, "--option", help="Reader option key=value (repeatable)."),
    on_bad: Optional[str] = on_bad_option(),
) -> None:
    """Compare a dataset's videos and captions per split with its published counts (exit 1 when they differ)."""
    from videotext.data.readers.convert import check_dataset

    lines, matches = check_dataset(name, path, **reader_options(option, on_bad))
    for line in lines:
        typer.echo(line)
    if matches is False:
        typer.echo("counts differ from the published figures")
        raise typer.Exit(1)
    if matches:
        typer.echo("all counts match the published figures")


@dataset_app.command("shard")
@user_errors
def dataset_shard(
    manifest: Path = typer.Argument(..., help="A videotext manifest."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for the shards and shards.json."),
    target_size: str = typer.Option("512MB", "--target-size", help="Most bytes per shard, e.g. 512MB, 1GB."),
    content: str = typer.Option("media", "--content", help="media: each video's (or image's) file as stored; "
                                "features: its expert features from --features."),
    features: Optional[Path] = typer.Option(None, "--features", help="Feature store (default: MANIFEST folder/features)."),
    experts: str = typer.Option("", "--experts", help="Comma-separated experts (with --content features)."),
    splits: str = typer.Option("", "--splits", help="Comma-separated splits to write (default: every video)."),
    max_samples: int = typer.Option(0, "--max-samples", min=0, help="Most samples per shard (0: only --target-size)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Write a dataset as WebDataset shards (tar files of samples) with a shard index; resumable."""
    from videotext.data.shards import shard_dataset

    done = shard_dataset(manifest, out, target_size, content, features, [e for e in experts.split(",") if e],
                         [s for s in splits.split(",") if s] or None, max_samples, progress=progress)
    typer.echo(f"{done['samples']} samples in {len(done['shards'])} shards ({done['written']} written now, "
               f"{done['failed']} failed) → {out}; splits {done['splits']}")


@dataset_app.command("formats")
def dataset_formats() -> None:
    """List the annotation formats videotext can read."""
    from videotext.data.readers import READERS

    for name in sorted(READERS):
        typer.echo(name)
