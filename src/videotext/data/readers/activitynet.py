"""ActivityNet Captions (Krishna et al., ICCV 2017): dense event descriptions of ~20k videos.

Official layout: ``train.json``, ``val_1.json``, ``val_2.json``, each::

    {"v_QOlSCBRmfWY": {"duration": 82.73,
                       "timestamps": [[0.83, 19.86], [17.37, 60.81], ...],
                       "sentences": ["A young woman ...", " The girl ...", ...]}, ...}

Each event becomes a `Segment`; the paragraph is the sentences in time order (the
paragraph → video protocol). `captions` stay empty: the text lives in the segments.

Protocols (`protocol=`):

- ``"paragraph"`` (default; HSE, COOT, MMT, CE): ``val_1`` is the test set → split
  ``"test"``; a seeded ``"val"`` is carved from ``train`` (`val_fraction`, `val_count`,
  `val_seed`) so that model selection never sees test.
- ``"official"``: splits ``"train"``, ``"val_1"``, ``"val_2"`` as released, no carving.
- ``"moments"`` (moment retrieval: 2D-TAN, Moment-DETR's successors): ``train``, ``val_1`` as
  ``"val"`` and ``val_2`` as ``"test"``; every timed sentence is a moment query
  (`videotext.data.schema.video_moments`). With a `video_dir`, a video without a media file
  is dropped and reported (``missing_video``): its queries could not be answered.

``val_1`` and ``val_2`` annotate the *same* videos with different sentences; ``val_2``
videos therefore get ids ``"<id>#val_2"`` with ``feature_key`` = the plain id, so both
share one set of extracted features. Media: ``v_xxx.mp4`` (or any extension found
under `video_dir`).

Bad records (`on_bad=`, see `videotext.data.readers.records`): the released
``train.json`` holds 2 reversed segments, 2 of zero length and 261 that end after the
video's ``duration`` (by at most 0.01 s); ``val_1.json`` 134 and ``val_2.json`` 111
of the last kind. The default ``"repair"`` swaps, clips to the duration, and drops
the zero-length ones.
"""
from __future__ import annotations

from pathlib import Path

from videotext.data.readers._common import (
    annotation_files, build, carve, field, load_json, MediaIndex, number, read_split_files, span, strings,
)
from videotext.data.readers.records import BadRecords
from videotext.data.schema import Video, VideoTextDataset
from videotext.errors import DataFormatError

FILES = {"train.json": "train", "val_1.json": "val_1", "val_2.json": "val_2"}
SECOND_ANNOTATION = "val_2"
PROTOCOLS = ("paragraph", "official", "moments")
MOMENT_SPLITS = {"val_1": "val", "val_2": "test"}  # 2D-TAN's split of the moment-retrieval papers


def read_activitynet(
    path: str | Path, *, protocol: str = "paragraph", video_dir: str | Path | None = None,
    val_fraction: float | None = 0.1, val_count: int | None = None, val_seed: int = 0, on_bad: str = "repair",
) -> VideoTextDataset:
    """Read ActivityNet Captions from its folder (or one of its json files)."""
    if protocol not in PROTOCOLS:
        raise DataFormatError(path, "protocol", f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    records = BadRecords(on_bad, path)
    files = annotation_files(path, FILES, "ActivityNet Captions")
    media = MediaIndex(video_dir)

    def read_one(split: str, file: Path) -> list[Video]:
        suffix = f"#{SECOND_ANNOTATION}" if split == SECOND_ANNOTATION and len(files) > 1 else ""
        return _read_file(file, media, suffix, records, check_media=protocol == "moments")

    videos, splits = read_split_files(files, read_one)
    if protocol == "paragraph" and "val_1" in splits:
        splits["test"] = splits.pop("val_1")
    if protocol == "moments":
        splits = {MOMENT_SPLITS.get(name, name): ids for name, ids in splits.items()}
    dataset = build("activitynet", videos, splits, next(iter(files.values())), media, {"protocol": protocol},
                    records)
    if protocol == "paragraph" and "train" in splits:
        carve(dataset, val_fraction, val_count, val_seed)
    return dataset


def _read_file(path: Path, media: MediaIndex, suffix: str, records: BadRecords, check_media: bool = False) -> list[Video]:
    data = load_json(path)
    if not isinstance(data, dict):
        raise DataFormatError(path, None, "expected an object of video id → annotation")
    out = []
    for vid, entry in data.items():
        timestamps = field(entry, "timestamps", path, vid, list)
        sentences = strings(field(entry, "sentences", path, vid, list), path, f"{vid}.sentences")
        if len(timestamps) != len(sentences):
            raise DataFormatError(
                path, f"{vid}.timestamps", f"{len(timestamps)} timestamps but {len(sentences)} sentences"
            )
        duration = number(field(entry, "duration", path, vid), path, f"{vid}.duration")
        if check_media and not media.found(vid, f"{vid}.mp4"):
            records.missing_video(path, vid, vid + suffix, f"no media file under {media.root}")
            continue
        items = [
            (f"{vid}.timestamps[{i}]", f"{vid}.sentences[{i}]", *span(ts, path, f"{vid}.timestamps[{i}]"), sentence)
            for i, (ts, sentence) in enumerate(zip(timestamps, sentences))
        ]
        out.append(Video(
            id=vid + suffix, path=media.path(vid, f"{vid}.mp4"), duration=duration,
            segments=records.segments(items, path, vid + suffix, duration), feature_key=vid if suffix else None,
        ))
    return out
