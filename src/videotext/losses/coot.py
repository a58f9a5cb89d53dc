"""COOT losses (Ging et al. 2020): alignment (eq. 1–2), cluster (eq. 3) and
cross-modal cycle consistency (eq. 6–8).

The cosine-distance hinge of eq. 1, ``max(0, α + D(x, y) − D(x', y))`` with
``D = 1 − cos``, equals ``max(0, α − s_xy + s_x'y)`` on cosine similarities, i.e. the
bidirectional max-margin ranking loss over every non-matching pair of the batch; it is
`videotext.losses.ranking.max_margin_ranking` on ``x̂ @ ŷᵀ``, not a second version.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from videotext.losses.ranking import max_margin_ranking


def alignment_loss(x: Tensor, y: Tensor, margin: float = 0.2, normalise: str = "entries") -> Tensor:
    """Eq. 1–2: hinge on cosine distances, all non-matching pairs of the batch as negatives.

    x, y: [N, D] with row i of x matching row i of y (clips/sentences, videos/paragraphs or
    global contexts). margin 0.2 (§4 "Training"). ``normalise="entries"`` divides by N²
    as the official ``ContrastiveLoss``; eq. 2 itself is a plain sum ("sum").
    """
    sims = F.normalize(x, dim=-1) @ F.normalize(y, dim=-1).T  # [N, N] cosine similarity
    if normalise == "sum":
        return max_margin_ranking(sims, margin, normalise="entries")["loss"] * sims.numel()
    return max_margin_ranking(sims, margin, normalise=normalise)["loss"]


def cluster_loss(x: Tensor, y: Tensor, margin: float = 0.2, normalise: str = "entries") -> Tensor:
    """Eq. 3: push apart different embeddings within each modality.

    The positive pair is (1, 1), so its distance is 0 and each term is
    ``max(0, γ − D(x_i, x_j))`` for i ≠ j; averaged over the two modalities as in the
    official code (``(L(v, v) + L(t, t)) / 2``, both hinge directions each).
    """
    return (_self_hinge(x, margin, normalise) + _self_hinge(y, margin, normalise)) / 2


def _self_hinge(x: Tensor, margin: float, normalise: str) -> Tensor:
    unit = F.normalize(x, dim=-1)
    sims = unit @ unit.T  # [N, N]
    eye = torch.eye(len(x), dtype=torch.bool, device=x.device)
    sims = torch.where(eye, torch.ones_like(sims), sims)  # D(1, 1) = 0: the positive is exact
    if normalise == "sum":
        return max_margin_ranking(sims, margin, positives=eye, normalise="entries")["loss"] * sims.numel()
    return max_margin_ranking(sims, margin, positives=eye, normalise=normalise)["loss"]


def cycle_index_error(
    start: Tensor, start_mask: Tensor, other: Tensor, other_mask: Tensor,
    distance: str = "sum", samples: int = 0,
) -> Tensor:
    """One cycle of eq. 6–8: start_i → soft nearest neighbour in `other` → soft location μ
    back in `start`; returns (i − μ)² averaged over each sequence's valid (or sampled)
    starts, then over the sequences (eq. 8 is per sequence; the official
    CycleConsistencyLoss averages so too, so a long sequence weighs as much as a short one).

    start: [B, M, D], other: [B, N, D], masks [B, M] / [B, N] with True = real element.
    distance: "sum" of squared differences (eq. 6–7, ‖·‖²) or "mean" (official code).
    samples: start positions drawn per sequence (§4: 1 works best); 0 = every position.
    """
    neg = torch.finfo(start.dtype).min
    reduce = (lambda d: d.sum(-1)) if distance == "sum" else (lambda d: d.mean(-1))
    d_so = reduce((start.unsqueeze(2) - other.unsqueeze(1)) ** 2)  # [B, M, N]
    alpha = torch.softmax(d_so.neg().masked_fill(~other_mask.unsqueeze(1), neg), dim=-1)  # eq. 6
    soft_nn = alpha @ other  # [B, M, D]
    d_back = reduce((soft_nn.unsqueeze(2) - start.unsqueeze(1)) ** 2)  # [B, M, M]
    beta = torch.softmax(d_back.neg().masked_fill(~start_mask.unsqueeze(1), neg), dim=-1)  # eq. 7
    positions = torch.arange(start.shape[1], device=start.device, dtype=start.dtype)  # [M]
    mu = beta @ positions  # [B, M]
    error = (positions.unsqueeze(0) - mu) ** 2  # eq. 8, [B, M]
    valid = start_mask & other_mask.any(1, keepdim=True)  # a cycle needs both sequences
    if samples > 0:
        weights = valid.float() + (~valid.any(1, keepdim=True)).float()  # rows with no valid start: any
        picks = torch.multinomial(weights, samples, replacement=True)  # [B, samples]
        chosen = torch.zeros_like(valid).scatter_(1, picks, True)
        valid = valid & chosen
    counts = valid.sum(1)  # [B] starts per sequence
    used = counts > 0  # sequences with a cycle
    if not used.any():
        return start.new_zeros(())
    per_sequence = torch.where(valid, error, torch.zeros_like(error)).sum(1)[used] / counts[used]  # [B']
    return per_sequence.mean()


def cycle_consistency_loss(
    clips: Tensor, clip_mask: Tensor, sentences: Tensor, sentence_mask: Tensor,
    distance: str = "sum", samples: int = 0,
) -> Tensor:
    """Eq. 8 in both directions (§3: "the final ℓ_CMC includes both cycles")."""
    text_cycle = cycle_index_error(sentences, sentence_mask, clips, clip_mask, distance, samples)
    video_cycle = cycle_index_error(clips, clip_mask, sentences, sentence_mask, distance, samples)
    return text_cycle + video_cycle
