"""The steps of building an index that need no model: reading the source, the update plan,
where features and rank parts go, and the entries of encoded videos.

`LoadedModel.build_index` runs: `read_source` → `plan_index` (what to add, remove, keep) →
features (extracted where missing) → windows (`search.windows`) → encode → `index_entries`
+ vectors → save. The plan is decided from the folder and the index's entries alone, before
anything is decoded.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from videotext.data.readers import read_dataset
from videotext.data.schema import VideoTextDataset
from videotext.errors import VideoTextError
from videotext.search.index import Entry, Index
from videotext.search.milvus import MilvusIndex, is_milvus_uri


@dataclass(frozen=True)
class IndexPlan:
    """What a build or an update does to an index."""

    add: list[str]  # video ids of the source to encode and add, in source order
    remove: list[str]  # entry ids whose video is no longer in the source (deleted files)
    keep: list[str]  # entry ids left as they are (their video is still there)


def read_source(source: str | os.PathLike | VideoTextDataset) -> VideoTextDataset:
    """The videos to index: a dataset as is, a manifest (`.json`) or a folder of videos."""
    if isinstance(source, VideoTextDataset):
        return source
    source = Path(source)
    return read_dataset("manifest" if source.suffix == ".json" else "folder", source)


def plan_index(dataset: VideoTextDataset, entries: Sequence[Entry] = ()) -> IndexPlan:
    """The update diff of `dataset` against an index's `entries` (none: a fresh build adds
    every video): entries of videos gone from the source are removed, videos with no entry
    left are added, the rest is kept (a video counts as indexed when any of its clips is)."""
    wanted = {v.id for v in dataset}
    remove = [e.id for e in entries if e.video_id not in wanted]
    keep = [e.id for e in entries if e.video_id in wanted]
    indexed = {e.video_id for e in entries if e.video_id in wanted}
    return IndexPlan(add=[v.id for v in dataset if v.id not in indexed], remove=remove, keep=keep)


def new_index(dim: int, model: str, store: str = "faiss", collection: str = "videotext") -> Any:
    """An empty index for vectors of `dim`: FAISS in the index folder (`store="faiss"`), or a
    Milvus collection (`milvus:PATH.db` for Milvus Lite, `http(s)://HOST:PORT` for a server)."""
    if store == "faiss":
        return Index(dim=dim, model=model)
    if is_milvus_uri(store):
        return MilvusIndex(store, dim, model=model, collection=collection)
    raise VideoTextError(f"--store {store!r}: expected faiss, milvus:PATH.db or http(s)://HOST:PORT")


def features_folder(out: str | os.PathLike | None, run_dir: Path) -> Path:
    """Default feature store of an index: `<out>.features` (`<run>/index.features` without `out`)."""
    base = Path(out) if out is not None else run_dir / "index"
    return base.with_name(base.name + ".features")


def parts_folder(out: str | os.PathLike | None, features_dir: str | os.PathLike) -> Path:
    """Where torchrun ranks leave their embeddings for rank 0: `<out>.parts` (or inside the store)."""
    return Path(out).with_name(Path(out).name + ".parts") if out is not None else Path(features_dir) / ".index-parts"


def index_entries(dataset: VideoTextDataset) -> list[Entry]:
    """One entry per video or clip of `dataset`, in order: absolute media path, clip times
    (a whole video spans [0, duration]), the video it belongs to, its first caption, and the
    metadata filters use where the dataset knows them (`videotext.search.filters`): the
    video's duration, the dataset's name, the split holding the video, and `tags` from the
    manifest (a video's `meta["tags"]`)."""
    split_of = {video_id: split for split, ids in dataset.splits.items() for video_id in ids}
    entries = []
    for v in dataset:
        video_id = v.meta.get("video_id", v.id)
        meta = {"captions": v.captions[:1], "duration": v.meta.get("video_duration", v.duration),
                "dataset": dataset.name or None, "split": split_of.get(video_id, split_of.get(v.id)),
                "tags": list(v.meta["tags"]) if isinstance(v.meta.get("tags"), (list, tuple)) else None}
        entries.append(Entry(id=v.id, path=os.path.abspath(dataset.media_path(v)) if v.path else None,
                             start=v.meta.get("start", 0.0), end=v.meta.get("end", v.duration), video_id=video_id,
                             meta={k: value for k, value in meta.items() if value is not None}))
    return entries
