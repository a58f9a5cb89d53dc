"""Any folder of videos (``.mp4``, ``.avi``, ``.mkv``, ``.webm``, ``.mov``, …): the user's own collection.

There is no annotation file: every video file under the folder (recursively) becomes a
video with no text, id = its path relative to the folder without extension (with the
extension when two files share a stem), and the dataset has one split, ``"all"`` —
what `videotext index` needs to make a folder searchable by text.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from videotext.data.readers._common import VIDEO_EXTENSIONS, MediaIndex, build, existing_dir
from videotext.data.readers.records import BadRecords
from videotext.data.schema import Video, VideoTextDataset


def read_folder(path: str | Path, *, on_bad: str = "repair") -> VideoTextDataset:
    """Index a folder of video files: one caption-less video per file, split ``"all"``.

    A folder has no text, so no record can be bad; `on_bad` is accepted (and checked)
    so that every reader takes the same option.
    """
    records = BadRecords(on_bad, path)
    root = existing_dir(path, "video folder").resolve()
    files = sorted(f.relative_to(root) for f in root.rglob("*") if f.suffix.lower() in VIDEO_EXTENSIONS and f.is_file())
    stems = Counter(f.with_suffix("").as_posix() for f in files)
    videos = []
    for rel in files:
        stem = rel.with_suffix("").as_posix()
        videos.append(Video(id=stem if stems[stem] == 1 else rel.as_posix(), path=rel.as_posix()))
    return build(root.name or "folder", videos, {"all": [v.id for v in videos]}, root, MediaIndex(root, scan=False),
                 records=records)
