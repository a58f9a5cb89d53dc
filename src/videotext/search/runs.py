"""The run behind an index: the trained run whose model encodes queries against it.

`videotext index build` records the run in `index.meta["run_dir"]`; `videotext search`,
`videotext serve` and `search.service.create_app` take `--run` / `run_dir` to override it.
This module only reads the index's metadata; loading the run's model is the caller's
(`videotext.inference.load_model(run_behind(index, run_dir))`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from videotext.errors import VideoTextError


def run_behind(index: Any, run_dir: str | Path | None = None, where: str | Path | None = None) -> Path:
    """`run_dir` when given, else the run that built `index` (its `meta["run_dir"]`).

    Raises VideoTextError when neither names a run; `where` (e.g. the index folder) starts
    the message."""
    run = run_dir or index.meta.get("run_dir")
    if not run:
        prefix = f"{where}: " if where is not None else ""
        raise VideoTextError(f"{prefix}the index does not name the run that built it; pass --run RUN_DIR")
    return Path(run)
