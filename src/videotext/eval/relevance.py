"""Relevance: which targets are correct for each query of a retrieval evaluation.

`videotext.eval.retrieval.retrieval_metrics` ranks, for each query (a row of the score
matrix), its best-scoring relevant target. The relevance is always given explicitly,
never inferred from the matrix shape, and is stored as a `Relevance`: each query's
relevant target indices in CSR form, O(number of relevant pairs) memory.

Accepted forms of a ``relevant`` argument (normalised by `as_relevance`):

- a `Relevance`;
- a 1-D integer array, tensor or list of length n_queries: one target index per query
  (a negative value = no relevant target);
- a list with one entry per query, each an int, an iterable of ints (list, set, array)
  or None (several or no relevant targets);
- a boolean or 0/1 matrix ``[n_queries, n_targets]`` (numpy, torch or scipy.sparse;
  nonzero = relevant).

Every protocol (MSR-VTT 1k-A, the full multi-caption test, paragraph↔video,
clip↔sentence) is a way of building the relevance — the ``*_relevance`` helpers below
match query ids to target ids — not another metric. `invert_relevance` gives the
relevance of the transposed problem (video → its captions, for v2t).
"""
from __future__ import annotations

import numbers
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Hashable, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from videotext.data.schema import CaptionRef, VideoTextDataset


@dataclass(frozen=True)
class Relevance:
    """Relevant targets of each query in CSR form.

    Row ``q``'s relevant target indices are ``indices[indptr[q]:indptr[q + 1]]``,
    sorted and unique. Memory is O(number of relevant pairs), not O(queries × targets).
    """

    indptr: np.ndarray  # [n_queries + 1] int64
    indices: np.ndarray  # [n_pairs] int64
    n_targets: int

    @property
    def n_queries(self) -> int:
        return len(self.indptr) - 1

    @property
    def counts(self) -> np.ndarray:
        """Number of relevant targets of each query: [n_queries] int64."""
        return np.diff(self.indptr)

    def row(self, query: int) -> np.ndarray:
        return self.indices[self.indptr[query] : self.indptr[query + 1]]

    def to_lists(self) -> list[list[int]]:
        return [self.row(q).tolist() for q in range(self.n_queries)]

    @classmethod
    def from_pairs(
        cls, query_index: np.ndarray, target_index: np.ndarray, n_queries: int, n_targets: int
    ) -> "Relevance":
        """Build from (query, target) index pairs; duplicates are dropped."""
        query_index = np.asarray(query_index, dtype=np.int64)
        target_index = np.asarray(target_index, dtype=np.int64)
        bad = (target_index < 0) | (target_index >= n_targets)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"relevant: query {int(query_index[i])} names target {int(target_index[i])}, "
                f"expected an index in [0, {n_targets})"
            )
        order = np.lexsort((target_index, query_index))
        query_index, target_index = query_index[order], target_index[order]
        if len(order):
            keep = np.ones(len(order), dtype=bool)
            keep[1:] = (np.diff(query_index) != 0) | (np.diff(target_index) != 0)
            query_index, target_index = query_index[keep], target_index[keep]
        indptr = np.zeros(n_queries + 1, dtype=np.int64)
        np.cumsum(np.bincount(query_index, minlength=n_queries), out=indptr[1:])
        return cls(indptr, target_index, int(n_targets))

    def restrict(self, keep_queries: np.ndarray | None = None, keep_targets: np.ndarray | None = None) -> "Relevance":
        """The same queries × targets with the pairs of dropped queries / targets removed.

        `keep_queries` ([n_queries]) and `keep_targets` ([n_targets]) are bool masks; None keeps all.
        """
        pair_query = np.repeat(np.arange(self.n_queries, dtype=np.int64), self.counts)
        keep = np.ones(len(self.indices), dtype=bool)
        if keep_queries is not None:
            keep &= keep_queries[pair_query]
        if keep_targets is not None:
            keep &= keep_targets[self.indices]
        return Relevance.from_pairs(pair_query[keep], self.indices[keep], self.n_queries, self.n_targets)


