"""Building and updating an index: one driver, `build_index`, over steps that need no model.

    read_source → plan_build (fingerprints, `plan_index`) → index_inputs (features extracted
    where missing; windows) → encode this rank's share → write (entries + vectors; removals
    last) → publish + save

The plan is decided on rank 0 from the folder and the index's entries alone, before anything
is decoded. The model is passed in and used only through `IndexModel` (its feature
extraction, its video encoder, its index vectors); the store only through the calls the
FAISS `Index` and `MilvusIndex` both answer. Under torchrun the same driver runs on every
rank with that rank's share of the videos (r::R): into a Milvus server every rank inserts its
own rows; otherwise each leaves its embeddings in a part file and rank 0 writes them all.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from videotext import distributed as dist
from videotext.data.features import FeatureStore
from videotext.data.loaders import VideoFeatures
from videotext.data.media_files import fingerprint
from videotext.data.readers import read_dataset
from videotext.data.schema import VideoTextDataset
from videotext.data.video import probe
from videotext.errors import VideoTextError
from videotext.io import atomic_path
from videotext.models.base import concat_embeddings
from videotext.search.entries import Entry, IndexStore
from videotext.search.index import new_index, open_store, takes_concurrent_inserts
from videotext.search.milvus import DEFAULT_COLLECTION
from videotext.search.windows import video_duration, window_clips


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


def source_record(source: str | os.PathLike | VideoTextDataset) -> dict[str, str] | None:
    """Where the videos of a build come from, kept in the index (`meta["source"]`) so that `index check`
    and `--update` compare it with that same source: a folder, a manifest, or a manifest's split (a
    dataset read from a manifest knows its `origin`); None for videos no file names."""
    if isinstance(source, VideoTextDataset):
        return dict(source.origin) if source.origin else None
    path = Path(source).resolve()
    return {"manifest": str(path)} if path.suffix == ".json" else {"folder": str(path)}


def recorded_source(meta: dict[str, Any]) -> tuple[str, Any] | None:
    """(what to call it, what `read_source` takes) of the source an index records (`source_record`;
    an index built before that records the folder its videos were in); None when it names none."""
    record = meta.get("source")
    if isinstance(record, dict) and record.get("manifest"):
        manifest, split = Path(record["manifest"]), record.get("split")
        label = f"{manifest} (split {split})" if split else str(manifest)
        if not manifest.is_file():
            return label, manifest  # gone: the caller says so
        dataset = read_source(manifest)
        return label, dataset.split(split) if split else dataset
    if isinstance(record, dict) and record.get("folder"):
        return record["folder"], Path(record["folder"])
    return (str(meta["root"]), Path(meta["root"])) if meta.get("root") else None


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


# ---- the driver --------------------------------------------------------------------------------
class IndexModel(Protocol):
    """What `build_index` uses of a model (`videotext.inference.LoadedModel` is one)."""

    run_dir: Path  # recorded in the index, so `search` finds the model behind it

    @property
    def method_name(self) -> str: ...  # the method the index's vectors come from

    @property
    def experts(self) -> list[str]: ...  # the feature experts it reads

    def features_for(self, dataset: VideoTextDataset, features_dir: str | Path, progress: bool = True,
                     whole_videos: bool = False) -> VideoFeatures: ...  # extracts what is missing

    def video_embedding(self, dataset: VideoTextDataset, features: VideoFeatures) -> Any: ...  # N first

    def index_vectors(self, embedding: Any) -> np.ndarray: ...  # [N, D] float32

    def index_parts(self, embedding: Any) -> dict[str, np.ndarray] | None: ...  # re-scoring parts, or None


class BuildPlan(NamedTuple):
    """What a build does, decided on rank 0 before anything is decoded."""

    plan: IndexPlan  # videos to add, entries to remove and keep
    fingerprints: dict[str, dict]  # video id -> content fingerprint of its file
    concurrent: bool  # every torchrun rank inserts its own rows (a Milvus server)
    nothing_to_add: bool  # an update that only removes entries (or changes nothing)


def build_index(model: IndexModel, source: str | os.PathLike | VideoTextDataset, out: str | os.PathLike | None = None,
                features_dir: str | os.PathLike | None = None, progress: bool = True, update: bool = False,
                window: float | None = None, stride: float | None = None, store: str = "faiss",
                collection: str = DEFAULT_COLLECTION, every_step: bool = False) -> tuple[IndexStore | None, BuildPlan]:
    """Index every video of `source` with `model` (`LoadedModel.build_index` documents the
    options); returns the index (None on a torchrun rank > 0 that cannot open it) and the plan.
    `every_step`: extract every step of whole videos (a window build always does), for the moment
    track (`search.moment_build`), not only the steps the method reads."""
    dataset = read_source(source)
    features_dir = Path(features_dir) if features_dir is not None else features_folder(out, model.run_dir)
    index = existing_index(out, model.method_name) if update and dist.is_main() else None
    build = dist.broadcast_object(plan_build(dataset, index, features_dir, store, progress) if dist.is_main() else None)
    todo, added = dataset.subset(build.plan.add), set()
    if not build.nothing_to_add:
        todo, reader = index_inputs(model, source, todo, features_dir, progress, window, stride, build.fingerprints,
                                    every_step)
        index = write_videos(model, index, todo, reader, build, out, store, collection, parts_folder(out, features_dir))
        added = {v.id for v in todo}  # the entry ids just written (`index_entries`)
    if dist.is_main():
        index.meta["source"] = source_record(source)
        complete_entries(index, build.plan.keep)
        finish_index(index, build.plan, added, out)
    opens_elsewhere = dist.broadcast_object(index.multi_process if dist.is_main() else None)  # after rank 0 saved
    if dist.is_main():
        return index, build
    return (open_store(out) if out is not None and opens_elsewhere else None), build


def existing_index(out: str | os.PathLike | None, method: str) -> IndexStore | None:
    """The index at `out` to update (None when there is none yet); it must be `method`'s."""
    if out is None or not (Path(out) / "index.json").is_file():
        return None
    index = open_store(out)
    if index.model != method:
        raise VideoTextError(f"{out}: index of method {index.model!r}, this run is {method!r}; "
                             "rebuild it without update")
    return index


