"""Masked pooling over a time (or token) axis: the one implementation every method uses.

`masked_pool(x, mask, "mean" | "max")` pools [B, T, D] over the valid steps of mask [B, T].
One rule for a row with no valid step (a video without any feature of an expert, an empty
clip): its pooled vector is 0 in both modes, never -inf, a fill value or NaN, so it adds
nothing to a sum, a projection or a norm downstream. Mean divides by the number of valid steps;
max ignores padded steps whatever values they hold.
"""
from __future__ import annotations

import torch

from videotext.errors import VideoTextError

POOLING = ("mean", "max")


def masked_pool(x: torch.Tensor, mask: torch.Tensor, how: str = "mean") -> torch.Tensor:
    """[B, T, D] features and [B, T] valid mask → [B, D]; rows with no valid step give 0."""
    valid = mask.to(torch.bool).unsqueeze(-1)  # [B, T, 1]
    if how == "mean":
        weights = valid.to(x.dtype)
        return (x * weights).sum(1) / weights.sum(1).clamp_min(1)
    if how == "max":
        pooled = x.masked_fill(~valid, float("-inf")).amax(1)  # [B, D]
        return torch.where(valid.any(1), pooled, torch.zeros_like(pooled))
    raise VideoTextError(f"pooling {how!r}: expected one of {', '.join(POOLING)}")
