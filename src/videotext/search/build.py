"""The steps of building an index that need no model: reading the source, the update plan,
where features and rank parts go, and the entries of encoded videos.

`LoadedModel.build_index` runs: `read_source` → `fingerprint_videos` (content hashes) →
`plan_index` (what to add, remove, keep) →
features (extracted where missing) → windows (`search.windows`) → encode → `index_entries`
+ vectors → save. The plan is decided from the folder and the index's entries alone, before
anything is decoded.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from tqdm.auto import tqdm

from videotext.data.media_files import fingerprint
from videotext.data.readers import read_dataset
from videotext.data.schema import VideoTextDataset
from videotext.errors import VideoTextError
from videotext.search.index import Entry, Index
from videotext.search.milvus import MilvusIndex, is_milvus_uri


FINGERPRINT = ("hash", "size", "mtime_ns")  # the entry metadata `data.media_files.fingerprint` fills


@dataclass(frozen=True)
class IndexPlan:
    """What a build or an update does to an index."""

    add: list[str]  # video ids of the source to encode and add, in source order
    remove: list[str]  # entry ids to drop: their video is gone (deleted file), changed or unfinished
    keep: list[str]  # entry ids left as they are (their video is still there, unchanged)
    changed: list[str] = field(default_factory=list)  # video ids among `add` whose file changed in place
    gone: list[str] = field(default_factory=list)  # video ids of removed entries no longer in the source


def read_source(source: str | os.PathLike | VideoTextDataset) -> VideoTextDataset:
    """The videos to index: a dataset as is, a manifest (`.json`) or a folder of videos."""
    if isinstance(source, VideoTextDataset):
        return source
    source = Path(source)
    return read_dataset("manifest" if source.suffix == ".json" else "folder", source)


def fingerprint_videos(dataset: VideoTextDataset, entries: Sequence[Entry] = (),
                       sources: dict[str, dict] | None = None, progress: bool = False) -> dict[str, dict]:
    """Video id -> content fingerprint of its media file (`data.media_files.fingerprint`).
    A file whose size and modification time match what the index's `entries` or the feature
    store's `sources` record is not read again; videos without a readable file get none."""
    known: dict[str, dict] = {}
    for e in entries:
        if e.path and e.meta.get("hash"):
            known[e.path] = {name: e.meta.get(name) for name in FINGERPRINT}
    for record in (sources or {}).values():
        if isinstance(record, dict) and record.get("path"):
            known.setdefault(record["path"], record)
    prints = {}
    videos = [v for v in dataset if v.path]
    for v in tqdm(videos, desc="fingerprint", unit="video", disable=not progress or len(videos) < 100):
        path = os.path.abspath(dataset.media_path(v))
        try:
            prints[v.id] = fingerprint(path, known.get(path))
        except OSError:
            continue  # a missing or unreadable file: extraction records why
    return prints


def plan_index(dataset: VideoTextDataset, entries: Sequence[Entry] = (),
               fingerprints: dict[str, dict] | None = None, pending: Sequence[str] = ()) -> IndexPlan:
    """The update diff of `dataset` against an index's `entries` (none: a fresh build adds
    every video). Entries of videos gone from the source are removed; a video whose
    `fingerprints` hash differs from its entries' (a file changed in place), or that an
    interrupted update left `pending`, has its entries removed and is encoded again; videos
    with no entry are added; the rest is kept (a video counts as indexed when any of its
    clips is). Entries that carry no hash (indexes built before hashes) count as unchanged."""
    fingerprints = fingerprints or {}
    wanted = {v.id for v in dataset}
    pending_ids = set(pending)

    def current(e: Entry) -> bool:
        if e.video_id not in wanted or e.video_id in pending_ids:
            return False
        new, old = fingerprints.get(e.video_id, {}).get("hash"), e.meta.get("hash")
        return new is None or old is None or new == old

    remove = [e.id for e in entries if not current(e)]
    keep = [e.id for e in entries if current(e)]
    indexed = {e.video_id for e in entries if current(e)}
    stale = {e.video_id for e in entries if e.video_id in wanted and not current(e)}
    add = [v.id for v in dataset if v.id not in indexed]
    gone = sorted({e.video_id for e in entries if e.video_id not in wanted})
    return IndexPlan(add=add, remove=remove, keep=keep, changed=[i for i in add if i in stale], gone=gone)


def new_index(dim: int, model: str, store: str = "faiss", collection: str = "videotext", staged: bool = False) -> Any:
    """An empty index for vectors of `dim`: FAISS in the index folder (`store="faiss"`), or a
    Milvus collection (`milvus:PATH.db` for Milvus Lite, `http(s)://HOST:PORT` for a server);
    `staged`: an existing collection of that name is replaced only by `MilvusIndex.publish`."""
    if store == "faiss":
        return Index(dim=dim, model=model)
    if is_milvus_uri(store):
        return MilvusIndex(store, dim, model=model, collection=collection, staged=staged)
    raise VideoTextError(f"--store {store!r}: expected faiss, milvus:PATH.db or http(s)://HOST:PORT")


def features_folder(out: str | os.PathLike | None, run_dir: Path) -> Path:
    """Default feature store of an index: `<out>.features` (`<run>/index.features` without `out`)."""
    base = Path(out) if out is not None else run_dir / "index"
    return base.with_name(base.name + ".features")


def parts_folder(out: str | os.PathLike | None, features_dir: str | os.PathLike) -> Path:
    """Where torchrun ranks leave their embeddings for rank 0: `<out>.parts` (or inside the store)."""
    return Path(out).with_name(Path(out).name + ".parts") if out is not None else Path(features_dir) / ".index-parts"


def index_entries(dataset: VideoTextDataset, fingerprints: dict[str, dict] | None = None) -> list[Entry]:
    """One entry per video or clip of `dataset`, in order: absolute media path, clip times
    (a whole video spans [0, duration]), the video it belongs to, its first caption, and the
    metadata filters use where the dataset knows them (`videotext.search.filters`): the
    video's duration, the dataset's name, the split holding the video, `tags` from the
    manifest (a video's `meta["tags"]`) and the file's content fingerprint (`hash`, `size`,
    `mtime_ns`: `fingerprints` by video id) that updates compare."""
    split_of = {video_id: split for split, ids in dataset.splits.items() for video_id in ids}
    fingerprints = fingerprints or {}
    entries = []
    for v in dataset:
        video_id = v.meta.get("video_id", v.id)
        meta = {"captions": v.captions[:1], "duration": v.meta.get("video_duration", v.duration),
                "dataset": dataset.name or None, "split": split_of.get(video_id, split_of.get(v.id)),
                "tags": list(v.meta["tags"]) if isinstance(v.meta.get("tags"), (list, tuple)) else None,
                **fingerprints.get(video_id, {})}
        entries.append(Entry(id=v.id, path=os.path.abspath(dataset.media_path(v)) if v.path else None,
                             start=v.meta.get("start", 0.0), end=v.meta.get("end", v.duration), video_id=video_id,
                             meta={k: value for k, value in meta.items() if value is not None}))
    return entries