def plan_build(dataset: VideoTextDataset, index: IndexStore | None, features_dir: Path, store: str,
               progress: bool) -> BuildPlan:
    """What a build does (`BuildPlan`), decided before anything is decoded. Features of a
    video whose file changed since they were extracted (by the store's `sources.json` or
    the index's entries) are discarded, to be extracted again."""
    entries = index.entries() if index is not None else []
    features = FeatureStore(features_dir)
    sources = features.sources() if features_dir.is_dir() else {}
    fingerprints = fingerprint_videos(dataset, entries, sources, progress)
    plan = plan_index(dataset, entries, fingerprints, index.meta.get("pending", ()) if index is not None else ())
    stale = {dataset[i].key for i in plan.changed}
    stale |= {v.key for v in dataset if v.id in fingerprints
              and sources.get(v.key, {}).get("hash") not in (None, fingerprints[v.id]["hash"])}
    if stale and features_dir.is_dir():
        features.discard(stale)
    concurrent = index.concurrent_inserts if index is not None else takes_concurrent_inserts(store)
    return BuildPlan(plan, fingerprints, concurrent, nothing_to_add=index is not None and not plan.add)


def index_inputs(model: IndexModel, source: Any, dataset: VideoTextDataset, features_dir: Path, progress: bool,
                 window: float | None, stride: float | None, fingerprints: dict[str, dict],
                 every_step: bool = False) -> tuple[VideoTextDataset, VideoFeatures]:
    """The videos (or their windows) to encode and their feature reader: features are
    extracted where missing (and the media fingerprints they came from recorded), videos
    no expert could read are left out, and every whole video knows its duration (`with_durations`)."""
    whole_videos = not window and not every_step
    reader, experts = model.features_for(dataset, features_dir, progress, whole_videos=whole_videos), model.experts
    present = [v for v in dataset if any(reader.store.has(e, v.key) for e in experts)]
    if not present:
        raise VideoTextError(f"{source}: no video could be read (see {features_dir}/failures.jsonl)")
    if fingerprints and dist.is_main():
        reader.store.record_sources({v.key: {**fingerprints[v.id], "path": os.path.abspath(dataset.media_path(v))}
                                     for v in present if v.id in fingerprints})
    dataset = dataset.subset([v.id for v in present])
    if window:  # each clip carries its video's duration (`window_clips`)
        dataset, reader = window_clips(dataset, reader, window, stride or window / 2)
    else:
        dataset = with_durations(dataset, reader)
    return dataset, reader


