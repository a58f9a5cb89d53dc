"""The `videotext` command. Thin: parse arguments, call library functions, print results.

Library modules are imported inside each command so that `videotext --help` is instant
and a command only pays for what it uses.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import sys
from pathlib import Path
from typing import Callable, List, Optional

import typer
from typer.core import TyperCommand

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


def _print_version(value: bool) -> None:
    if value:
        from videotext import __version__

        typer.echo(f"videotext {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Learn joint video-text embeddings and search videos with text."""
    # each network's bf16/fp32 decision, and which weights stand in for a paper's (bundled:minilm): once each
    for name in ("videotext.precision", "videotext.weights"):
        log = logging.getLogger(name)
        if not log.handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(message)s"))
            log.addHandler(handler)
            log.setLevel(logging.INFO)


def user_errors(command: Callable) -> Callable:
    """Turn errors a user can cause into one clear line and exit status 2 (no traceback)."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except VideoTextError as exc:
            typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
            raise typer.Exit(2) from None
        except Exception as exc:  # noqa: BLE001 - only a write that found no room is turned into a line
            from videotext.io import out_of_space

            if not out_of_space(exc):
                raise
            first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
            typer.secho(f"error: no room to write ({first}). Free some space and run the command again: indexes, "
                        "features and checkpoints are replaced only once written whole, so the previous ones are "
                        "kept and the rerun resumes", fg=typer.colors.RED, err=True)
            raise typer.Exit(2) from None

    return wrapper


def precision_option(default: Optional[str]):
    """`--precision` of every inference command (videotext.runtime)."""
    where = "" if default else " (default: the run config's inference.precision, auto)"
    return typer.Option(default, "--precision", help="Inference precision: auto (bf16 where the CPU has "
                        "AVX512-BF16/AMX or the GPU supports it, else fp32), fp32 or bf16" + where + ".")


def on_bad_option():
    """`--on-bad` of the dataset commands (videotext.data.readers.records)."""
    return typer.Option(None, "--on-bad", help="Bad records (reversed, past the duration, zero-length, empty, "
                        "duplicate): repair (default), drop or error.")


def threads_option(default: Optional[int]):
    """`--threads` of extraction, indexing, eval, search and serve."""
    where = "0 = the physical cores not taken by --workers" if default is not None else "default: the run config's inference.threads, 0 = the physical cores"
    return typer.Option(default, "--threads", min=0, help=f"Torch CPU threads ({where}).")


def asr_engine_option():
    return typer.Option("whisper", "--asr-engine", help="Speech recognition where a video has no subtitles: whisper "
                                                        "(faster-whisper) or pocketsphinx (less accurate fallback).")


def asr_model_option():
    return typer.Option(None, "--asr-model", help="Whisper model: tiny.en (default) or base (packaged, sha256-checked), "
                                                  "a CTranslate2 model folder, or a name faster-whisper downloads.")


def split_list(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


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
) -> None:
    """Render the procedural video-text dataset (real H.264 + AAC mp4 files and a manifest)."""
    from videotext.data.synthetic import synthesize

    try:
        fractions = tuple(float(f) for f in split_list(splits))
    except ValueError:
        raise VideoTextError(f"--splits: expected three comma-separated numbers, got {splits!r}") from None
    dataset = synthesize(out, num_videos=videos, seed=seed, workers=workers, narration=narration,
                         split_fractions=fractions, shared_events=shared_events)
    sizes = ", ".join(f"{name} {len(ids)}" for name, ids in dataset.splits.items())
    typer.echo(f"wrote {len(dataset)} videos ({sizes}) and {out / 'manifest.json'}")


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
    from videotext.data.experts import extract_features
    from videotext.data.experts.settings import ExtractionSettings

    settings = ExtractionSettings.from_cli(
        options=parse_options(option), chunk_seconds=chunk_seconds, workers=workers, batch_size=batch_size,
        device=device, precision=precision, threads=threads, networks_in_workers=networks_in_workers,
    )
    from videotext.data.experts.from_shards import extract_from_shards, is_shard_source

    if is_shard_source(source):  # streamed one shard at a time (videotext.data.experts.from_shards)
        summary = extract_from_shards(source, split_list(experts), out, settings)
    else:
        summary = extract_features(Path(source), split_list(experts), out, settings)
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
    from videotext.data.readers import read_dataset
    from videotext.data.readers.records import report_path, summary
    from videotext.io import write_json

    dataset = read_dataset(format, path, **reader_options(option, on_bad))
    dataset.save(out)
    report = report_path(out)
    write_json(report, dataset.meta.get("bad_records"))
    typer.echo(f"{dataset!r} → {out}")
    typer.echo(f"{summary(dataset.meta.get('bad_records'))} → {report}")


@dataset_app.command("check")
@user_errors
def dataset_check(
    name: str = typer.Argument(..., help="Dataset format, e.g. activitynet, youcook2, msrvtt."),
    path: Path = typer.Argument(..., help="The official annotation file or folder, or a manifest made by convert."),
    option: Optional[List[str]] = typer.Option(None, "--option", help="Reader option key=value (repeatable)."),
    on_bad: Optional[str] = on_bad_option(),
) -> None:
    """Compare a dataset's videos and captions per split with its published counts (exit 1 when they differ)."""
    from videotext.data.readers import canonical_format, read_dataset
    from videotext.data.readers.counts import check_lines, compare, is_manifest
    from videotext.data.readers.records import examples, summary

    name = canonical_format(name)
    fmt = "manifest" if is_manifest(path) and name != "manifest" else name
    dataset = read_dataset(fmt, path, **reader_options(option, on_bad))
    if fmt == "manifest" and dataset.name != name:
        raise VideoTextError(f"{path}: the manifest holds {dataset.name!r}, not {name!r}")
    entry, rows = compare(dataset, name)
    for line in check_lines(name, entry, rows, dataset):
        typer.echo(line)
    typer.echo(summary(dataset.meta.get("bad_records")))
    for line in examples(dataset.meta.get("bad_records")):
        typer.echo(line)
    if any(not row.ok for row in rows):
        typer.echo("counts differ from the published figures")
        raise typer.Exit(1)
    if rows:
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


