"""Transformer pooling head of Support-set (Patrick et al. 2021, §3.2 eq. 4, appendix 6.1, Fig. 4).

    c = first(ψ_2(ψ_1(f(e))))       ψ(x) = BN(FFN(x_attn) + x_attn),  x_attn = BN(MHA(x) + x)

`f` is a pre-encoder (a multi-kernel temporal 1D CNN for video, a bidirectional GRU for
text, or a one-layer MLP); it runs once, before the first layer (Fig. 4 draws one
pre-encoder per head). Sequences are padded, so every piece here takes a `mask`
(True = real step): attention ignores padded keys and BatchNorm computes its statistics
over the real steps only, so padding never changes a result.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn


class MaskedBatchNorm(nn.BatchNorm1d):
    """BatchNorm1d over the channel axis of [B, L, D], using only the real (unmasked) steps."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        out = torch.zeros_like(x)
        out[mask] = super().forward(x[mask])  # [N_real, D]
        return out


class TransformerPoolingLayer(nn.Module):
    """One layer of eq. 4: MHA and FFN sublayers, each with a residual and BatchNorm (post-norm)."""

    def __init__(self, dim: int, heads: int = 4, ffn_dim: int = 2048, dropout: float = 0.3):
        super().__init__()
        self.attention = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
        self.norm_attention = MaskedBatchNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn_dim), nn.ReLU(), nn.Dropout(dropout), nn.Linear(ffn_dim, dim))
        self.norm_ffn = MaskedBatchNorm(dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x [B, L, D], mask [B, L] (True = real; every row needs one real step) → [B, L, D]."""
        attended, _ = self.attention(x, x, x, key_padding_mask=~mask, need_weights=False)
        x = self.norm_attention(self.dropout(attended) + x, mask)  # e_attn
        return self.norm_ffn(self.dropout(self.ffn(x)) + x, mask)


class TemporalCNN(nn.Module):
    """Pre-encoder f for video: parallel 1D convolutions with several kernel sizes (appendix 6.1:
    [2, 3, 4, 6], after Dong et al. 2019), concatenated along channels, ReLU; the length is kept."""

    def __init__(self, in_dim: int, out_dim: int, kernels: Sequence[int] = (2, 3, 4, 6), dropout: float = 0.0):
        super().__init__()
        if out_dim % len(kernels):
            raise ValueError(f"TemporalCNN: out_dim {out_dim} is not divisible by {len(kernels)} kernels")
        self.kernels = list(kernels)
        self.convs = nn.ModuleList(nn.Conv1d(in_dim, out_dim // len(kernels), k) for k in self.kernels)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x [B, L, D_in], mask [B, L] → [B, L, D_out]; padded steps are zero on the way in."""
        x = (x * mask.unsqueeze(-1)).transpose(1, 2)  # [B, D_in, L]
        outs = []
        for k, conv in zip(self.kernels, self.convs):
            left = (k - 1) // 2  # "same" length for odd and even kernels
            outs.append(conv(F.pad(x, (left, k - 1 - left))))  # [B, D_out/K, L]
        return self.dropout(F.relu(torch.cat(outs, dim=1).transpose(1, 2)))  # [B, L, D_out]


class MLPPreEncoder(nn.Module):
    """Pre-encoder f as a one-layer MLP to the d-dimensional space (appendix 6.1)."""

    def __init__(self, in_dim: int, out_dim: int, dropout: float = 0.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, out_dim), nn.ReLU(), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # [B, L, D_out]


class BiGRUPreEncoder(nn.Module):
    """Pre-encoder f for text: a bidirectional GRU whose two directions concatenate to `out_dim`
    (appendix 6.1: a 1024-d bi-GRU); padded tokens are skipped with packed sequences."""

    def __init__(self, in_dim: int, out_dim: int, dropout: float = 0.0):
        super().__init__()
        if out_dim % 2:
            raise ValueError(f"BiGRUPreEncoder: out_dim {out_dim} must be even (two directions)")
        self.gru = nn.GRU(in_dim, out_dim // 2, batch_first=True, bidirectional=True)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        lengths = mask.sum(1).clamp_min(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.gru(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        return self.dropout(out)  # [B, L, D_out]


class TransformerPoolingHead(nn.Module):
    """Ψ'' / Φ'': pre-encoder, then `layers` pooling layers; returns (first vector c, sequence).

    The paper takes the first output vector as the summary c (§3.2): for text it sits on
    the [CLS] token, for video on the first time step.
    """

    def __init__(self, pre_encoder: nn.Module, dim: int, layers: int = 2, heads: int = 4,
                 ffn_dim: int = 2048, dropout: float = 0.3):
        super().__init__()
        self.pre_encoder = pre_encoder
        self.layers = nn.ModuleList(TransformerPoolingLayer(dim, heads, ffn_dim, dropout) for _ in range(layers))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, L, D_in], mask [B, L] → (c [B, D], contextualised sequence [B, L, D])."""
        mask = mask.clone()
        mask[:, 0] = True  # an empty sequence still has a (zero) first step to summarise
        x = self.pre_encoder(x, mask)
        for layer in self.layers:
            x = layer(x, mask)
        return x[:, 0], x
