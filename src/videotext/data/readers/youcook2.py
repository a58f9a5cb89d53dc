"""YouCook2 (Zhou et al., AAAI 2018): cooking videos with timed, described procedure steps.

Official layout: ``youcookii_annotations_trainval.json``::

    {"database": {"GLd3aX16zBg": {"duration": 241.62, "subset": "training"|"validation",
                                  "recipe_type": "113", "video_url": ...,
                                  "annotations": [{"id": 0, "segment": [90, 102],
                                                   "sentence": "spread margarine on ..."}, ...]}}}

Each step becomes a `Segment` (clip ↔ sentence retrieval); the paragraph is the steps
in time order. The test subset's annotations are withheld, so papers (HowTo100M, MMT,
COOT, Support-set) *test on the public ``validation`` subset*: it becomes split
``"test"``, and a seeded ``"val"`` is carved from ``training`` (`val_fraction`,
`val_count`, `val_seed`) for model selection. ``protocol="official"`` keeps
``"train"`` / ``"validation"`` as released. Videos of other subsets (``testing`` in
``youcookii_annotations_test_segments_only.json``, which has no sentences) are
skipped and counted in ``meta["skipped"]``. Media: ``<id>.mp4`` or whatever is found
under `video_dir` (the official ``raw_videos/<subset>/<recipe>/<id>.<ext>`` tree works).
"""
from __future__ import annotations

from pathlib import Path

from videotext.data.readers._common import MediaIndex, build, carve, field, load_json, number, span
from videotext.data.readers.records import BadRecords
from videotext.data.schema import Video, VideoTextDataset
from videotext.errors import DataFormatError

FILE = "youcookii_annotations_trainval.json"
SUBSETS = {"training": "train", "validation": "validation"}


def read_youcook2(
    path: str | Path, *, protocol: str = "validation-as-test", video_dir: str | Path | None = None,
    val_fraction: float | None = 0.1, val_count: int | None = None, val_seed: int = 0, on_bad: str = "repair",
) -> VideoTextDataset:
    """Read YouCook2 from ``youcookii_annotations_trainval.json`` (or the folder holding it)."""
    if protocol not in ("validation-as-test", "official"):
        raise DataFormatError(path, "protocol", f"unknown protocol {protocol!r}; known: validation-as-test, official")
    records = BadRecords(on_bad, path)
    path = Path(path)
    file = path / FILE if path.is_dir() else path
    database = field(load_json(file), "database", file, "", dict)
    media = MediaIndex(video_dir)
    videos, splits, skipped = [], {name: [] for name in SUBSETS.values()}, 0
    for vid, entry in database.items():
        subset = field(entry, "subset", file, f"database.{vid}", str)
        if subset not in SUBSETS:
            skipped += 1
            continue
        videos.append(_video(file, vid, entry, media, records))
        splits[SUBSETS[subset]].append(vid)
    if protocol == "validation-as-test":
        splits["test"] = splits.pop("validation")
    dataset = build("youcook2", videos, splits, file, media, {"protocol": protocol, "skipped": skipped},
                    records)
    if protocol == "validation-as-test":
        carve(dataset, val_fraction, val_count, val_seed)
    return dataset


def _video(file: Path, vid: str, entry: dict, media: MediaIndex, records: BadRecords) -> Video:
    where = f"database.{vid}"
    duration = number(field(entry, "duration", file, where), file, f"{where}.duration")
    items = []
    for i, step in enumerate(field(entry, "annotations", file, where, list)):
        key = f"{where}.annotations[{i}]"
        start, end = span(field(step, "segment", file, key), file, f"{key}.segment")
        items.append((f"{key}.segment", f"{key}.sentence", start, end, field(step, "sentence", file, key, str)))
    return Video(
        id=vid, path=media.path(vid, f"{vid}.mp4"), duration=duration,
        segments=records.segments(items, file, vid, duration), meta={"recipe_type": str(entry.get("recipe_type", ""))},
    )