index_app = typer.Typer(help="Build search indexes of video collections.", no_args_is_help=True)
app.add_typer(index_app, name="index")


@app.command()
@user_errors
def train(
    config: str = typer.Argument(..., help="A run config YAML, or a packaged config by name, e.g. mmt/msrvtt_1ka (`videotext configs`)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="Override a config key: a.b=value (repeatable)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in out_dir from its last checkpoint."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Run directory (default: out_dir of the config)."),
    seeds: Optional[str] = typer.Option(None, help="Comma-separated seeds: run once per seed and report mean ± std."),
    progress: bool = typer.Option(True, help="Show progress bars."),
    report: bool = typer.Option(True, help="Write run_dir/report/index.html after the test evaluation."),
    init_from: Optional[Path] = typer.Option(None, "--init-from", help="Start from this run's best weights (model only; = train.init_from)."),
) -> None:
    """Train a method; select on validation; evaluate the test split once at the end."""
    from videotext.config import load_config
    from videotext.train.trainer import Trainer

    set_ = list(set_ or []) + ([f"train.init_from={init_from.resolve()}"] if init_from else [])
    cfg = load_config(config, list(set_ or []))
    run_dir = Path(out or cfg.out_dir)
    if not seeds:
        trainer = Trainer(cfg, run_dir, resume=resume, progress=progress)
        result = trainer.fit()
        typer.echo(_metrics_text(result))
        if report and "split" in result:
            from videotext.eval.run_report import write_run_report

            page = write_run_report(run_dir, trainer.method, trainer.data.split(result["split"]),
                                    trainer.data.read_features, split=result["split"], metrics=result,
                                    device=trainer.device)
            typer.echo(f"report: {page}")
        typer.echo(f"run: {run_dir}")
        return
    from videotext.eval.compare import SEEDS_SUMMARY
    from videotext.eval.retrieval import format_mean_std
    from videotext.train.seeds import train_seeds

    seed_list = split_list(seeds)
    summary = train_seeds(config, set_, seed_list, run_dir, resume=resume, progress=progress,
                          on_result=lambda seed, result: typer.echo(f"seed {seed}: " + _metrics_text(result)))
    for direction, metrics in summary.items():
        if not isinstance(metrics, dict) or "R1" not in metrics:
            continue
        typer.echo(direction + "  " + "  ".join(f"{k} {format_mean_std(metrics[k])}" for k in ("R1", "R5", "R10", "MdR")))
    typer.echo(f"mean ± std over {len(seed_list)} seeds: {run_dir / SEEDS_SUMMARY}")


benchmark_app = typer.Typer(help="Train and test every method on one data set, several seeds; write the table.",
                            no_args_is_help=True)
app.add_typer(benchmark_app, name="benchmark")


