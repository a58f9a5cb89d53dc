"""Gated embedding unit (Miech et al. 2018, "Learning a text-video embedding from
incomplete and heterogeneous data"), used by MMT §3.2 to map one caption vector into
each expert's space.

    GEU(x) = L2norm(ContextGating(W1 x + b1)),   ContextGating(y) = y ⊙ σ(BN(W2 y + b2))

Parameter names (`fc`, `cg.fc`, `cg.batch_norm`) follow the official MMT code so its
checkpoints load by name.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ContextGating(nn.Module):
    """y ⊙ sigmoid(BN(fc(y))): a learned, input-dependent gate per channel."""

    def __init__(self, dim: int, batch_norm: bool = True):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.batch_norm = nn.BatchNorm1d(dim) if batch_norm else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, D] → [B, D]
        return x * torch.sigmoid(self.batch_norm(self.fc(x)))


class GatedEmbeddingUnit(nn.Module):
    """Linear projection, context gating, then L2 normalisation: [B, D_in] → [B, D_out]."""

    def __init__(self, in_dim: int, out_dim: int, batch_norm: bool = True, normalize: bool = True):
        super().__init__()
        self.fc = nn.Linear(in_dim, out_dim)
        self.cg = ContextGating(out_dim, batch_norm)
        self.normalize = normalize

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cg(self.fc(x))
        return F.normalize(x, dim=-1) if self.normalize else x
