"""What every group of the `videotext` command shares: the app and its sub-commands, the one rule
that turns a user's error into one line (exit 2), the options several commands take, and the
printing of metrics and hits.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from typing import Callable, List, Optional

import typer

from videotext.config import parse_value
from videotext.errors import VideoTextError
from videotext.io import out_of_space

app = typer.Typer(
    name="videotext",
    help="Learn joint video-text embeddings and search videos with text.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
dataset_app = typer.Typer(help="Read official dataset annotations into videotext manifests.", no_args_is_help=True)
index_app = typer.Typer(help="Build search indexes of video collections.", no_args_is_help=True)
benchmark_app = typer.Typer(help="Train and test every method on one data set, several seeds; write the table.",
                            no_args_is_help=True)
app.add_typer(dataset_app, name="dataset")
app.add_typer(index_app, name="index")
app.add_typer(benchmark_app, name="benchmark")


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


def reader_options(items: Optional[List[str]], on_bad: Optional[str]) -> dict:
    """`--option key=value` items plus `--on-bad`, as reader keyword options."""
    options = parse_options(items)
    if on_bad is not None:
        options["on_bad"] = on_bad
    return options


def parse_options(items: Optional[List[str]]) -> dict:
    """Repeated `--option key=value` → {key: value}, values typed as `--set` types them."""
    options = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise VideoTextError(f"--option {item!r}: expected key=value")
        options[key] = parse_value(value)
    return options


MOMENT_COLUMNS = ("R1@0.5", "R1@0.7", "R5@0.5", "mIoU", "mAP")  # the moment tables' columns


def metrics_text(result: dict) -> str:
    directions = [k for k, v in result.items() if isinstance(v, dict) and "R1" in v]
    if isinstance(result.get("moments"), dict):  # a moment method: spans of a video (videotext.eval.moment_eval)
        lines = ["moments: " + "  ".join(f"{k} {result['moments'][k]:.1f}" for k in MOMENT_COLUMNS)]
        if isinstance(result.get("highlight"), dict):
            lines.append(f"highlight ({result.get('highlight_truth', '')}): HIT@1 {result['highlight']['HIT@1']:.1f}  "
                         f"mAP {result['highlight']['mAP']:.1f}")
        return "\n".join(lines + [f"({result.get('n_queries', '?')} queries, {result.get('n_videos', '?')} videos)"])
    if not directions:
        return json.dumps(result, default=str)
    lines = []
    for direction in directions:
        m = result[direction]
        lines.append(f"{direction}: R@1 {m['R1']:.1f}  R@5 {m['R5']:.1f}  R@10 {m['R10']:.1f}  "
                     f"MdR {m['MdR']:.1f}  MnR {m['MnR']:.1f}"
                     + (f"  twin acc. {m['twin_accuracy']:.1f}% ({m['twin_pairs']} pairs)" if "twin_accuracy" in m else ""))
    return "\n".join(lines)


def print_hits(hits: list, as_json: bool) -> None:
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


def print_report(lines: list[str], errors: list) -> None:
    """A check's report on stdout and each error as one red `error:` line on stderr; exit 2 when
    there is an error (`videotext check`, `index check`)."""
    for line in lines:
        typer.echo(line)
    for problem in errors:
        typer.secho(f"error: {problem}", fg=typer.colors.RED, err=True)
    if errors:
        raise typer.Exit(2)
