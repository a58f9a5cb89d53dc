"""ToCo's cross-modal fusion encoder and its two scorers (ToCo §3.2–3.3, Fig. 2).

`VideoEncoder` is the 2-layer video transformer that turns the projected feature tokens
into x̂ (Table 2's "2-2": two video layers, two cross layers). `FusionEncoder` runs a
BERT-style (post-LN) self-attention stack over ``[CLS] + video tokens x̂ + text tokens
ŷ``; `ScoreMLP` is the two-layer perceptron that turns the [CLS] output into the global
score f(x, y), or a text token's contextual output concatenated with its input embedding
into the token score f^t(x, y; y^k). `copy_bert_layers` initialises fusion layers from a
pre-trained HF BERT's layers.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class FusionLayer(nn.Module):
    """One transformer layer; attention by `scaled_dot_product_attention`.

    Post-LN (BERT): LN(x + MHA(x)), LN(x + FFN(x)); pre-LN: x + MHA(LN(x)), x + FFN(LN(x)),
    which trains from scratch without a long warm-up.
    """

    def __init__(self, dim: int, heads: int, ff_dim: int, dropout: float, pre_norm: bool = False):
        super().__init__()
        self.pre_norm = pre_norm
        if dim % heads:
            raise ValueError(f"fusion width {dim} is not divisible by {heads} heads")
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, ff_dim), nn.GELU(), nn.Linear(ff_dim, dim))
        self.norm2 = nn.LayerNorm(dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """x [P, S, D], keep [P, S] (True = real token) → [P, S, D]."""
        if self.pre_norm:
            x = x + self.drop(self.attend(self.norm1(x), keep))
            return x + self.drop(self.ffn(self.norm2(x)))
        x = self.norm1(x + self.drop(self.attend(x, keep)))
        return self.norm2(x + self.drop(self.ffn(x)))

    def attend(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, dim // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [P, H, S, D/H]
        attn = F.scaled_dot_product_attention(
            q, k, v, attn_mask=keep[:, None, None, :], dropout_p=self.dropout if self.training else 0.0
        )  # [P, H, S, D/H]
        return self.out(attn.transpose(1, 2).reshape(batch, length, dim))


class FusionEncoder(nn.Module):
    """[CLS] + video + text tokens → contextual outputs; modality and video-time embeddings added.

    Text tokens arrive with their own positions (BERT's embedding layer adds them);
    video tokens get a learned temporal position, up to `max_video_tokens` (§4.2: 48).
    """

    def __init__(self, dim: int, depth: int, heads: int, ff_dim: int, dropout: float, max_video_tokens: int,
                 pre_norm: bool = False):
        super().__init__()
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.modality = nn.Embedding(3, dim)  # 0 [CLS], 1 video, 2 text
        self.video_position = nn.Embedding(max_video_tokens, dim)
        self.norm = nn.LayerNorm(dim)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(FusionLayer(dim, heads, ff_dim, dropout, pre_norm) for _ in range(depth))
        self.final_norm = nn.LayerNorm(dim) if pre_norm else nn.Identity()
        for table in (self.cls, self.modality.weight, self.video_position.weight):
            nn.init.normal_(table, std=0.02)  # BERT's init: small next to the projected features

    def forward(self, video: torch.Tensor, video_mask: torch.Tensor, text: torch.Tensor,
                text_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """video [P, M, D], text [P, N, D], masks True = real → ([CLS] out [P, D], text out [P, N, D])."""
        pairs, m = video.shape[:2]
        positions = torch.arange(m, device=video.device)
        video = video + self.video_position(positions) + self.modality.weight[1]
        text = text + self.modality.weight[2]
        cls = (self.cls + self.modality.weight[0]).expand(pairs, 1, -1)
        x = self.drop(self.norm(torch.cat([cls, video, text], dim=1)))  # [P, 1+M+N, D]
        keep = torch.cat([video_mask.new_ones(pairs, 1), video_mask, text_mask], dim=1)  # [P, 1+M+N]
        for layer in self.layers:
            x = layer(x, keep)
        x = self.final_norm(x)
        return x[:, 0], x[:, 1 + m :]


class VideoEncoder(nn.Module):
    """Video tokens [P, M, D] → contextual video tokens x̂ [P, M, D]: learned temporal positions,
    LayerNorm, then `depth` post-LN self-attention layers over the real tokens (padding stays 0)."""

    def __init__(self, dim: int, depth: int, heads: int, ff_dim: int, dropout: float, max_video_tokens: int,
                 pre_norm: bool = False):
        super().__init__()
        self.position = nn.Embedding(max_video_tokens, dim)
        self.norm = nn.LayerNorm(dim)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(FusionLayer(dim, heads, ff_dim, dropout, pre_norm) for _ in range(depth))
        self.final_norm = nn.LayerNorm(dim) if pre_norm else nn.Identity()
        nn.init.normal_(self.position.weight, std=0.02)

    def forward(self, tokens: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """tokens [P, M, D], keep [P, M] (True = real) → [P, M, D], zero where not kept."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.drop(self.norm(tokens + self.position(positions)))
        # a video with no token would give an all-masked attention row (NaN): let it see itself
        attend = keep | ~keep.any(1, keepdim=True)
        for layer in self.layers:
            x = layer(x, attend)
        return self.final_norm(x) * keep.unsqueeze(-1).to(x.dtype)


def copy_bert_layers(layers: nn.ModuleList, bert_layers: nn.ModuleList) -> None:
    """Load HF BERT layers (q/k/v, attention output + LayerNorm, intermediate, output + LayerNorm)
    into post-LN `FusionLayer`s of the same width, heads and FFN size, one to one."""
    if len(layers) != len(bert_layers):
        raise ValueError(f"copy_bert_layers: {len(layers)} fusion layers, {len(bert_layers)} BERT layers")
    with torch.no_grad():
        for ours, theirs in zip(layers, bert_layers):
            attention = theirs.attention
            q, k, v = attention.self.query, attention.self.key, attention.self.value
            ours.qkv.weight.copy_(torch.cat([q.weight, k.weight, v.weight]))  # [3D, D]
            ours.qkv.bias.copy_(torch.cat([q.bias, k.bias, v.bias]))
            pairs = [(ours.out, attention.output.dense), (ours.norm1, attention.output.LayerNorm),
                     (ours.ffn[0], theirs.intermediate.dense), (ours.ffn[2], theirs.output.dense),
                     (ours.norm2, theirs.output.LayerNorm)]
            for mine, source in pairs:
                mine.weight.copy_(source.weight)
                mine.bias.copy_(source.bias)
                if isinstance(mine, nn.LayerNorm):
                    mine.eps = source.eps  # BERT: 1e-12


class ScoreMLP(nn.Module):
    """Two-layer perceptron → one scalar per input row (§3.2 f, §3.3 f^t)."""

    def __init__(self, in_dim: int, hidden: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.GELU(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)  # [...]