def with_durations(dataset: VideoTextDataset, reader: VideoFeatures) -> VideoTextDataset:
    """`dataset` with every video's duration known, so each entry carries its `duration` and a whole
    video its `end`: the manifest's, else its file's (the container's header), else the end of its
    last feature step (a video without a readable file)."""
    if all(v.duration is not None for v in dataset):
        return dataset
    videos = []
    for v in dataset:
        if v.duration is None:
            duration = media_duration(dataset.media_path(v))  # 0 for a still image
            v = dataclasses.replace(v, duration=video_duration(v, reader) if duration is None else duration)
        videos.append(v)
    return VideoTextDataset(dataset.name, videos, dataset.splits, dataset.root, dataset.meta)


def media_duration(path: str | os.PathLike | None) -> float | None:
    """The duration its container declares for a media file (0 for a still image); None when unreadable."""
    if path is None:
        return None
    try:
        return float(probe(path).duration)
    except (VideoTextError, OSError, ValueError):
        return None


def complete_entries(index: IndexStore, ids: Sequence[str]) -> int:
    """Give the entries `ids` (those an update keeps) the duration an index built before every entry
    carried one lacks: their file's, written back with their own vectors and parts (a whole video's
    `end` too). Returns how many entries were completed."""
    wanted = set(ids)
    if not wanted:  # a fresh build: every entry was just written with its duration
        return 0
    lacking = [e for e in index.entries() if e.id in wanted and e.meta.get("duration") is None]
    completed = []
    for entry in lacking:
        duration = media_duration(entry.path)
        if duration is not None:
            end = duration if entry.end is None else entry.end
            completed.append(dataclasses.replace(entry, end=end, meta={**entry.meta, "duration": duration}))
    if completed:
        ids = [e.id for e in completed]
        index.add(index.embeddings_for(ids), completed, parts=index.parts_for(ids) if index.part_names else None)
    return len(completed)


def write_videos(model: IndexModel, index: IndexStore | None, todo: VideoTextDataset, reader: VideoFeatures,
                 build: BuildPlan, out: str | os.PathLike | None, store: str, collection: str,
                 parts: Path) -> IndexStore | None:
    """Encode this rank's share of `todo` (videos r::R) and write its rows. Into a store that
    takes concurrent inserts every rank adds its own rows; otherwise rank 0 writes them all
    (the other ranks' from their part files). The index is created at the first rows when
    there is none. Returns rank 0's index (None on the other ranks)."""
    mine = todo.subset([v.id for v in list(todo)[dist.rank() :: dist.world()]])
    if build.concurrent:
        embedding = model.video_embedding(mine, reader) if len(mine) else None
        dims = [d for d in dist.all_gather_object(None if embedding is None else vector_dim(model, embedding))
                if d is not None]
        if dist.is_main():
            index = index if index is not None else create_index(model, dims[0], store, collection)
            start_writing(index, todo, out)
        writer = dist.broadcast_object(index if dist.is_main() else None)  # a rank's own connection to it
        if embedding is not None:
            add_videos(model, index if dist.is_main() else writer, mine, embedding, build.fingerprints)
        dist.barrier()  # every rank's rows are in
        return index if dist.is_main() else None
    embedding = gather_embeddings(model, todo, mine, reader, parts if dist.world() > 1 else None)
    if not dist.is_main():
        return None
    index = index if index is not None else create_index(model, vector_dim(model, embedding), store, collection)
    start_writing(index, todo, out)
    add_videos(model, index, todo, embedding, build.fingerprints)
    shutil.rmtree(parts, ignore_errors=True)
    return index


