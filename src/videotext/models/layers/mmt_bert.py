"""The video encoder of MMT (§3.1): a BERT-style post-LN transformer over feature tokens.

Unlike a text BERT it has no word embeddings: each token's input is its projected expert
feature plus an expert (token-type) embedding and a temporal (position) embedding,
then LayerNorm and dropout (§3.1, eq. 1: Ω = F + E + T). Module and parameter names
mirror the official `gabeur/mmt` `model/bert.py` (`embeddings.position_embeddings`,
`encoder.layer.N.attention.self.query`, lower-case `layer_norm` …) so a converted
checkpoint loads by name.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

MASK_VALUE = -10000.0  # additive attention mask of BERT (official bert.py); ≈ -inf after softmax


class MMTEmbeddings(nn.Module):
    """features [B, L, D] + token_type_embeddings[types] + position_embeddings[positions] → LN → dropout."""

    def __init__(self, dim: int, num_positions: int, num_types: int, dropout: float, eps: float = 1e-12):
        super().__init__()
        self.position_embeddings = nn.Embedding(num_positions, dim)
        self.token_type_embeddings = nn.Embedding(num_types, dim)
        self.layer_norm = nn.LayerNorm(dim, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, features: torch.Tensor, types: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = features + self.token_type_embeddings(types) + self.position_embeddings(positions)
        return self.dropout(self.layer_norm(x))


class _SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.query, self.key, self.value = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, length, dim = x.shape
        split = lambda t: t.view(b, length, self.heads, dim // self.heads).transpose(1, 2)  # [B, H, L, d]
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=self.dropout if self.training else 0.0)
        return out.transpose(1, 2).reshape(b, length, dim)


class _Output(nn.Module):
    """dense → dropout → LayerNorm(· + residual) (post-LN, as BERT)."""

    def __init__(self, in_dim: int, dim: int, dropout: float, eps: float):
        super().__init__()
        self.dense = nn.Linear(in_dim, dim)
        self.layer_norm = nn.LayerNorm(dim, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.layer_norm(self.dropout(self.dense(x)) + residual)


class _Attention(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float, eps: float):
        super().__init__()
        self.self = _SelfAttention(dim, heads, dropout)
        self.output = _Output(dim, dim, dropout, eps)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(x, bias), x)


class _Intermediate(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.dense = nn.Linear(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(x))  # exact erf GELU, as the official bert.py


class MMTLayer(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int, dropout: float, eps: float = 1e-12):
        super().__init__()
        self.attention = _Attention(dim, heads, dropout, eps)
        self.intermediate = _Intermediate(dim, hidden)
        self.output = _Output(hidden, dim, dropout, eps)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        x = self.attention(x, bias)
        return self.output(self.intermediate(x), x)


class _Encoder(nn.Module):
    def __init__(self, layers: list[MMTLayer]):
        super().__init__()
        self.layer = nn.ModuleList(layers)


class MMTBert(nn.Module):
    """features [B, L, D], types/positions [B, L] long, mask [B, L] bool (True = attend) → [B, L, D]."""

    def __init__(self, dim: int, layers: int, heads: int, hidden: int, num_positions: int, num_types: int,
                 dropout: float = 0.1, eps: float = 1e-12, init_std: float = 0.02):
        super().__init__()
        if dim % heads:
            raise ValueError(f"d_model {dim} is not divisible by {heads} heads")
        self.embeddings = MMTEmbeddings(dim, num_positions, num_types, dropout, eps)
        self.encoder = _Encoder([MMTLayer(dim, heads, hidden, dropout, eps) for _ in range(layers)])
        for module in self.modules():  # BERT init: N(0, 0.02) weights, zero biases
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=init_std)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)

    def forward(self, features: torch.Tensor, types: torch.Tensor, positions: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        x = self.embeddings(features, types, positions)
        bias = (~mask).to(x.dtype)[:, None, None, :] * MASK_VALUE  # [B, 1, 1, L], keys only
        for layer in self.encoder.layer:
            x = layer(x, bias)
        return x
