"""What every index store holds and answers, whichever engine keeps the vectors.

An `Entry` is one indexed item (a whole video, or a clip `[start, end]` of one); a `Hit` is an
entry with its score and rank in one answer. `as_matrix` is the one gate vectors pass to enter
a store or query it (float32, L2-normalised rows, so inner product = cosine). `merge_hits` joins
the overlapping clip hits of one video. The FAISS `Index` (`search.index`) and the Milvus store
(`search.milvus`) both build on this module and on nothing of each other's.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol, Sequence, runtime_checkable

import numpy as np

from videotext.errors import VideoTextError

FORMAT = "videotext-index"  # the `format` every store's index.json carries


@dataclass
class Entry:
    """One indexed item: a whole video, or the clip `[start, end]` seconds of `video_id`."""

    id: str
    path: str | None = None
    start: float | None = None
    end: float | None = None
    video_id: str = ""  # defaults to `id` (a whole video)
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise VideoTextError(f"entry id must be a non-empty string, got {self.id!r}")
        self.video_id = self.video_id or self.id
        if self.start is not None and self.end is not None and self.end < self.start:
            raise VideoTextError(f"entry {self.id!r}: end {self.end} is before start {self.start}")

    def to_dict(self) -> dict[str, Any]:
        """The Entry fields (a Hit's score and rank left out); `meta` is a shallow copy."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(Entry)}
        out["meta"] = dict(self.meta)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Entry":
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(Entry) if f.name in data})


@dataclass(kw_only=True)
class Hit(Entry):
    """A search result: the entry's fields, its cosine `score`, and its 1-based `rank`."""

    score: float
    rank: int

    @property
    def entry(self) -> Entry:
        return Entry.from_dict(self.to_dict())


def as_matrix(x: Any, what: str) -> np.ndarray:
    """numpy / torch / nested list of any real dtype (float32, float64, bf16 …) -> C-contiguous
    float32 [N, D], rows L2-normalised: the one place vectors enter the index."""
    if hasattr(x, "detach"):  # torch.Tensor, without importing torch
        x = x.detach().to("cpu")
        if x.is_complex() or str(x.dtype) == "torch.bool":
            raise VideoTextError(f"{what} must be real numbers, got a tensor of {x.dtype}")
        x = x.float().numpy()
    try:
        raw = np.asarray(x)
    except (ValueError, TypeError):  # ragged nested lists
        raise VideoTextError(f"{what} must be a [N, D] matrix of numbers, got rows of uneven lengths") from None
    if raw.dtype.kind not in "fiu":  # strings, objects, bool, complex
        raise VideoTextError(f"{what} must be a [N, D] matrix of numbers, got {type(x).__name__} of dtype {raw.dtype}")
    arr = np.array(raw, dtype=np.float32, copy=True, order="C")
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise VideoTextError(f"{what} must be a [N, D] matrix, got shape {tuple(arr.shape)}")
    if not np.isfinite(arr).all():
        raise VideoTextError(f"{what} contain NaN or infinite values")
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    np.divide(arr, norms, out=arr, where=norms > 0)  # zero rows stay zero (score 0)
    return arr


def merge_hits(hits: Sequence[Hit], gap: float = 0.0) -> list[Hit]:
    """Merge clip hits of the same video whose ranges overlap or lie within `gap` seconds
    into one hit spanning them all, with the best score (and that clip's id, path, meta,
    plus `meta["merged_ids"]` when clips were merged). Hits without times pass through.
    Returns hits sorted by score, re-ranked from 1."""
    by_video: dict[str, list[Hit]] = {}
    out: list[Hit] = []
    for h in hits:
        if h.start is None or h.end is None:
            out.append(h)
        else:
            by_video.setdefault(h.video_id, []).append(h)
    for clips in by_video.values():
        clips.sort(key=lambda h: (h.start, h.end))
        runs: list[list[Hit]] = [[clips[0]]]
        end = clips[0].end
        for h in clips[1:]:
            if h.start <= end + gap:
                runs[-1].append(h)
                end = max(end, h.end)
            else:
                runs.append([h])
                end = h.end
        for run in runs:
            best = max(run, key=lambda h: h.score)
            meta = dict(best.meta)
            if len(run) > 1:
                meta["merged_ids"] = [h.id for h in run]
            out.append(dataclasses.replace(best, start=run[0].start, end=max(h.end for h in run), meta=meta))
    out.sort(key=lambda h: -h.score)
    return [dataclasses.replace(h, rank=rank) for rank, h in enumerate(out, 1)]


@runtime_checkable
class IndexStore(Protocol):
    """The calls every index store answers, FAISS (`search.index.Index`) and Milvus
    (`search.milvus.MilvusIndex`) alike, so no caller asks which one it holds."""

    dim: int
    model: str  # the method whose vectors it holds
    meta: dict  # free-form, saved with it (the run behind it, the indexed folder, where it came from)
    part_names: tuple[str, ...]  # re-scoring parts every entry carries

    @property
    def concurrent_inserts(self) -> bool: ...  # several processes may insert at once (a Milvus server)

    @property
    def multi_process(self) -> bool: ...  # several processes may open it at once (not Milvus Lite)

    def __len__(self) -> int: ...
    def __contains__(self, entry_id: object) -> bool: ...
    def get(self, entry_id: str) -> Entry: ...
    def entries(self) -> list[Entry]: ...
    def add(self, embeddings: Any, entries: Sequence[Entry | str], parts: dict[str, Any] | None = None) -> None: ...
    def remove(self, ids: Iterable[str]) -> int: ...
    def remove_video(self, video_id: str) -> int: ...
    def search(self, queries: Any, k: int = 10, where: str | None = None) -> list[list[Hit]]: ...
    def search_one(self, query: Any, k: int = 10, where: str | None = None) -> list[Hit]: ...
    def embeddings_for(self, ids: Sequence[str]) -> np.ndarray: ...
    def parts_for(self, ids: Sequence[str]) -> dict[str, np.ndarray]: ...
    def begin_writing(self, out: Any = None) -> None: ...  # before the first row: a new version (Milvus)
    def publish(self) -> None: ...  # the version written becomes the one served (Milvus: its alias moves)
    def describe(self) -> dict[str, Any]: ...  # the store and what it serves (`/health`)
    def save(self, path: Any) -> Any: ...
