"""Finding the video files of a folder, keyed as feature stores and indexes key them, and
fingerprinting their content (an index notices a file changed in place)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from videotext.weights import sha256_of

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


def fingerprint(path: str | os.PathLike, known: dict | None = None) -> dict:
    """The content fingerprint of a media file: {"hash": sha256 of its bytes, "size",
    "mtime_ns"}. A `known` fingerprint of the same size and modification time is returned
    as is, without reading the file again (the shortcut git and rsync take: a file rewritten
    within one timestamp tick to the same size is not noticed)."""
    stat = os.stat(path)
    if known and known.get("hash") and known.get("size") == stat.st_size and known.get("mtime_ns") == stat.st_mtime_ns:
        return {"hash": known["hash"], "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    return {"hash": sha256_of(Path(path)), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
