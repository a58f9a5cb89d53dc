"""HowTo100M (Miech et al., ICCV 2019): 1.2M instructional videos with ASR narration.

Official layout: ``caption.json`` (also distributed as ``raw_caption.json``)::

    {"<youtube id>": {"start": [0.0, 4.2, ...], "end": [4.2, 9.8, ...], "text": ["...", "..."]}, ...}

Each narration line becomes a `Segment` in ``video.speech``; there are no captions —
for pre-training (MIL-NCE, Support-set, VideoCLIP) the narration *is* the text. One
split, ``"train"``: HowTo100M is a pre-training set; its users evaluate on other
datasets. Media: ``<id>.mp4`` (or any extension found under `video_dir`).
"""
from __future__ import annotations

from pathlib import Path

from videotext.data.readers._common import MediaIndex, build, field, load_json, number
from videotext.data.readers.records import BadRecords
from videotext.data.schema import Video, VideoTextDataset
from videotext.errors import DataFormatError

FILES = ("caption.json", "raw_caption.json")


def read_howto100m(path: str | Path, *, video_dir: str | Path | None = None, on_bad: str = "repair") -> VideoTextDataset:
    """Read HowTo100M narrations from ``caption.json`` (or the folder holding it)."""
    records = BadRecords(on_bad, path)
    path = Path(path)
    if path.is_dir():
        file = next((path / n for n in FILES if (path / n).is_file()), path / FILES[0])
    else:
        file = path
    data = load_json(file)
    if not isinstance(data, dict):
        raise DataFormatError(file, None, "expected an object of video id → {start, end, text}")
    media = MediaIndex(video_dir)
    videos = [_video(file, vid, entry, media, records) for vid, entry in data.items()]
    return build("howto100m", videos, {"train": list(data)}, file, media, records=records)


def _video(file: Path, vid: str, entry: object, media: MediaIndex, records: BadRecords) -> Video:
    starts = field(entry, "start", file, vid, list)
    ends = field(entry, "end", file, vid, list)
    texts = field(entry, "text", file, vid, list)
    if not len(starts) == len(ends) == len(texts):
        raise DataFormatError(file, f"{vid}.text", f"{len(starts)} starts, {len(ends)} ends, {len(texts)} texts")
    items = [
        (f"{vid}.end[{i}]", f"{vid}.text[{i}]", number(start, file, f"{vid}.start[{i}]"),
         number(end, file, f"{vid}.end[{i}]"), str(text))
        for i, (start, end, text) in enumerate(zip(starts, ends, texts))
    ]
    return Video(id=vid, path=media.path(vid, f"{vid}.mp4"), speech=records.segments(items, file, vid))
