"""Support-set cross-captioning (Patrick et al. 2021, §3.1.2, eq. 3).

Each caption t^i is generated from ē_v^i = Σ_{j∈S_i} softmax_j(⟨c_t^i, c_v^j⟩ / T) e_v^j, a
mixture of the videos of its support set. The variants of §3.1.2 / Fig. 2b are choices
of the attention matrix W [B_text, B_video] (rows sum to 1):

- ``identity``: S_i = {i}; W = I, plain captioning (eq. 2);
- ``full``:     S_i = the whole support set;
- ``hybrid``:   W = (W_identity + W_full) / 2;
- ``cross``:    S_i = the support set without i (the paper's default and best, Table 2).

The support set is the batch, or, with ``support_size`` k, blocks of k consecutive
samples of it (the batch order is random, so each block is a random support set;
Table 1e varies its size).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from videotext.config import ConfigError

VARIANTS = ("none", "identity", "full", "hybrid", "cross")


def support_mask(batch: int, support_size: int | None = None, device: torch.device | str = "cpu") -> Tensor:
    """[B, B] bool: True where video j is in the support set of caption i (before dropping i)."""
    if not support_size or support_size >= batch:
        return torch.ones(batch, batch, dtype=torch.bool, device=device)
    block = torch.arange(batch, device=device) // support_size  # [B]
    return block[:, None] == block[None, :]


def support_set_weights(text: Tensor, video: Tensor, variant: str = "cross", temperature: float = 0.1,
                        support_size: int | None = None) -> Tensor:
    """Attention W [B, B] of eq. 3 from text embeddings c_t [B, D] and video embeddings c_v [B, D].

    Rows are captions, columns the videos they are reconstructed from; pair i ↔ i is the
    own video. A cross row whose support set holds only i itself is all zero (no support).
    """
    if variant not in VARIANTS or variant == "none":
        raise ConfigError(f"support-set variant: expected one of {list(VARIANTS[1:])}, got {variant!r}")
    batch = text.shape[0]
    eye = torch.eye(batch, dtype=torch.bool, device=text.device)
    if variant == "identity":
        return eye.to(text.dtype)
    logits = (text @ video.T) / temperature  # [B, B]
    allowed = support_mask(batch, support_size, text.device)
    if variant == "cross":
        allowed = allowed & ~eye
    weights = logits.masked_fill(~allowed, float("-inf")).softmax(dim=1)
    weights = torch.nan_to_num(weights, nan=0.0)  # rows with no support (cross, support_size 1)
    if variant == "hybrid":
        weights = 0.5 * (weights + eye.to(weights.dtype))
    return weights


def mix_support_set(weights: Tensor, memory: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """ē_v = W e_v: weights [B, B], memory e_v [B, M, D] (zero where padded), mask [B, M] →
    (mixed memory [B, M, D], mask [B, M]: a step is real if any weighted video has it)."""
    mixed = torch.einsum("ij,jmd->imd", weights, memory * mask.unsqueeze(-1))
    mixed_mask = ((weights > 0).to(memory.dtype) @ mask.to(memory.dtype)) > 0  # [B, M]
    mixed_mask[:, 0] |= ~mixed_mask.any(1)  # never an all-masked memory (attention NaN)
    return mixed, mixed_mask


def caption_loss(logits: Tensor, targets: Tensor, pad_id: int) -> Tensor:
    """Mean token negative log-likelihood (eq. 2-3, averaged per token as the HF T5 loss is):
    logits [B, L, V] predicting targets [B, L]; `pad_id` positions are ignored."""
    return F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=pad_id)
