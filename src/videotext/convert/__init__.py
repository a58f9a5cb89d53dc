"""Converters from official checkpoints to videotext runs: one module per method.

`videotext convert METHOD CHECKPOINT -o RUN_DIR` calls `videotext.convert.<METHOD>.convert`,
which must return the run directory it wrote (config.yaml + checkpoints/best).
"""
from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Any

from videotext.errors import VideoTextError


def available() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def convert(method: str, checkpoint: str | Path, out_dir: str | Path, **options: Any) -> Path:
    if method not in available():
        raise VideoTextError(f"convert: no converter for {method!r}; available: {available()}")
    module = importlib.import_module(f"{__name__}.{method}")
    return module.convert(Path(checkpoint), Path(out_dir), **options)
