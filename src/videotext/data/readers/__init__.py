"""Readers for the official annotation formats; each returns a `VideoTextDataset`.

One module per format, each naming its official file layout and its split protocol in
its docstring; shared parsing lives in `_common`. Use the registry::

    from videotext.data.readers import read_dataset
    msrvtt = read_dataset("msrvtt", "data/msrvtt/MSRVTT_data.json", protocol="1k-A", video_dir="data/msrvtt/videos")

Format names ignore case, ``-`` and ``_`` (``"MSR-VTT"`` = ``"msrvtt"``, ``"Charades-STA"`` = ``"charades_sta"``). Common
options: ``video_dir`` (where media live; relative `Video.path`s resolve against it),
``val_fraction`` / ``val_count`` / ``val_seed`` (where a validation split is carved
from train). `read_dataset` also takes ``split_lists={"name": "ids.txt", ...}`` to
replace or add splits from one-id-per-line files, for protocols given as lists.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable

from videotext.data.readers._common import read_id_list
from videotext.data.readers.activitynet import read_activitynet
from videotext.data.readers.cc3m import read_cc3m
from videotext.data.readers.charades_sta import read_charades_sta
from videotext.data.readers.coco import read_coco
from videotext.data.readers.crosstask import read_crosstask
from videotext.data.readers.didemo import read_didemo
from videotext.data.readers.folder import read_folder
from videotext.data.readers.howto100m import read_howto100m
from videotext.data.readers.lsmdc import read_lsmdc
from videotext.data.readers.manifest import read_manifest
from videotext.data.readers.msrvtt import read_msrvtt
from videotext.data.readers.msvd import read_msvd
from videotext.data.readers.qvhighlights import read_qvhighlights
from videotext.data.readers.tuxpaint import read_tuxpaint
from videotext.data.readers.vatex import read_vatex
from videotext.data.readers.webvid import read_webvid
from videotext.data.readers.youcook2 import read_youcook2
from videotext.data.schema import VideoTextDataset
from videotext.errors import DataFormatError

READERS: dict[str, Callable[..., VideoTextDataset]] = {
    "msrvtt": read_msrvtt,
    "activitynet": read_activitynet,
    "youcook2": read_youcook2,
    "vatex": read_vatex,
    "lsmdc": read_lsmdc,
    "msvd": read_msvd,
    "didemo": read_didemo,
    "webvid": read_webvid,
    "cc3m": read_cc3m,
    "coco": read_coco,
    "crosstask": read_crosstask,
    "charades_sta": read_charades_sta,
    "qvhighlights": read_qvhighlights,
    "howto100m": read_howto100m,
    "tuxpaint": read_tuxpaint,
    "folder": read_folder,
    "manifest": read_manifest,
}


def canonical_format(name: str) -> str:
    """``"MSR-VTT"`` → ``"msrvtt"``, ``"Charades-STA"`` → ``"charades_sta"``; unknown names raise a
    DataFormatError listing the known ones."""
    def plain(text: str) -> str:
        return text.lower().replace("-", "").replace("_", "").replace(" ", "")

    key = {plain(k): k for k in READERS}.get(plain(name))
    if key is None:
        raise DataFormatError("<format>", "format", f"unknown dataset format {name!r}; known: {', '.join(READERS)}")
    return key


def read_dataset(
    format: str, path: str | Path | None, split_lists: dict[str, str | Path] | None = None, **options: Any,
) -> VideoTextDataset:
    """Read `path` with the reader registered as `format`, passing it `options`."""
    reader = READERS[canonical_format(format)]
    accepted = [p.name for p in list(inspect.signature(reader).parameters.values())[1:]]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise DataFormatError(path or "<path>", unknown[0],
                              f"option not accepted by the {format!r} reader; it takes {accepted or 'no options'}")
    dataset = reader(path, **options)
    for split, list_path in (split_lists or {}).items():
        ids = read_id_list(list_path)
        unknown_ids = [i for i in ids if i not in dataset]
        if unknown_ids:
            raise DataFormatError(list_path, unknown_ids[0], f"{len(unknown_ids)} listed ids are not in the dataset")
        dataset.splits[split] = ids
        dataset.meta.setdefault("split_lists", {})[split] = str(list_path)
    return dataset


__all__ = ["READERS", "canonical_format", "read_dataset"] + [f.__name__ for f in READERS.values()]
