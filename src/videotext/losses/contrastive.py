"""Symmetric InfoNCE on a text × video similarity matrix (Frozen in Time, eq. 2–3).

Conventions shared by every loss in `videotext.losses`:

- ``sims`` is ``[B_text, B_video]``: rows are captions (queries of text→video), columns
  are videos. Higher is more similar.
- ``positives`` is an optional boolean ``[B_text, B_video]`` mask of matching pairs; the
  default is the identity (caption i describes video i), which needs a square matrix.
  Use a mask when a batch holds several captions of one video, or the same video twice.
- An entry marked positive is **never a negative** of any anchor. Each positive pair is
  scored against the negatives of its own row (text→video) and of its own column
  (video→text) only; other positives of that row/column neither help nor hurt it.
- Every loss is normalised per positive pair (the papers' ``1/B``); with the identity
  mask this is exactly the paper's formula.
- float16 / bfloat16 inputs are computed in float32 (the result is float32), so the
  losses are safe under autocast; float32 and float64 stay as they are.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from videotext.config import ConfigError


def check_similarity(sims: Tensor, positives: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Validate ``sims [B_text, B_video]`` and return it with a boolean ``positives`` mask.

    Half-precision similarities are upcast to float32. Raises ``ValueError`` for a bad
    shape, a non-square matrix without a mask, or a mask without any positive pair.
    """
    if not isinstance(sims, Tensor) or sims.ndim != 2:
        shape = tuple(sims.shape) if isinstance(sims, Tensor) else type(sims).__name__
        raise ValueError(f"sims: expected a 2-D tensor [B_text, B_video], got {shape}")
    if not sims.is_floating_point():
        raise TypeError(f"sims: expected a floating-point tensor, got {sims.dtype}")
    if sims.dtype in (torch.float16, torch.bfloat16):
        sims = sims.float()
    n_text, n_video = sims.shape
    if positives is None:
        if n_text != n_video:
            raise ValueError(
                f"sims is {n_text}x{n_video}: a non-square similarity matrix needs an explicit "
                "`positives` mask [B_text, B_video]"
            )
        positives = torch.eye(n_text, dtype=torch.bool, device=sims.device)
    else:
        positives = torch.as_tensor(positives, device=sims.device)
        if tuple(positives.shape) != (n_text, n_video):
            raise ValueError(
                f"positives: expected shape {(n_text, n_video)} like sims, got {tuple(positives.shape)}"
            )
        positives = positives.bool()
    if not bool(positives.any()):
        raise ValueError("positives: the mask has no positive pair")
    return sims, positives


def info_nce(
    sims: Tensor,
    temperature: float | Tensor = 0.05,
    positives: Tensor | None = None,
    reduction: str = "sum",
) -> dict[str, Tensor]:
    """Symmetric InfoNCE of Frozen in Time (§3.2 "Loss", eq. 2–3), σ = 0.05 (§4.3).

    ``sims`` are cosine similarities ``[B_text, B_video]``; they are divided by σ. For
    each positive pair (t, v)::

        t2v(t, v) = -log( e^{s_tv/σ} / (e^{s_tv/σ} + Σ_{v' neg of t} e^{s_tv'/σ}) )
        v2t(t, v) = -log( e^{s_tv/σ} / (e^{s_tv/σ} + Σ_{t' neg of v} e^{s_t'v/σ}) )

    each averaged over the positive pairs (the paper's 1/B). Extra positives are left
    out of the denominators, so a duplicated video or a second caption of the same
    video is never pushed away. With the identity mask this is exactly eq. 2–3.

    ``reduction="sum"`` (default) returns ``loss = t2v + v2t``: the paper "minimise[s]
    the sum of two losses, video-to-text and text-to-video", and the official
    ``NormSoftmaxLoss`` also returns the sum. ``"mean"`` halves it (CLIP's convention).
    Returns ``{"loss", "t2v", "v2t"}``.
    """
    if reduction not in ("sum", "mean"):
        raise ConfigError(f"info_nce: reduction must be 'sum' or 'mean', got {reduction!r}")
    sims, positives = check_similarity(sims, positives)
    logits = sims / temperature  # [T, V]
    text_idx, video_idx = positives.nonzero(as_tuple=True)  # [P], [P]
    pos_logits = logits[text_idx, video_idx]  # [P]
    negatives_only = logits.masked_fill(positives, float("-inf"))  # [T, V]
    # log Σ over the negatives of each row / column; -inf where there is none.
    row_lse = torch.logsumexp(negatives_only, dim=1)  # [T]
    col_lse = torch.logsumexp(negatives_only, dim=0)  # [V]
    # -log(e^a / (e^a + e^b)) = softplus(b - a): stable, and 0 when there is no negative.
    t2v = F.softplus(row_lse[text_idx] - pos_logits).mean()
    v2t = F.softplus(col_lse[video_idx] - pos_logits).mean()
    loss = t2v + v2t
    if reduction == "mean":
        loss = loss / 2
    return {"loss": loss, "t2v": t2v, "v2t": v2t}
