"""Ranking an index for query vectors, straight or through a re-scored shortlist: the one rule of
every query side (the run's model, `RunModel.search`; the exported encoder, `ExportedQuerySearcher`).

Methods whose score is not one dot product (MMT's renormalised mixture, ToCo's cross-encoder) still
search through the index: it shortlists `shortlist` candidates by the dot product of the query
vectors and the index vectors (default max(10·k, 100)), and the method's own score orders them.
Each re-scored hit keeps the shortlist's dot product as `meta["index_score"]`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

from videotext.errors import VideoTextError
from videotext.search.entries import Hit

# the scores of query i against its candidates [C] (the candidates' index rows, best first)
Rescorer = Callable[[int, Sequence[Hit]], Sequence[float]]


def shortlist_width(k: int, shortlist: int | None = None) -> int:
    """How many candidates the index returns for a re-scored top-k: `shortlist`, else max(10·k, 100)."""
    return max(k, shortlist if shortlist is not None else max(10 * k, 100))


def ranked(index: Any, vectors: np.ndarray, k: int, where: str | None = None, rescore: Rescorer | None = None,
           shortlist: int | None = None) -> list[list[Hit]]:
    """Top-k hits [Q][≤k] of the query vectors [Q, D] in `index`: its own order when `rescore` is None,
    else a shortlist of `shortlist_width` candidates per query ordered by `rescore(i, candidates)`."""
    if k < 1:
        raise VideoTextError(f"k must be at least 1, got {k}")
    if rescore is None:
        return index.search(vectors, k, where=where)
    results = []
    for i, candidates in enumerate(index.search(vectors, shortlist_width(k, shortlist), where=where)):
        scores = [float(s) for s in rescore(i, candidates)] if candidates else []
        order = sorted(range(len(candidates)), key=lambda j: -scores[j])[:k]
        results.append([dataclasses.replace(candidates[j], score=scores[j], rank=rank,
                                            meta={**candidates[j].meta, "index_score": candidates[j].score})
                        for rank, j in enumerate(order, 1)])
    return results


def like_entry(index: Any, entry_id: str, k: int = 10, where: str | None = None) -> list[Hit]:
    """The k entries most like the indexed entry `entry_id` (itself left out), by the dot product of
    their index vectors: what query by example does for an id, with no model."""
    if entry_id not in index:
        raise VideoTextError(f"like_id {entry_id!r} is not in the index ({len(index)} entries)")
    hits = [h for h in index.search(index.embeddings_for([entry_id]), k + 1, where=where)[0] if h.id != entry_id][:k]
    return [dataclasses.replace(h, rank=rank) for rank, h in enumerate(hits, 1)]
