"""VATEX (Wang et al., ICCV 2019): 10-second Kinetics clips with 10 English + 10 Chinese captions.

Official layout: ``vatex_training_v1.0.json``, ``vatex_validation_v1.0.json`` and
``vatex_public_test_english_v1.1.json``, each a list::

    [{"videoID": "Ptf_2VRj-V0_000122_000132", "enCap": [10 sentences], "chCap": [10 sentences]}, ...]

The id is ``<YouTube id>_<start>_<end>`` (whole seconds, zero-padded; YouTube ids
may themselves contain ``_``), so each video records ``youtube_id``, ``start`` and
``end`` in `meta` and its duration. English captions are `captions`; Chinese ones go
to ``meta["captions_zh"]``.

Protocols (`protocol=`):

- ``"validation-as-test"`` (default): the official validation set (its test captions
  are withheld) is split ``"test"``; a seeded ``"val"`` is carved from training.
- ``"hgr"`` (Chen et al. 2020, used by CE, CLIP4Clip): training for training, the
  official validation set halved into 1500 val / 1500 test by CE's lists
  ``val_list_split1.txt`` (→ ``"val"``) and ``val_list_split2.txt`` (→ ``"test"``),
  looked for in `splits_dir` or beside the json files.
- ``"official"``: ``"train"``, ``"validation"``, ``"public_test"`` as released.

The public test file, when present, is always split ``"public_test"``. Media:
``<videoID>.mp4`` or whatever is found under `video_dir`.
"""
from __future__ import annotations

from pathlib import Path

from videotext.data.readers._common import (
    annotation_files, build, carve, field, find_first, load_json, MediaIndex, read_id_list, read_split_files, strings,
)
from videotext.data.readers.records import BadRecords
from videotext.data.schema import Video, VideoTextDataset
from videotext.errors import DataFormatError

FILES = {
    "vatex_training_v1.0.json": "train",
    "vatex_validation_v1.0.json": "validation",
    "vatex_public_test_english_v1.1.json": "public_test",
}
HGR_LISTS = {"val": "val_list_split1.txt", "test": "val_list_split2.txt"}
PROTOCOLS = ("validation-as-test", "hgr", "official")


def read_vatex(
    path: str | Path, *, protocol: str = "validation-as-test", video_dir: str | Path | None = None,
    splits_dir: str | Path | None = None, val_fraction: float | None = 0.1, val_count: int | None = None,
    val_seed: int = 0, on_bad: str = "repair",
) -> VideoTextDataset:
    """Read VATEX from its folder (or one of its json files)."""
    records = BadRecords(on_bad, path)
    if protocol not in PROTOCOLS:
        raise DataFormatError(path, "protocol", f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    files = annotation_files(path, FILES, "VATEX")
    media = MediaIndex(video_dir)
    videos, splits = read_split_files(files, lambda split, file: _read_file(file, media, records))
    source = next(iter(files.values()))
    meta: dict = {"protocol": protocol}
    if protocol == "hgr":
        folders = [Path(splits_dir)] if splits_dir else [source.parent]
        validation = set(splits.pop("validation", []))
        for name, list_name in HGR_LISTS.items():
            list_file = find_first(folders, [list_name])
            if list_file is None:
                raise DataFormatError(folders[0], list_name, "split list for the HGR protocol not found")
            splits[name] = read_id_list(list_file)
            unknown = [i for i in splits[name] if i not in validation]
            if unknown:
                raise DataFormatError(list_file, unknown[0], f"{len(unknown)} ids are not in the validation json")
    elif protocol == "validation-as-test" and "validation" in splits:
        splits["test"] = splits.pop("validation")
    dataset = build("vatex", videos, splits, source, media, meta, records)
    if protocol == "validation-as-test" and "train" in splits:
        carve(dataset, val_fraction, val_count, val_seed)
    return dataset


def _read_file(path: Path, media: MediaIndex, records: BadRecords) -> list[Video]:
    data = load_json(path)
    if not isinstance(data, list):
        raise DataFormatError(path, None, "expected a list of {videoID, enCap, chCap} objects")
    out = []
    for i, entry in enumerate(data):
        where = f"[{i}]"
        vid = field(entry, "videoID", path, where, str)
        captions = strings(field(entry, "enCap", path, where, list), path, f"{where}.enCap")
        meta = _parse_id(vid, path, f"{where}.videoID")
        if "chCap" in entry:
            meta["captions_zh"] = strings(entry["chCap"], path, f"{where}.chCap")
        out.append(Video(
            id=vid, path=media.path(vid, f"{vid}.mp4"), duration=float(meta["end"] - meta["start"]),
            captions=records.captions([(f"{where}.enCap[{j}]", c) for j, c in enumerate(captions)], path, vid),
            meta=meta,
        ))
    return out


def _parse_id(vid: str, path: Path, key: str) -> dict:
    """``"Ptf_2VRj-V0_000122_000132"`` → youtube_id ``Ptf_2VRj-V0``, start 122, end 132."""
    parts = vid.rsplit("_", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        raise DataFormatError(path, key, f"expected <youtube id>_<start>_<end>, got {vid!r}")
    return {"youtube_id": parts[0], "start": int(parts[1]), "end": int(parts[2])}
