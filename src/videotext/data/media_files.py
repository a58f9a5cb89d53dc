"""Finding the video files of a folder, keyed as feature stores and indexes key them."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

VIDEO_EXTENSIONS = (".mp4", ".avi", ".mkv", ".webm", ".mov", ".m4v", ".mpg", ".mpeg", ".ogv", ".flv", ".wmv")


def find_videos(folder: str | os.PathLike, extensions: Sequence[str] = VIDEO_EXTENSIONS) -> dict[str, Path]:
    """Video files under `folder` (recursively), keyed by relative path without extension."""
    root = Path(folder)
    found: dict[str, Path] = {}
    wanted = {e.lower() for e in extensions}
    for path in sorted(root.rglob("*")):
        if path.suffix.lower() in wanted and path.is_file() and not path.name.startswith("."):
            key = path.relative_to(root).with_suffix("").as_posix()
            found.setdefault(key, path)
    return found
