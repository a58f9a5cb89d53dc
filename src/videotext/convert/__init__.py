"""Converters from official checkpoints to videotext runs: one module per method.

`videotext convert METHOD CHECKPOINT -o RUN_DIR` calls `videotext.convert.<METHOD>.convert`,
which must return the run directory it wrote (config.yaml + checkpoints/best). A converter
module also declares `OPTIONS` (its `--option` table, `_options.Options`: every option with
its default and where that default comes from) and `recognises(data)` (whether a loaded
checkpoint is of its method, `_checkpoint.require_method`); it reads files with
`_checkpoint.read_checkpoint` (no pickled code runs) and stores `opts.meta(architecture)`
under `conversion` in the checkpoint's meta.json, which `summary` prints back.
"""
from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from types import ModuleType
from typing import Any

from videotext.convert._options import summary_lines
from videotext.errors import VideoTextError


def available() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def converter(method: str) -> ModuleType:
    """The converter module of `method` (a user error naming the available ones if none)."""
    if method not in available():
        raise VideoTextError(f"convert: no converter for {method!r}; available: {available()}")
    return importlib.import_module(f"{__name__}.{method}")


def convert(method: str, checkpoint: str | Path, out_dir: str | Path, **options: Any) -> Path:
    """Write the run `out_dir` from the official `checkpoint` of `method`, and export its query side
    beside the weights once (`apps.index_folder.export_query_side`): every index built from the run
    links it, so no build pays for the export."""
    # torch and the methods: listing and picking converters (`--help`, `--list`) stays without them
    from videotext.apps.index_folder import export_query_side, load_run

    module = converter(method)
    module.OPTIONS.resolve(options)  # unknown / ill-typed options fail before the file is read
    run_dir = module.convert(Path(checkpoint), Path(out_dir), **options)
    export_query_side(load_run(run_dir, precision="fp32"), None)
    return run_dir


def summary(run_dir: str | Path) -> list[str]:
    """Lines describing a converted run: architecture, values read from the file, options in force, and
    where its exported query side is."""
    from videotext.train.checkpoint import load_meta  # torch: listing and picking converters stays without it

    best = Path(run_dir) / "checkpoints" / "best"
    conversion = load_meta(best).get("conversion")
    lines = summary_lines(conversion) if conversion else []
    if (best / "query_encoder").is_dir():
        lines.append(f"query encoder: exported to {best / 'query_encoder'} (every index built from this run links it)")
    return lines
