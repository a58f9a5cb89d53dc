"""Fusing the rankings of several channels (what is shown, what is said) into one.

Two rules, both over the candidates the channels return (each `FUSION_DEPTH` deep):
- `standard` (the default): each channel's scores are standardised against their own distribution over
  the candidates, z = (s - mean) / std, and the fused score is the sum of the z-scores (CombSUM of
  z-normalised scores: Montague & Aslam, CIKM 2001, "Relevance score normalization for metasearch").
  A candidate a channel did not return gets that channel's lowest returned score (it scores at most
  that). A channel whose scores do not differ (the same footage in every video, one transcript line
  everywhere) has z = 0 for every candidate and cannot reorder the others; a channel that barely
  separates its candidates contributes the z-scores of noise (a few units at most), which cannot
  overturn a candidate that another channel sets many standard deviations above its rest.
- `rrf`: reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009), Σ 1 / (RRF_K + rank),
  RRF_K = 60 as in the paper, with tied scores sharing their best rank. It uses positions only, so
  a channel that cannot tell candidates apart still votes with its arbitrary order wherever its
  scores are not exactly equal.
The choice was measured on mixed sets chosen on the validation videos and reported on the test
videos (bench/fusion.py, docs/search.md).
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from videotext.errors import VideoTextError
from videotext.search.entries import Hit

FUSIONS = ("standard", "rrf")
DEFAULT_FUSION = "standard"
RRF_K = 60  # Cormack et al. 2009, §3: k = 60 "near-optimal" and fixed
FUSION_DEPTH = 100  # hits taken from each ranking before fusing (at least 5·k)
FLAT = 1e-6  # a channel whose scores spread less than this (relative to their size) tells nothing apart


def check_fusion(fusion: str) -> None:
    """One clear error for a `--fusion` value that is not a known rule."""
    if fusion not in FUSIONS:
        raise VideoTextError(f"--fusion {fusion!r}: expected one of {', '.join(FUSIONS)}")


def competition_ranks(scores: np.ndarray) -> np.ndarray:
    """1-based ranks of `scores` [N] (higher first) where equal scores share the best rank: 1, 2, 2, 4."""
    scores = np.asarray(scores, dtype=np.float64)
    ascending = np.sort(scores)
    return len(scores) - np.searchsorted(ascending, scores, side="right") + 1


def standardised(scores: np.ndarray) -> np.ndarray:
    """z-scores of `scores` [N] against their own mean and standard deviation; all 0 when the scores
    spread less than FLAT of their size (the channel cannot tell these candidates apart)."""
    scores = np.asarray(scores, dtype=np.float64)
    if len(scores) == 0:
        return scores
    spread = scores.std()
    if not np.isfinite(spread) or spread <= FLAT * max(1.0, float(np.abs(scores).max())):
        return np.zeros(len(scores))
    return (scores - scores.mean()) / spread


def fuse_scores(channels: Sequence[np.ndarray], found: Sequence[np.ndarray], fusion: str = DEFAULT_FUSION) -> np.ndarray:
    """Fused score of each candidate [C] from each channel's scores over the candidates [K][C];
    `found[k]` [C] marks the candidates channel k returned (the others' scores are ignored: under
    `standard` they get the channel's lowest returned score, under `rrf` they get no vote)."""
    check_fusion(fusion)
    fused = np.zeros(len(channels[0]) if channels else 0)
    for scores, mask in zip(channels, found):
        scores, mask = np.asarray(scores, dtype=np.float64), np.asarray(mask, dtype=bool)
        if not mask.any():
            continue
        if fusion == "standard":
            fused += standardised(np.where(mask, scores, scores[mask].min()))
        else:
            ranks = competition_ranks(scores[mask])
            fused[mask] += 1.0 / (RRF_K + ranks)
    return fused


def fuse_hits(rankings: Sequence[Sequence[Hit]], k: int = 10, fusion: str = DEFAULT_FUSION) -> list[Hit]:
    """The entries of several channels' hit lists, ordered by `fuse_scores`; an entry keeps the meta of
    every channel that found it (the spoken one's `said` line included) and its score is the fused one.
    Equal fused scores keep the order of the first channel that found them."""
    candidates: dict[str, int] = {}
    first: dict[str, Hit] = {}
    meta: dict[str, dict] = {}
    for ranking in rankings:
        for hit in ranking:
            candidates.setdefault(hit.id, len(candidates))
            first.setdefault(hit.id, hit)
            meta[hit.id] = {**meta.get(hit.id, {}), **hit.meta}
    channels, found = [], []
    for ranking in rankings:
        scores, mask = np.zeros(len(candidates)), np.zeros(len(candidates), bool)
        for hit in ranking:
            scores[candidates[hit.id]], mask[candidates[hit.id]] = hit.score, True
        channels.append(scores)
        found.append(mask)
    fused = fuse_scores(channels, found, fusion)
    ids = list(candidates)
    order = np.argsort(-fused, kind="stable")[:k]
    return [dataclasses.replace(first[ids[i]], score=float(fused[i]), rank=rank, meta=meta[ids[i]])
            for rank, i in enumerate(order.tolist(), 1)]
