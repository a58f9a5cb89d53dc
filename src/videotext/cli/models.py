"""`videotext demo`, `caption` and `convert`: the main job, captions of new videos, official checkpoints."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from typer.core import TyperCommand

from videotext.cli.common import app, metrics_text, parse_options, user_errors
from videotext.errors import VideoTextError


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
    typer.echo(metrics_text(summary))
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