def gather_embeddings(model: IndexModel, todo: VideoTextDataset, mine: VideoTextDataset, reader: VideoFeatures,
                      parts: Path | None) -> Any:
    """Rank 0: the embedding of every video of `todo`, in its order (the other ranks: None).
    Under torchrun each rank embeds its share into `parts/rank<r>-of<R>.pt` (atomic; a finished
    part is reused on restart, so a crashed rank is redone alone) and rank 0 merges them after
    a barrier; in one process (`parts` None) the share is every video."""
    if parts is None:
        return model.video_embedding(mine, reader)
    rank, world = dist.rank(), dist.world()
    ids = [v.id for v in mine]
    part = parts / f"rank{rank}-of{world}.pt"
    done = part.is_file() and torch.load(part, map_location="cpu", weights_only=False)["ids"] == ids
    if ids and not done:
        embedding = model.video_embedding(mine, reader)
        parts.mkdir(parents=True, exist_ok=True)
        with atomic_path(part) as tmp:
            torch.save({"ids": ids, "embedding": embedding}, tmp)
    dist.barrier()
    if rank > 0:
        return None
    videos = list(todo)
    loaded = [torch.load(parts / f"rank{r}-of{world}.pt", map_location="cpu", weights_only=False)
              for r in range(world) if videos[r::world]]
    merged = concat_embeddings([p["embedding"] for p in loaded])  # rows: rank 0's, rank 1's, …
    position = {video_id: i for i, video_id in enumerate(i for p in loaded for i in p["ids"])}
    rows = torch.tensor([position[v.id] for v in videos])
    return {k: v[rows] for k, v in merged.items()} if isinstance(merged, dict) else merged[rows]


def vector_dim(model: IndexModel, embedding: Any) -> int:
    """The width of the model's index vectors, read off an embedding's first row."""
    first = {k: v[:1] for k, v in embedding.items()} if isinstance(embedding, dict) else embedding[:1]
    return int(model.index_vectors(first).shape[1])


def create_index(model: IndexModel, dim: int, store: str, collection: str) -> IndexStore:
    """An empty index for the model's `dim`-d vectors, naming the run behind it; a fresh Milvus
    build fills a new version of the collection (`publish` moves the alias onto it)."""
    index = new_index(dim, model.method_name, store, collection, staged=True)
    index.meta["run_dir"] = getattr(model, "reference", None) or str(Path(model.run_dir).resolve())  # or hf-hub:…
    return index


def start_writing(index: IndexStore, todo: VideoTextDataset, out: str | os.PathLike | None) -> None:
    """Before the first row: the indexed folder (the HTTP API shows paths relative to it), and a
    new version to write into for a store that serves one while it is written (`begin_writing`)."""
    if todo.root is not None:
        index.meta["root"] = os.path.abspath(todo.root)
    index.begin_writing(out)


def add_videos(model: IndexModel, index: IndexStore, dataset: VideoTextDataset, embedding: Any,
               fingerprints: dict[str, dict]) -> None:
    """One row per video or clip of `dataset` (embedding rows in its order): its entry, its
    index vector and, for a method that re-scores, its parts."""
    index.add(model.index_vectors(embedding), index_entries(dataset, fingerprints), parts=model.index_parts(embedding))


def finish_index(index: IndexStore, plan: IndexPlan, added: set[str], out: str | os.PathLike | None) -> IndexStore:
    """The last writes of a build or an update: the entries `plan` drops (those not just
    re-added under the same id), the version written published (a Milvus alias moved), the
    folder saved."""
    index.remove([i for i in plan.remove if i not in added])
    index.meta.pop("pending", None)
    index.publish()
    if out is not None:
        index.save(out)
    return index