@benchmark_app.command("run")
@user_errors
def benchmark_run(
    name: str = typer.Argument(..., help="A packaged benchmark (synthetic) or a benchmark YAML file."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Runs folder (default runs/benchmark/NAME)."),
    results: Optional[Path] = typer.Option(None, help="Records of finished runs, small enough to commit (default results/benchmark/NAME)."),
    data_root: Path = typer.Option(Path("data"), help="Where the data sets live (the demo's: data/)."),
    rows: Optional[str] = typer.Option(None, help="Comma-separated row names (default: all, in the definition's order)."),
    seeds: Optional[str] = typer.Option(None, help="Comma-separated seeds (default: the definition's)."),
    epochs: Optional[int] = typer.Option(None, min=1, help="Every row's epoch budget (quick checks; the table shows it)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="Override a definition key, e.g. data.videos=32."),
    page: Optional[Path] = typer.Option(None, help="Markdown page rewritten after each run (default OUT/benchmark.md)."),
    progress: bool = typer.Option(False, help="Show progress bars."),
) -> None:
    """Train, select on validation and test every (row, seed) not finished yet; resumes, reuses finished runs."""
    from videotext.benchmark.definition import load_benchmark
    from videotext.benchmark.runner import run_benchmark
    from videotext.benchmark.table import write_page

    bench = load_benchmark(name, list(set_ or []))
    out, results = _benchmark_folders(bench.name, out, results)
    seed_list = [int(s) for s in split_list(seeds)] if seeds else None
    if seed_list is not None:
        bench.seeds = seed_list
    page = page or out / "benchmark.md"
    command = _benchmark_report_command(name, bench.name, out, results, page)
    result = run_benchmark(bench, out, data_root, rows=split_list(rows) if rows else None, seeds=seed_list,
                           epochs=epochs, progress=progress, results=results,
                           after_each=lambda: write_page(bench, out, page, command, results))
    write_page(bench, out, page, command, results)
    typer.echo(f"{len(result['finished'])} runs finished, {len(result['failed'])} failed; records: {results}; table: {page}")


@benchmark_app.command("report")
@user_errors
def benchmark_report(
    name: str = typer.Argument(..., help="A packaged benchmark (synthetic) or a benchmark YAML file."),
    out: Optional[Path] = typer.Option(None, "--out", help="Runs folder (default runs/benchmark/NAME)."),
    results: Optional[Path] = typer.Option(None, help="Records of finished runs (default results/benchmark/NAME)."),
    page: Path = typer.Option(Path("docs/benchmark.md"), "-o", "--page", help="Markdown page to write (a PNG plot beside it)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="Override a definition key, e.g. seeds=[0]."),
) -> None:
    """Write the benchmark page from the records of finished runs (unfinished ones are marked not run)."""
    from videotext.benchmark.definition import load_benchmark
    from videotext.benchmark.table import write_page

    bench = load_benchmark(name, list(set_ or []))
    out, results = _benchmark_folders(bench.name, out, results)
    written = write_page(bench, out, page, _benchmark_report_command(name, bench.name, out, results, page), results)
    typer.echo(f"wrote {written}")


def _benchmark_folders(bench_name: str, out: Optional[Path], results: Optional[Path]) -> tuple[Path, Path]:
    """The runs folder and the records folder, their defaults named after the benchmark."""
    return out or Path("runs/benchmark") / bench_name, results or Path("results/benchmark") / bench_name


def _benchmark_report_command(name: str, bench_name: str, out: Path, results: Path, page: Path) -> str:
    """The `videotext benchmark report` line that rewrites `page`, naming only non-default folders."""
    default_out, default_results = _benchmark_folders(bench_name, None, None)
    return (f"videotext benchmark report {name}" + (f" --out {out}" if out != default_out else "")
            + (f" --results {results}" if results != default_results else "") + f" -o {page}")


@app.command("configs")
def configs_command() -> None:
    """List the packaged configs (`videotext train NAME`), each with its one-line description."""
    from videotext.config import packaged_configs

    configs = packaged_configs()
    width = max(map(len, configs), default=0)
    for name, description in configs.items():
        typer.echo(f"{name:<{width}}  {description}")


@app.command("methods")
def methods_command() -> None:
    """List the registered methods (the `method:` of a config), one line each."""
    from videotext.models.registry import list_methods

    methods = list_methods()
    width = max(map(len, methods), default=0)
    for name, description in methods.items():
        typer.echo(f"{name:<{width}}  {description}")


def _metrics_text(result: dict) -> str:
    directions = [k for k, v in result.items() if isinstance(v, dict) and "R1" in v]
    if not directions:
        return json.dumps(result, default=str)
    lines = []
    for direction in directions:
        m = result[direction]
        lines.append(f"{direction}: R@1 {m['R1']:.1f}  R@5 {m['R5']:.1f}  R@10 {m['R10']:.1f}  "
                     f"MdR {m['MdR']:.1f}  MnR {m['MnR']:.1f}"
                     + (f"  twin acc. {m['twin_accuracy']:.1f}% ({m['twin_pairs']} pairs)" if "twin_accuracy" in m else ""))
    return "\n".join(lines)


@app.command("eval")
@user_errors
def eval_command(
    run_dir: Path = typer.Argument(..., help="A run directory made by `videotext train`."),
    split: str = typer.Option("test", help="Split to evaluate."),
    checkpoint: str = typer.Option("best", help="Checkpoint: best (selected on validation) or last."),
    report: bool = typer.Option(True, help="Write run_dir/report/index.html for this split."),
    data_config: Optional[str] = typer.Option(None, "--data", help="Zero-shot: evaluate on this config's data section (another dataset; a file or a packaged name)."),
    precision: Optional[str] = precision_option(None),
    threads: Optional[int] = threads_option(None),
    rescore: Optional[List[str]] = typer.Option(None, "--rescore", help="Also report re-scored figures, labelled, beside the plain ones: dsl (dual softmax over all test queries at once), qbnorm (QB-Norm with a querybank of the training captions). Repeatable or comma-separated."),
) -> None:
    """Evaluate a trained run on one split (the method's protocols; both directions)."""
    from videotext.eval.run_eval import evaluate_run
    from videotext.inference import load_model

    model = load_model(run_dir, checkpoint, precision=precision, threads=threads)
    if data_config is not None:  # zero-shot on another dataset
        from videotext.train.init_from import zero_shot_config

        model.config, report = zero_shot_config(model, data_config, checkpoint), False
        checkpoint = f"{checkpoint}_on_{Path(data_config).stem}"
    result, page = evaluate_run(model, split, checkpoint, report=report, rescore=rescore or ())
    typer.echo(_metrics_text(result))
    for entry in result.get("rescored", {}).values():  # never in place of the plain figures above
        typer.echo(_metrics_text({f"{d} ({label})": entry[d] for d, label in entry["labels"].items()}))
        typer.echo(f"  ({entry['uses']})")
    if page is not None:
        typer.echo(f"report: {page}")


@app.command("localize")
@user_errors
def localize_command(
    run_dir: Path = typer.Argument(..., help="A run directory made by `videotext train` (a feature-based method)."),
    split: str = typer.Option("test", help="Split whose videos' timed steps are localized."),
    checkpoint: str = typer.Option("best", help="Checkpoint: best (selected on validation) or last."),
    decoding: str = typer.Option("ordered", help="ordered (CrossTask's DP, steps in order) or argmax (per step)."),
    normalize: str = typer.Option("log_softmax", help="log_softmax over steps per second (CrossTask) or none."),
    window: float = typer.Option(1.0, help="Seconds of features around each second scored against the steps."),
    manifest: Optional[Path] = typer.Option(None, help="Evaluate on another manifest (zero-shot, e.g. CrossTask)."),
    features: Optional[Path] = typer.Option(None, help="Feature store of --manifest (default: its folder/features)."),
) -> None:
    """Action-step localization (CrossTask protocol, ToCo §5.2): average recall vs chance."""
    from videotext.eval.localization import localize
    from videotext.data.run_data import RunData
    from videotext.inference import load_model
    from videotext.io import write_json

    model = load_model(run_dir, checkpoint)
    config = model.config
    if manifest is not None:
        data_config = dataclasses.replace(config.data, manifest=str(manifest), features=str(features or ""))
        config = dataclasses.replace(config, data=data_config)
    data = RunData(config)
    if split not in data.dataset.splits:
        raise VideoTextError(f"{config.data.manifest}: no split {split!r} (have {sorted(data.dataset.splits)})")
    result, _ = localize(model.method, data.split(split), data.store, model.config.data.experts,
                         model.config.data.max_steps_per_expert, window=window, decoding=decoding,
                         normalize=normalize, device=model.device)
    name = f"localization_{split}_{checkpoint}" if manifest is None else f"localization_{manifest.stem}_{split}_{checkpoint}"
    write_json(run_dir / f"{name}.json", result)
    loc = result["localization"]
    typer.echo(f"average recall {loc['recall']:.1f}  (step recall {loc['step_recall']:.1f}; "
               f"{loc['n_steps']} steps, {loc['n_videos']} videos, {decoding} decoding)")
    typer.echo(f"chance {result['chance']['recall']:.1f}  uniform-in-order {result['uniform']['recall']:.1f}")


@app.command()
@user_errors
def compare(
    runs: List[Path] = typer.Argument(..., help="Finished run directories (test_metrics.json, seeds_summary.json or seed_N/ runs)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for comparison.json and report/index.html."),
    labels: Optional[str] = typer.Option(None, help="Comma-separated row labels (default: the run folder names)."),
    direction: str = typer.Option("t2v", help="Direction to compare (t2v, v2t, par2vid, …)."),
    metric: str = typer.Option("R1", help="Metric of the bar chart."),
    title: str = typer.Option("Run comparison", help="Report title."),
    baseline: Optional[str] = typer.Option(None, help="Row label to pair the others with, seed by seed (--seeds folders)."),
) -> None:
    """Compare finished runs: one table and one bar chart (ablations, baselines)."""
    from videotext.eval.compare import compare_runs
    from videotext.eval.retrieval import format_mean_std

    page = compare_runs(runs, out, split_list(labels) if labels else None, direction, metric, title, baseline)
    saved = json.loads((out / "comparison.json").read_text(encoding="utf-8"))
    for label, row in saved["metrics"].items():
        value = row[metric]
        typer.echo(f"{label:24s} {direction} {metric} {format_mean_std(value) if isinstance(value, dict) else f'{value:.1f}'}")
    for label, paired in saved["paired"].items():
        if paired:
            signs = ", ".join(f"{d:+.1f}" for d in paired["per_seed"].values())
            typer.echo(f"{label} − {baseline}: {format_mean_std(paired)} paired by seed ({signs})")
    typer.echo(f"report: {page}")


@index_app.command("build")
@user_errors
def index_build(
    run_dir: Path = typer.Argument(..., help="A trained run directory."),
    source: Path = typer.Argument(..., help="A folder of videos or a manifest.json."),
    out: Path = typer.Option(..., "--out", "-o", help="Index folder to write."),
    features: Optional[Path] = typer.Option(None, help="Feature store to use/extract into (default: OUT.features)."),
    update: bool = typer.Option(False, "--update", help="Update an existing index: add new videos, re-index changed ones, drop deleted ones."),
    window: Optional[float] = typer.Option(None, help="Index sliding-window clips of this many seconds instead of whole videos."),
    stride: Optional[float] = typer.Option(None, help="Seconds between window starts (default: half the window)."),
    store: str = typer.Option("faiss", help="Where the vectors live: faiss (in the index folder), milvus:PATH.db "
                                            "(Milvus Lite) or http://HOST:19530 (a Milvus server)."),
    collection: str = typer.Option("videotext", help="Milvus collection (with a Milvus store)."),
    precision: Optional[str] = precision_option(None),
    threads: Optional[int] = threads_option(None),
    speech: bool = typer.Option(False, "--speech/--no-speech", help="Also index what is said: subtitles, else speech "
                                                                    "recognition (docs/speech.md)."),
    asr_engine: str = asr_engine_option(),
    asr_model: Optional[str] = asr_model_option(),
    text: bool = typer.Option(False, "--text/--no-text", help="Also index what is written on screen: frames about "
                                                              "once a second, read where the picture changed "
                                                              "(docs/text.md)."),
    ocr_engine: str = typer.Option("rapidocr", "--ocr-engine", help="OCR engine for --text: rapidocr or tesseract."),
    lock_timeout: float = typer.Option(600.0, "--lock-timeout", min=0.0,
                                       help="Seconds to wait for another build or update of the same index to "
                                            "finish (one writer at a time)."),
) -> None:
    """Embed every video of a folder or manifest (extracting features as needed) into an index."""
    from videotext.distributed import env_rank
    from videotext.io import writer_lock

    # the whole command (vectors, lines, then published) is one writer; under torchrun rank 0 writes
    with writer_lock(out, "index build", lock_timeout) if env_rank() == 0 else contextlib.nullcontext():
        _index_build(run_dir, source, out, features, update, window, stride, store, collection, precision, threads,
                     speech, asr_engine, asr_model, text, ocr_engine)


def _index_build(run_dir: Path, source: Path, out: Path, features: Optional[Path], update: bool,
                 window: Optional[float], stride: Optional[float], store: str, collection: str,
                 precision: Optional[str], threads: Optional[int], speech: bool, asr_engine: str,
                 asr_model: Optional[str], text: bool, ocr_engine: str) -> None:
    from videotext.inference import load_model
    from videotext.search.build import features_folder

    model = load_model(run_dir, precision=precision, threads=threads)
    index = model.build_index(source, out, features_dir=features, update=update, window=window, stride=stride,
                              store=store, collection=collection, publish=False)  # published once the lines are in
    if index is None:  # a torchrun rank other than 0 on a one-writer store: rank 0 reports
        return
    what = "clips" if window else "videos"
    typer.echo(f"indexed {len(index)} {what} → {out}")
    if model.query_export_note:
        typer.echo(f"query encoder: {model.query_export_note}")
    if speech:
        from videotext.search.spoken_build import build_spoken_index

        said = build_spoken_index(index, out, features or features_folder(out, run_dir), asr_engine, asr_model)
        typer.echo(f"speech: {said['error']}; indexed by what is shown only" if "error" in said else
                   f"speech: {said['lines']} lines ({said['kept']} videos kept, {said['subtitle']} by subtitles, "
                   f"{said['asr']} recognized, "
                   f"{said['none']} without speech, {said['failed']} failed; {said['failures']})")
    if text:
        from videotext.search.spoken_build import build_written_index

        written = build_written_index(index, out, features or features_folder(out, run_dir), ocr_engine)
        typer.echo(f"on-screen text: {written['error']}; indexed without it" if "error" in written else
                   f"on-screen text: {written['lines']} lines ({written['kept']} videos kept, {written['text']} "
                   f"with text, {written['none']} without, {written['failed']} failed; {written['read']} of "
                   f"{written['samples']} sampled frames read, {written['unreadable']} unreadable; "
                   f"{written['failures']})")
    from videotext.search.live import publish

    version = publish(out)  # the last write: a running `serve` swaps this version in
    typer.echo(f"published version {version}")
    if update:
        plan = model.last_build.plan
        typer.echo(f"update: {len(plan.add) - len(plan.changed)} videos added, {len(plan.changed)} changed in place "
                   f"(encoded again), {len(plan.gone)} deleted, {len(plan.keep)} entries kept as they were")


@index_app.command("check")
@user_errors
def index_check(
    index: Path = typer.Argument(..., help="An index folder made by `videotext index build`."),
    source: Optional[Path] = typer.Argument(None, help="The folder or manifest to compare with (default: the "
                                                       "folder the index was built from)."),
) -> None:
    """Check an index against its source without changing anything: damaged files, the run behind it,
    and what `index build --update` would add, encode again and drop. Exit 0: up to date; 1: an
    update would change it, or a problem was found; 2: the folder cannot be read."""
    from videotext.search.check import check_index

    report = check_index(index, source, progress=True)
    for line in report.lines():
        typer.echo(line)
    if not report.current:
        raise typer.Exit(1)


@app.command()
@user_errors
def search(
    index: Path = typer.Argument(..., help="An index folder made by `videotext index build`."),
    query: Optional[str] = typer.Argument(None, help="Natural-language query (or --like / --like-id)."),
    k: int = typer.Option(10, "-k", min=1, max=1000, help="Number of results."),
    run_dir: Optional[Path] = typer.Option(None, "--run", help="Run whose model encodes the query (default: the index's)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    like: Optional[str] = typer.Option(None, "--like", help="Query by example: an image, a video, or a time range "
                                                            "of one as PATH@START-END (seconds)."),
    like_id: Optional[str] = typer.Option(None, "--like-id", help="Query by example: an entry of the index (left out)."),
    where: Optional[str] = typer.Option(None, "--where", help="Keep entries whose metadata pass this filter, e.g. "
                                                              "'start >= 30 and path startswith \"talks/\"' (docs/search.md)."),
    precision: Optional[str] = precision_option(None),
    threads: Optional[int] = threads_option(None),
    by: str = typer.Option("all", "--by", help="Match what is shown, said (transcripts: an index built with --speech), "
                                               "written (on screen: --text), both (shown and said), all (every one "
                                               "the index has) or a comma list, fused by --fusion (docs/search.md)."),
    fusion: str = typer.Option("standard", "--fusion", help="How rankings are fused: standard (each one's scores "
                                                            "standardised over the candidates, summed) or rrf "
                                                            "(reciprocal rank fusion)."),
) -> None:
    """Search an index with text; prints ranked videos with scores (and the matched spoken line)."""
    from videotext.search.index import Index
    from videotext.search.query_encoder import exported_searcher
    from videotext.search.runs import run_behind
    from videotext.search.fusion import check_fusion
    from videotext.search.spoken import check_by, load_lines, parse_by, search_by

    check_by(by)  # before loading anything
    check_fusion(fusion)
    loaded = Index.load(index)
    if like is not None or like_id is not None or query is None:
        return _search_like(loaded, index, query, like, like_id, k, run_dir, as_json, where, precision, threads)
    lines = load_lines(index)
    needs_model = "shown" in parse_by(by)  # text channels alone need no model
    searcher = None
    if needs_model and run_dir is None and precision is None:  # the query side the build exported: no torch
        searcher = exported_searcher(index)
    if needs_model and searcher is None:
        from videotext.inference import load_model

        searcher = load_model(run_behind(loaded, run_dir, index), precision=precision, threads=threads)
    _print_hits(search_by(searcher, loaded, lines, query, k=k, by=by, where=where, fusion=fusion), as_json)


def _print_hits(hits: list, as_json: bool) -> None:
    """Search hits as JSON or one line each (rank, score, id, span, path; the spoken or written line that matched)."""
    if as_json:
        typer.echo(json.dumps([dataclasses.asdict(h) for h in hits], indent=1))
        return
    for hit in hits:
        span = f" [{hit.start:.1f}-{hit.end:.1f}s]" if hit.start is not None and hit.end is not None else ""
        typer.echo(f"{hit.rank:3d}  {hit.score:.4f}  {hit.id}{span}  {hit.path or ''}")
        said = hit.meta.get("said")
        if said:
            typer.echo(f"       said at {said['start']:.1f}s: \"{said['text']}\"")
        written = hit.meta.get("written")
        if written:
            box = ", ".join(f"{v:.0f}" for v in written.get("box") or [])
            typer.echo(f"       written at {written['start']:.1f}s [{box}]: \"{written['text']}\"")


@app.command()
@user_errors
def serve(
    index: Path = typer.Argument(..., help="An index folder made by `videotext index build`."),
    host: str = typer.Option("127.0.0.1", help="Address to bind (loopback by default; any other needs --token)."),
    port: int = typer.Option(8000, min=1, max=65535, help="TCP port."),
    run_dir: Optional[Path] = typer.Option(None, "--run", help="Run whose model encodes queries (default: the index's)."),
    precision: Optional[str] = precision_option(None),
    threads: Optional[int] = threads_option(None),
    token: Optional[str] = typer.Option(None, envvar="VIDEOTEXT_TOKEN", show_default=False,
                                        help="Access token every request must send as 'Authorization: Bearer TOKEN'; "
                                             "required off loopback (env VIDEOTEXT_TOKEN)."),
    reload_seconds: float = typer.Option(1.0, "--reload-seconds", min=0.0,
                                         help="Seconds between looks for a newly published version of the index "
                                              "(`index build --update` publishes one); it is swapped in between "
                                              "requests. 0: serve the first version only."),
) -> None:
    """Serve the search API and web page for an index (http://HOST:PORT/)."""
    from videotext.search.service import create_app, require_token_for, serve as run_server

    require_token_for(host, token)  # before loading anything
    app = create_app(index, run_dir, precision=precision, threads=threads, token=token, reload_seconds=reload_seconds)
    typer.echo(f"serving {len(app.state.index)} entries of {index} (version {app.state.live.snapshot.version}) on "
               f"http://{host}:{port}/  (schema: /openapi.json)")
    run_server(app, host=host, port=port)


@app.command()
@user_errors
def caption(
    run_dir: Path = typer.Argument(..., help="A trained run whose method has a caption decoder (supportset)."),
    videos: List[Path] = typer.Argument(..., help="Video files or folders."),
    beam_size: int = typer.Option(3, help="Beam width (1 = greedy)."),
    checkpoint: str = typer.Option("best", help="Checkpoint: best or last."),
    features_dir: Optional[Path] = typer.Option(None, help="Feature store to use/extract into."),
    max_len: Optional[int] = typer.Option(None, help="Longest caption in tokens."),
) -> None:
    """Generate a caption for each video (Support-set's decoder)."""
    from videotext.captioning import caption_videos

    captions = caption_videos(run_dir, videos, beam_size=beam_size, checkpoint=checkpoint,
                              features_dir=features_dir, max_len=max_len)
    for path, text in captions.items():
        typer.echo(f"{path}\t{text}")


@app.command()
@user_errors
def demo(
    data: str = typer.Option("synthetic", help="synthetic (the embedded generator) or tuxpaint (real image-caption pairs)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Run directory (default runs/demo or runs/demo-tuxpaint)."),
    videos: int = typer.Option(2000, help="Synthetic videos to generate."),
    epochs: Optional[int] = typer.Option(None, help="Training epochs (default: the config's)."),
    seed: int = typer.Option(0, help="Data seed."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="Override a config key: a.b=value."),
) -> None:
    """The main job: data → features → train → test → index → example queries → HTML report."""
    from videotext.demo import run_demo

    out = out or Path("runs/demo" if data == "synthetic" else f"runs/demo-{data}")
    summary = run_demo(data=data, out=out, videos=videos, seed=seed, epochs=epochs, overrides=list(set_ or []))
    typer.echo(_metrics_text(summary))
    typer.echo(f"test split: {summary['test_videos']} videos, {summary['test_captions']} captions; "
               f"chance R@1 {summary['chance_R1']:.3f} %; text→video R@1 = {summary['t2v']['R1']:.2f} % "
               f"= {summary['t2v_R1_over_chance']:.1f}× chance")
    if "order_dependent" in summary:
        o = summary["order_dependent"]
        typer.echo(f"order-dependent captions only ({o['n_captions']}): t2v R@1 {o['t2v']['R1']:.1f} "
                   f"R@5 {o['t2v']['R5']:.1f} (mean pooling ignores event order)")
    for example in summary["examples"][:3]:
        typer.echo(f"  query: {example['query']!r} → correct video at rank {example['correct_rank']:.0f}")
    typer.echo(f"time: {summary['timings_s']}")
    typer.echo(f"report: {summary['report']}")
    typer.echo(f"search the demo videos in a browser: {summary['serve_command']}  (then open http://127.0.0.1:8000/)")


class ConvertCommand(TyperCommand):
    """`videotext convert [METHOD] --help` ends with the converters' option tables (METHOD's alone if given)."""

    def parse_args(self, ctx, args):
        ctx.meta["convert_args"] = list(args)  # --help is eager: the arguments are not parsed yet
        return super().parse_args(ctx, args)

    def format_help(self, ctx, formatter) -> None:
        super().format_help(ctx, formatter)
        from videotext.convert import available, converter

        methods = [a for a in ctx.meta.get("convert_args", []) if a in available()][:1] or available()
        formatter.write("\n" + "\n\n".join(converter(m).OPTIONS.help_text() for m in methods) + "\n")


@app.command("convert", cls=ConvertCommand)
@user_errors
def convert_command(
    method: Optional[str] = typer.Argument(None, help="Method of the official checkpoint (frozen, mmt, coot), or openclip with an architecture name."),
    checkpoint: Optional[str] = typer.Argument(None, help="The official checkpoint: a file, an http(s) URL (downloaded "
                                               "into the cache, resumable), or a released name from --list."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Run directory to write."),
    option: Optional[List[str]] = typer.Option(None, "--option", help="Converter option key=value (repeatable); "
                                               "`videotext convert METHOD --help` lists them."),
    sha256: Optional[str] = typer.Option(None, "--sha256", help="Expected sha256 of the checkpoint file (hex), "
                                         "checked before converting; a downloaded file that differs is removed."),
    list_released: bool = typer.Option(False, "--list", help="List the released official checkpoints (of METHOD, "
                                       "if given): name, URL, training data, the paper's figure."),
) -> None:
    """Convert an official checkpoint into a videotext run (evaluate it, search with it).

    A URL or a released name (--list) is downloaded once into $VIDEOTEXT_CACHE/checkpoints (default ~/.cache/videotext/checkpoints).

    Reads the file without running pickled code, then prints the architecture, the config values read and the options.
    """
    from videotext.convert import converter
    from videotext.convert._released import resolve, table_lines

    if list_released:
        typer.echo("\n".join(table_lines(method)))
        return
    if method is None or checkpoint is None or out is None:
        raise VideoTextError("convert: give METHOD CHECKPOINT -o RUN (CHECKPOINT: a file, a URL, or a name "
                             "from `videotext convert --list`)")
    options = parse_options(option)
    converter(method).OPTIONS.resolve(options)  # an unknown method or option fails before any download
    from videotext.convert import convert, summary

    path = resolve(method, checkpoint, sha256=sha256)
    run_dir = convert(method, path, out, **options)
    shown = checkpoint if str(path) == checkpoint else f"{checkpoint} ({path})"
    typer.echo(f"converted {shown} → {run_dir}")
    for line in summary(run_dir):
        typer.echo(line)


def reader_options(items: Optional[List[str]], on_bad: Optional[str]) -> dict:
    """`--option key=value` items plus `--on-bad`, as reader keyword options."""
    options = parse_options(items)
    if on_bad is not None:
        options["on_bad"] = on_bad
    return options


def parse_options(items: Optional[List[str]]) -> dict:
    """Repeated `--option key=value` → {key: value}, values typed as `--set` types them."""
    from videotext.config import parse_value

    options = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise VideoTextError(f"--option {item!r}: expected key=value")
        options[key] = parse_value(value)
    return options


def _search_like(loaded, index: Path, query: Optional[str], like: Optional[str], like_id: Optional[str], k: int,
                 run_dir: Optional[Path], as_json: bool, where: Optional[str], precision: Optional[str],
                 threads: Optional[int]) -> None:
    """`search --like PATH` / `--like-id ID`: the entries most like an example file or entry."""
    from videotext.inference import load_model
    from videotext.search.runs import run_behind

    if sum(x is not None for x in (query, like, like_id)) != 1:
        raise VideoTextError("search: give one of a text QUERY, --like PATH or --like-id ID")
    model = load_model(run_behind(loaded, run_dir, index), precision=precision, threads=threads)
    _print_hits(model.search_like(like, loaded, k=k, like_id=like_id, where=where), as_json)


@index_app.command("duplicates")
@user_errors
def index_duplicates(
    index: Path = typer.Argument(..., help="An index folder made by `videotext index build`."),
    threshold: Optional[float] = typer.Option(None, "--threshold", help="Lowest score that links two entries "
                                              "(default: the conse run's measured one, docs/search.md)."),
    neighbours: int = typer.Option(20, "--neighbours", min=1, max=1000, help="Nearest entries searched per entry (k)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Report path: OUT.json and OUT.csv "
                                                                 "(default: INDEX/duplicates.json and .csv)."),
) -> None:
    """Groups of near-duplicates (re-encodes, resizes, crops, trims, speed changes, mirror images) in an index."""
    from videotext.search.duplicates import DEFAULT_THRESHOLD, find_duplicates, report, write_report
    from videotext.search.index import Index

    loaded = Index.load(index)
    threshold = DEFAULT_THRESHOLD if threshold is None else threshold
    groups = find_duplicates(loaded, threshold, neighbours)
    json_path, csv_path = write_report(report(loaded, groups, threshold, neighbours), out or index / "duplicates.json")
    typer.echo(f"{len(groups)} groups of near-duplicates ({sum(len(g.members) for g in groups)} of {len(loaded)} "
               f"entries) at threshold {threshold:g} → {json_path}, {csv_path}")
    for number, group in enumerate(groups[:20], 1):
        scores = [s for _, _, s in group.links]
        typer.echo(f"{number:3d}  {len(group.members)} entries, scores {min(scores):.3f}-{max(scores):.3f}: "
                   f"{', '.join(group.members[:8])}{' …' if len(group.members) > 8 else ''}")


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    app(args=argv, prog_name="videotext")


if __name__ == "__main__":  # `python -m videotext.cli`
    main(sys.argv[1:])
