"""The `videotext` command. Thin: each command parses its arguments, calls one library function and
prints the result; the commands are grouped one file each (`common` holds what they share):

- `data`: synth, extract, transcribe, import-features, dataset convert|check|shard|formats
- `runs`: train, eval, localize, compare, benchmark run|report, check, configs, methods, push
- `search`: index build|check|duplicates, search, serve
- `models`: demo, caption, convert

Library modules are imported inside each command, so that `videotext --help` is instant and a
command only pays for what it uses (a cold `videotext search` loads no torch).
"""
from __future__ import annotations

import logging
import sys

from videotext import __version__

import typer

from videotext.cli import data, runs, search, models  # noqa: F401, I001 - each registers its commands on `app`, in the order `--help` lists them
from videotext.cli.common import app, parse_options

__all__ = ["app", "main", "parse_options"]


def _print_version(value: bool) -> None:
    if value:
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


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    app(args=argv, prog_name="videotext")



if __name__ == "__main__":  # `python -m videotext.cli`
    main(sys.argv[1:])
