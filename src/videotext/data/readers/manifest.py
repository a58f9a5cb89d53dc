"""videotext's own JSON manifest (``format: videotext-manifest``), as written by `VideoTextDataset.save`.

The manifest is the schema itself, so this reader only delegates to
`VideoTextDataset.load`; it is registered so that every source, official or ours,
is named the same way (``read_dataset("manifest", path)``). A manifest may also be
written by hand or by another tool, so its segments, speech and captions go through
the same bad-record policy (`on_bad=`) as the official formats; the report of the
read that made the manifest (``meta["bad_records"]``) is kept when this read finds
nothing new.
"""
from __future__ import annotations

from pathlib import Path

from videotext.data.readers.records import BadRecords
from videotext.data.schema import VideoTextDataset


def read_manifest(path: str | Path, *, on_bad: str = "repair") -> VideoTextDataset:
    """Load a manifest; relative media paths resolve against its folder."""
    records = BadRecords(on_bad, path)
    dataset = VideoTextDataset.load(path)
    for video in dataset:
        where = f"videos[{video.id}]"
        for name in ("segments", "speech"):
            items = [(f"{where}.{name}[{i}]", f"{where}.{name}[{i}].sentence", s.start, s.end, s.sentence)
                     for i, s in enumerate(getattr(video, name))]
            setattr(video, name, records.segments(items, path, video.id, video.duration or None))
        video.captions = records.captions([(f"{where}.captions[{i}]", c) for i, c in enumerate(video.captions)],
                                          path, video.id)
    if records.records or "bad_records" not in dataset.meta:
        dataset.meta["bad_records"] = records.report()
    return dataset
