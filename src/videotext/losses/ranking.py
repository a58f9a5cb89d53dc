"""Hinge ranking losses on a text × video similarity matrix: MMT's bidirectional
max-margin ranking loss (eq. 8) and Support-set's hardest-negative triplet loss (eq. 1).

Shapes, the ``positives`` mask and dtype handling follow `videotext.losses.contrastive`:
rows are captions, columns are videos, positives default to the identity, and an entry
marked positive is never used as a negative.
"""
from __future__ import annotations

import torch
from torch import Tensor

from videotext.config import ConfigError
from videotext.losses.contrastive import check_similarity

NORMALISATIONS = ("positives", "terms", "entries")


def max_margin_ranking(
    sims: Tensor,
    margin: float = 0.05,
    positives: Tensor | None = None,
    normalise: str = "positives",
) -> dict[str, Tensor]:
    """Bidirectional max-margin ranking loss of MMT (§3.4, eq. 8), margin 0.05 (§4.2).

    For each positive pair (t, v), the hinge ``[m + s_neg - s_tv]_+`` is summed over
    every negative video of caption t (``t2v``) and every negative caption of video v
    (``v2t``). The sums are divided according to ``normalise``:

    - ``"positives"`` (default, the paper): by the number of positive pairs, i.e.
      ``L = 1/B Σ_i Σ_{j≠i} [max(0, s_ij - s_ii + m) + max(0, s_ji - s_ii + m)]``;
    - ``"terms"``: by the number of hinge terms, 2B(B-1) with the identity mask — what
      the official MMT ``MaxMarginRankingLoss(fix_norm=True)`` computes;
    - ``"entries"``: by ``B_text * B_video`` — the official COOT ``ContrastiveLoss``.

    ``loss = t2v + v2t`` in every case. Returns ``{"loss", "t2v", "v2t"}``.
    """
    if normalise not in NORMALISATIONS:
        raise ConfigError(f"max_margin_ranking: normalise must be one of {list(NORMALISATIONS)}, got {normalise!r}")
    sims, positives = check_similarity(sims, positives)
    text_idx, video_idx = positives.nonzero(as_tuple=True)  # [P], [P]
    pos = sims[text_idx, video_idx]  # [P]
    zero = sims.new_zeros(())

    row = sims[text_idx]  # [P, V]: caption t against every video
    row_neg = ~positives[text_idx]  # [P, V]
    t2v_sum = torch.where(row_neg, (margin + row - pos[:, None]).clamp_min(0), zero).sum()

    col = sims[:, video_idx].T  # [P, T]: video v against every caption
    col_neg = ~positives[:, video_idx].T  # [P, T]
    v2t_sum = torch.where(col_neg, (margin + col - pos[:, None]).clamp_min(0), zero).sum()

    if normalise == "positives":
        denom: float | Tensor = float(pos.numel())
    elif normalise == "terms":
        denom = (row_neg.sum() + col_neg.sum()).clamp_min(1).to(sims.dtype)
    else:
        denom = float(sims.numel())
    t2v, v2t = t2v_sum / denom, v2t_sum / denom
    return {"loss": t2v + v2t, "t2v": t2v, "v2t": v2t}


def hardest_negative_triplet(
    sims: Tensor,
    margin: float = 0.2,
    positives: Tensor | None = None,
) -> dict[str, Tensor]:
    """Hinge triplet loss with the hardest negative (VSE++ max violation), Support-set eq. 1.

    ``L = 1/B Σ_i ( max_j [α - s_ii + s_ij]_+ + max_j [α - s_ii + s_ji]_+ )`` with
    α = 0.2 (§3.1.1), where j runs over the negatives of caption i (``t2v``) and of
    video i (``v2t``). The diagonal itself is excluded from the max, as in VSE++ (with
    it, every term would be at least α). A positive pair with no negative contributes 0.
    Each direction is averaged over the positive pairs; ``loss = t2v + v2t`` as in eq. 1.
    Returns ``{"loss", "t2v", "v2t"}``.
    """
    sims, positives = check_similarity(sims, positives)
    text_idx, video_idx = positives.nonzero(as_tuple=True)  # [P], [P]
    pos = sims[text_idx, video_idx]  # [P]
    negatives_only = sims.masked_fill(positives, float("-inf"))  # [T, V]
    hardest_video = negatives_only.max(dim=1).values  # [T]: hardest negative video per caption
    hardest_text = negatives_only.max(dim=0).values  # [V]: hardest negative caption per video
    t2v = (margin + hardest_video[text_idx] - pos).clamp_min(0).mean()
    v2t = (margin + hardest_text[video_idx] - pos).clamp_min(0).mean()
    return {"loss": t2v + v2t, "t2v": t2v, "v2t": v2t}