def is_tensor(x: Any) -> bool:
    """True for a torch tensor; never imports torch just to check."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def as_relevance(relevant: Any, n_queries: int, n_targets: int) -> Relevance:
    """Normalise any accepted form of `relevant` to a `Relevance` (CSR).

    Accepted: a `Relevance`; a 1-D integer array/tensor/list of length n_queries (one
    target per query, a negative value = none); a list with one entry per query, each
    an int, an iterable of ints (list, set, array) or None; a boolean / 0-1 matrix
    ``[n_queries, n_targets]`` (numpy, torch or scipy.sparse; nonzero = relevant).
    """
    if isinstance(relevant, Relevance):
        if relevant.n_queries != n_queries or relevant.n_targets != n_targets:
            raise ValueError(
                f"relevant is for {relevant.n_queries} queries × {relevant.n_targets} targets, "
                f"sims is {n_queries} × {n_targets}"
            )
        return relevant
    if is_tensor(relevant):
        relevant = relevant.detach().cpu().numpy()
    if hasattr(relevant, "tocoo") and not isinstance(relevant, np.ndarray):  # scipy.sparse
        coo = relevant.tocoo()
        _check_matrix_shape(coo.shape, n_queries, n_targets)
        nonzero = coo.data != 0
        return Relevance.from_pairs(coo.row[nonzero], coo.col[nonzero], n_queries, n_targets)
    if isinstance(relevant, np.ndarray):
        if relevant.ndim == 2:
            _check_matrix_shape(relevant.shape, n_queries, n_targets)
            if relevant.dtype != bool and not np.isin(relevant, (0, 1)).all():
                raise ValueError(
                    "relevant: a 2-D relevant must be a boolean or 0/1 matrix [n_queries, n_targets]; "
                    "for several targets per query pass a list of lists"
                )
            rows, cols = np.nonzero(relevant)
            return Relevance.from_pairs(rows, cols, n_queries, n_targets)
        if relevant.ndim == 1 and relevant.dtype != object:
            if not np.issubdtype(relevant.dtype, np.integer):
                raise ValueError(f"relevant: expected integer target indices, got dtype {relevant.dtype}")
            return _from_index_vector(relevant, n_queries, n_targets)
        if relevant.ndim != 1:
            raise ValueError(f"relevant: expected 1-D or 2-D, got shape {relevant.shape}")
    # a sequence with one entry per query
    entries = list(relevant)
    if all(isinstance(x, numbers.Integral) for x in entries):
        return _from_index_vector(np.asarray(entries, dtype=np.int64), n_queries, n_targets)
    if len(entries) != n_queries:
        raise ValueError(f"relevant has {len(entries)} entries, sims has {n_queries} queries (rows)")
    rows: list[int] = []
    cols: list[int] = []
    for q, entry in enumerate(entries):
        targets = [] if entry is None else [entry] if isinstance(entry, numbers.Integral) else list(entry)
        for t in targets:
            if not isinstance(t, numbers.Integral):
                raise ValueError(f"relevant[{q}]: expected integer target indices, got {t!r}")
        rows.extend([q] * len(targets))
        cols.extend(int(t) for t in targets)
    return Relevance.from_pairs(np.asarray(rows), np.asarray(cols), n_queries, n_targets)


def _check_matrix_shape(shape: tuple, n_queries: int, n_targets: int) -> None:
    if tuple(shape) != (n_queries, n_targets):
        raise ValueError(f"relevant matrix has shape {tuple(shape)}, sims has ({n_queries}, {n_targets})")


def _from_index_vector(targets: np.ndarray, n_queries: int, n_targets: int) -> Relevance:
    if len(targets) != n_queries:
        raise ValueError(f"relevant has {len(targets)} entries, sims has {n_queries} queries (rows)")
    has = targets >= 0
    return Relevance.from_pairs(np.flatnonzero(has), targets[has], n_queries, n_targets)


def invert_relevance(relevant: Any, n_targets: int, n_queries: int | None = None) -> Relevance:
    """The relevance of the transposed problem: target t's relevant "targets" are the
    queries that have t as relevant (e.g. a video → all of its captions), for v2t."""
    if n_queries is None:
        if isinstance(relevant, Relevance):
            n_queries = relevant.n_queries
        elif is_tensor(relevant) or isinstance(relevant, np.ndarray) or hasattr(relevant, "shape"):
            n_queries = int(relevant.shape[0])
        else:
            n_queries = len(relevant)
    rel = as_relevance(relevant, n_queries, n_targets)
    query_index = np.repeat(np.arange(rel.n_queries, dtype=np.int64), rel.counts)
    return Relevance.from_pairs(rel.indices, query_index, n_targets, rel.n_queries)


# --- protocols: each one only builds `relevant` ---------------------------------------
def relevance_from_ids(query_ids: Sequence[Hashable], target_ids: Sequence[Hashable]) -> np.ndarray:
    """Query i's target is the target with the same id: int64 ``[n_queries]`` for `relevant`.

    Lists (e.g. ``[video_id, segment]`` read from JSON) are compared as tuples.
    """
    def key(x: Any) -> Hashable:
        return tuple(x) if isinstance(x, list) else x

    position: dict[Hashable, int] = {}
    for t, target in enumerate(target_ids):
        if key(target) in position:
            raise ValueError(f"target id {target!r} appears twice (targets {position[key(target)]} and {t})")
        position[key(target)] = t
    out = np.empty(len(query_ids), dtype=np.int64)
    for q, query in enumerate(query_ids):
        try:
            out[q] = position[key(query)]
        except KeyError:
            raise ValueError(f"query {q}: id {query!r} is not among the {len(position)} target ids") from None
    return out


def one_to_one_relevance(n: int) -> np.ndarray:
    """Query i ↔ target i (MSR-VTT 1k-A: one caption per video, in video order)."""
    return np.arange(n, dtype=np.int64)


def msrvtt_1ka_relevance(n_videos: int = 1000) -> np.ndarray:
    """MSR-VTT 1k-A (JSFusion test split): caption i is the one caption of video i."""
    return one_to_one_relevance(n_videos)


def multi_caption_relevance(caption_video_ids: Sequence[str], video_ids: Sequence[str]) -> np.ndarray:
    """Full multi-caption test: every caption is a query and its video the target; for v2t
    (`retrieval_metrics_both`) any caption of the video is relevant."""
    return relevance_from_ids(caption_video_ids, video_ids)


def paragraph_video_relevance(paragraph_video_ids: Sequence[str], video_ids: Sequence[str]) -> np.ndarray:
    """Paragraph ↔ video (ActivityNet, YouCook2 video level): one paragraph per video."""
    return relevance_from_ids(paragraph_video_ids, video_ids)


def clip_sentence_relevance(
    sentence_keys: Sequence[tuple[str, int]], clip_keys: Sequence[tuple[str, int]]
) -> np.ndarray:
    """Sentence ↔ clip: sentence ``(video_id, segment_index)`` ↔ the clip with that key."""
    return relevance_from_ids(sentence_keys, clip_keys)


def dataset_caption_relevance(
    dataset: "VideoTextDataset", video_ids: Sequence[str] | None = None
) -> tuple[np.ndarray, list["CaptionRef"]]:
    """Multi-caption protocol of a dataset: (relevant, caption refs in query order).

    Targets are `video_ids` (default: every video of the dataset, in order); queries are
    the captions of those videos, in `dataset.caption_refs()` order.
    """
    if video_ids is None:
        video_ids = list(dataset.videos)
    wanted = set(video_ids)
    refs = [r for r in dataset.caption_refs() if r.video_id in wanted]
    return multi_caption_relevance([r.video_id for r in refs], video_ids), refs
