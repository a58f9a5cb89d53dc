"""`coot`: COOT, Cooperative hierarchical transformer (Ging et al., NeurIPS 2020).

Two symmetric branches, each of two nets (§2):
- local net (T-Transformer + attention-aware feature aggregation, §2.2): frames of a
  clip → clip embedding ϑ_i; applied to all frames of the video it gives the global
  context g_v (the same net, shared weights). Same for words → sentence δ_i / g_p.
- global net (Contextual Transformer, §2.3): F_Local self-attention over clip
  embeddings (+ positional encoding), F_Global cross-attention with g_v as query
  (eq. 5) + FF → H_context; video embedding = concat(mean(h), H_context).

Inputs are hierarchies built by `videotext.data.hierarchy` (frame features per clip,
per-token BERT features per sentence). The official code's quirks
(gingsi/coot-videotext) are options, off by default: `layer_norm="coot"`, `positional_encoding=
"sincos_official"`, `global_pooling="avg_special"`; `videotext.convert.coot` sets them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from videotext.config import ConfigError
from videotext.data.hierarchy import (
    HierarchyBatches,
    HierarchyVideoReader,
    ParagraphTokenFeatures,
    StoredParagraphFeatures,
    hierarchy_video_batches,
    split_sentences,
)
from videotext.losses.coot import alignment_loss, cluster_loss, cycle_consistency_loss
from videotext.models.base import Method
from videotext.models.layers.pooling import POOLING, masked_pool
from videotext.models.registry import register
from videotext.text.encoder import text_config

MASK_VALUE = -32752.0  # official INF: a finite fill keeps all-padding rows finite (uniform)


@dataclass
class CootConfig:
    hidden_dim: int = 384  # §4 "Training": hidden size 384 (Table 7 attention dimension)
    num_heads: int = 8  # Table 7: attention heads 8
    ff_dim: int = 384  # Table 7: attention FF dimension 1x
    af_dim: int = 768  # Table 7: AF dimension 2x
    af_heads: int = 2  # Table 7: AF heads 2
    dropout: float = 0.025  # Table 7 (ActivityNet 2.5 %)
    local_pooling: str = "af"  # af | mean | max | cls  (Table 1 / Table 10)
    use_context: bool = True  # CoT cross-attention (Table 1 "CoT")
    positional_encoding: str = "sincos"  # sincos | sincos_official | none
    layer_norm: str = "standard"  # standard | coot (official unbiased-std LN, eps outside sqrt)
    global_pooling: str = "mean"  # mean (§2.3, masked) | avg_special (official, supp. Table 11)
    frame_noise: float = 0.0  # Gaussian noise std on frame features in training (Table 7)
    max_frames: int = 80  # §4 "Video encoding": up to 80 frames per clip / video
    min_clip_frames: int = 1  # ActivityNet: 10 (supp. "Preprocessing")
    standardise_experts: bool = True  # z-score each expert per step before concatenating (ours:
    # the paper has one feature type, for which this is undone by the input LayerNorm)
    text_model: str = ""  # BERT-family folder; "" = bundled all-MiniLM-L6-v2
    text_layers: int = 2  # §4 "Text encoding": last 2 layers, concatenated
    text_feature_dim: int = 0  # 0 = text_layers × hidden size of text_model
    max_text_tokens: int = 512  # word pieces per paragraph
    text_features: str = ""  # FeatureStore expert of precomputed paragraph token features ("" = run the model)
    margin: float = 0.2  # §4: α = α_g = β = γ = η = 0.2
    loss_normalise: str = "entries"  # entries (official, ÷N²) | positives | sum (eq. 2 literally)
    cmc_weight: float = 0.01  # λ: 0.01 ActivityNet, 0.001 YouCook2 (supp.)
    cmc_distance: str = "sum"  # sum (eq. 6–7 ‖·‖²) | mean (official)
    cmc_samples: int = 1  # §4: 1 clip per video and 1 sentence per paragraph; 0 = all
    init_std: float = 0.01  # supp.: truncated normal, std 0.01, redraw beyond 2 std


# --- layers -------------------------------------------------------------------------
class CootLayerNorm(nn.Module):
    """LayerNorm; style "coot" is the official variant: gain·(x−mean)/(std_unbiased+eps)+bias."""

    def __init__(self, dim: int, style: str = "standard", eps: float | None = None):
        super().__init__()
        if style not in ("standard", "coot"):
            raise ConfigError(f"model.layer_norm: expected standard or coot, got {style!r}")
        self.style = style
        self.eps = eps if eps is not None else (1e-6 if style == "coot" else 1e-5)
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.style == "standard":
            return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)
        mean = x.mean(-1, keepdim=True)
        return self.weight * (x - mean) / (x.std(-1, keepdim=True) + self.eps) + self.bias


def sincos_table(length: int, dim: int, style: str = "sincos") -> torch.Tensor:
    """[length, dim] sinusoidal table: Vaswani et al., or the official variant whose
    divisor uses every channel index d (10000^(2d/dim)) instead of 2·(d//2)."""
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    channel = torch.arange(dim, dtype=torch.float32)
    exponent = 2 * channel if style == "sincos_official" else 2 * torch.div(channel, 2, rounding_mode="floor")
    angle = position / (10000 ** (exponent / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(angle[:, 0::2])
    table[:, 1::2] = torch.cos(angle[:, 1::2])
    return table


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention with q/k/v/out projections; mask True = real key."""

    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        if dim % heads:
            raise ConfigError(f"model.hidden_dim={dim} is not divisible by num_heads={heads}")
        self.heads = heads
        self.query, self.key, self.value, self.out = (nn.Linear(dim, dim) for _ in range(4))
        self.dropout = nn.Dropout(dropout)

    def forward(self, query: torch.Tensor, keys: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        b, lq, d = query.shape
        lk, h = keys.shape[1], self.heads
        q = self.query(query).view(b, lq, h, d // h).transpose(1, 2)  # [B, H, Lq, d]
        k = self.key(keys).view(b, lk, h, d // h).transpose(1, 2)  # [B, H, Lk, d]
        v = self.value(keys).view(b, lk, h, d // h).transpose(1, 2)
        scores = q @ k.transpose(2, 3) / math.sqrt(d // h)  # [B, H, Lq, Lk]
        scores = scores.masked_fill(~key_mask[:, None, None, :], MASK_VALUE)
        context = self.dropout(scores.softmax(-1)) @ v  # [B, H, Lq, d]
        return self.out(context.transpose(1, 2).reshape(b, lq, d))


class AttentionLayer(nn.Module):
    """Post-norm transformer layer: LN(q + Attn(q, kv)) → dropout → LN(y + FF(y)).

    Self-attention when kv is q (F_Local, T-Transformer); cross-attention with the
    global context as the one query for F_Global (eq. 5)."""

    def __init__(self, dim: int, heads: int, ff_dim: int, dropout: float, norm: str):
        super().__init__()
        self.attention = MultiHeadAttention(dim, heads, dropout)
        self.norm1 = CootLayerNorm(dim, norm)
        self.dropout = nn.Dropout(dropout)
        # official order: Linear → Dropout → GELU → Linear → Dropout
        self.ff = nn.Sequential(nn.Linear(dim, ff_dim), nn.Dropout(dropout), nn.GELU(),
                                nn.Linear(ff_dim, dim), nn.Dropout(dropout))
        self.norm2 = CootLayerNorm(dim, norm)

    def forward(self, query: torch.Tensor, keys: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        x = self.dropout(self.norm1(query + self.attention(query, keys, key_mask)))
        return self.norm2(x + self.ff(x))


class AttentionPool(nn.Module):
    """Attention-aware feature aggregation (eq. 4), multi-head.

    Head h: A_h = softmax_t(W2_h · GELU(W1_h x_t + b1_h) + b2_h), a weight per token and
    per channel of the head's slice [h·D/H, (h+1)·D/H); x̂ = Σ_t a_t ⊙ x_t."""

    def __init__(self, dim: int, attn_dim: int, heads: int, dropout: float):
        super().__init__()
        if attn_dim % heads or dim % heads:
            raise ConfigError(f"model.af_dim={attn_dim} / hidden_dim={dim} not divisible by af_heads={heads}")
        self.heads = heads
        self.w1 = nn.Parameter(torch.zeros(heads, dim, attn_dim // heads))
        self.b1 = nn.Parameter(torch.zeros(heads, attn_dim // heads))
        self.w2 = nn.Parameter(torch.zeros(heads, attn_dim // heads, dim // heads))
        self.b2 = nn.Parameter(torch.zeros(heads, dim // heads))
        self.dropout1, self.dropout2, self.dropout3 = (nn.Dropout(dropout) for _ in range(3))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        # einsum keeps the per-head weights un-expanded over the batch (a broadcast matmul copies them B times)
        hidden = torch.einsum("btd,hda->bhta", x, self.w1) + self.b1[None, :, None]  # [B, H, T, a/H]
        hidden = F.gelu(self.dropout1(hidden))
        logits = self.dropout2(torch.einsum("bhta,hae->bhte", hidden, self.w2) + self.b2[None, :, None])
        logits = logits.masked_fill(~mask[:, None, :, None], MASK_VALUE)  # [B, H, T, D/H]
        weights = self.dropout3(logits.softmax(2)).transpose(1, 2).reshape(b, t, d)  # [B, T, D]
        return (x * weights).sum(1)


def pool_sequence(x: torch.Tensor, mask: torch.Tensor, how: str) -> torch.Tensor:
    """[B, T, D] → [B, D]: masked mean / max (`masked_pool`), or the official code's avg_special,
    which official checkpoints need: every position summed, padding included, divided by the
    true length (`TemporalAvgPool`; test_coot_convert shows the parity)."""
    if how == "avg_special":
        return x.sum(1) / mask.sum(1, keepdim=True).clamp_min(1)
    if how not in POOLING:
        raise ConfigError(f"pooling {how!r}: expected mean, max or avg_special")
    return masked_pool(x, mask, how)


class CootNet(nn.Module):
    """One of the four nets. Local (input_fc): features → T-Transformer → AF pooling.
    Global (context): clip embeddings → F_Local → pool ⊕ F_Global(context)."""

    def __init__(self, input_dim: int, cfg: CootConfig, local: bool):
        super().__init__()
        dim = cfg.hidden_dim
        self.local = local
        self.norm_input = CootLayerNorm(input_dim, cfg.layer_norm)
        self.input_fc = nn.Linear(input_dim, dim) if local else None  # §4: pointwise linear reduction
        if not local and input_dim != dim:
            raise ConfigError(f"global net input {input_dim} must equal hidden_dim {dim}")
        self.pooling = cfg.local_pooling if local else cfg.global_pooling
        self.cls_token = nn.Parameter(torch.zeros(dim)) if self.pooling == "cls" else None
        if cfg.positional_encoding not in ("sincos", "sincos_official", "none"):
            raise ConfigError(f"model.positional_encoding: unknown {cfg.positional_encoding!r}")
        self.pe_style = cfg.positional_encoding
        self.register_buffer("pe", sincos_table(1000, dim, self.pe_style), persistent=False)
        self.self_attention = AttentionLayer(dim, cfg.num_heads, cfg.ff_dim, cfg.dropout, cfg.layer_norm)
        self.cross_attention = (AttentionLayer(dim, cfg.num_heads, cfg.ff_dim, cfg.dropout, cfg.layer_norm)
                                if not local and cfg.use_context else None)
        self.pool = AttentionPool(dim, cfg.af_dim, cfg.af_heads, cfg.dropout) if self.pooling == "af" else None
        if self.pooling not in ("af", "mean", "max", "cls", "avg_special"):
            raise ConfigError(f"model pooling {self.pooling!r}: expected af, mean, max, cls or avg_special")

    @property
    def output_dim(self) -> int:
        dim = self.self_attention.norm1.weight.shape[0]
        return 2 * dim if self.cross_attention is not None else dim

    def forward(self, x: torch.Tensor, mask: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, T, D_in], mask [B, T] True = real, context [B, hidden] → [B, output_dim]."""
        x = self.norm_input(x)
        if self.input_fc is not None:
            x = F.gelu(self.input_fc(x))
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(len(x), 1, -1), x], 1)
            mask = torch.cat([mask.new_ones(len(x), 1), mask], 1)
        if self.pe_style != "none":
            x = x + self.pe[: x.shape[1]]
        h = self.self_attention(x, x, mask)  # [B, T, hidden]
        if self.pool is not None:
            pooled = self.pool(h, mask)
        elif self.cls_token is not None:
            pooled = h[:, 0]
        else:
            pooled = pool_sequence(h, mask, self.pooling)
        if self.cross_attention is None:
            return pooled
        if context is None:
            raise ValueError("the global net needs the context embedding")
        h_context = self.cross_attention(context.unsqueeze(1), h, mask).squeeze(1)  # eq. 5 + FF
        return torch.cat([pooled, h_context], -1)  # concat(mean(h), H_context)


def truncated_normal_(module: nn.Module, std: float) -> None:
    """Supp. "Optimization": weights and biases ~ N(0, std²) truncated at 2 std; LN left as is."""
    for name, param in module.named_parameters():
        if ".norm" in f".{name}" or name.startswith("norm"):
            continue
        nn.init.trunc_normal_(param, std=std, a=-2 * std, b=2 * std)


def group(flat: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[C, D] flattened clips/sentences + [B] counts → ([B, N, D] zero-padded, [B, N] mask)."""
    b, n = len(counts), int(counts.max()) if len(counts) else 0
    mask = torch.arange(n, device=flat.device)[None, :] < counts.to(flat.device)[:, None]  # [B, N]
    out = flat.new_zeros(b, n, flat.shape[-1])
    out[mask] = flat
    return out, mask


# --- the method -----------------------------------------------------------------------
@register
class Coot(Method):
    name = "coot"
    Config = CootConfig
    video_inputs = "features"
    protocol = "hierarchy"  # + paragraph↔video and sentence↔clip (§4): videotext.eval.hierarchy
    streams_shards = False  # its training batches (clip and sentence hierarchies) do not stream from shards yet

    def __init__(self, config: CootConfig, expert_dims: dict[str, int] | None = None):
        super().__init__(config)
        if not expert_dims:
            raise ConfigError("coot needs the feature dimension of each expert (expert_dims)")
        for key in ("cmc_distance",):
            if getattr(config, key) not in ("sum", "mean"):
                raise ConfigError(f"model.{key}: expected sum or mean, got {getattr(config, key)!r}")
        self.expert_dims = dict(expert_dims)
        video_dim = sum(expert_dims.values())
        text_dim = config.text_feature_dim or self._text_dim(config)
        self.video_local = CootNet(video_dim, config, local=True)
        self.video_global = CootNet(config.hidden_dim, config, local=False)
        self.text_local = CootNet(text_dim, config, local=True)
        self.text_global = CootNet(config.hidden_dim, config, local=False)
        truncated_normal_(self, config.init_std)
        self.__dict__["_text_features"] = None  # frozen BERT, kept out of the state dict

    @staticmethod
    def _text_dim(config: CootConfig) -> int:
        hf = text_config(config.text_model)
        return config.text_layers * int(hf.hidden_size)

    def count_parameters(self) -> int:
        """Trainable COOT parameters (the frozen text model is not part of the method)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    # --- text --------------------------------------------------------------------------
    @property
    def text_features(self) -> Any:
        if self.__dict__["_text_features"] is None:
            self.__dict__["_text_features"] = ParagraphTokenFeatures(
                self.config.text_model, self.config.text_layers, self.config.max_text_tokens)
        return self.__dict__["_text_features"]

    def prepare_text(self, texts: list[str]) -> dict[str, Any]:
        """Free-text paragraphs → sentence hierarchies (split after . ! ? ;)."""
        return self.prepare_paragraphs([split_sentences(t) for t in texts])

    def prepare_paragraphs(self, paragraphs: list[list[str]]) -> dict[str, Any]:
        return self.text_features.batch(paragraphs)

    def encode_text_hierarchy(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """{"paragraph" [B, 2H], "low" [S, H] sentences, "context" [B, H], "grouped" [B, N, H], "mask"} (unnormalised)."""
        return self._encode(self.text_local, self.text_global, batch, "word")

    def encode_text(self, batch: dict[str, Any]) -> torch.Tensor:
        return F.normalize(self.encode_text_hierarchy(batch)["paragraph"], dim=-1)  # [B, 2H]

    # --- video -------------------------------------------------------------------------
    def encode_video_hierarchy(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Same keys as `encode_text_hierarchy`: "paragraph" is the video embedding, "low" the clips."""
        frames, clips = batch["frames"], batch["group_frames"]
        if self.training and self.config.frame_noise > 0:  # Table 7: Gaussian noise on frame features
            frames = frames + torch.randn_like(frames) * self.config.frame_noise
            clips = clips + torch.randn_like(clips) * self.config.frame_noise
        batch = {**batch, "frames": frames, "group_frames": clips}
        return self._encode(self.video_local, self.video_global, batch, "frame")

    def encode_video(self, batch: dict[str, Any]) -> torch.Tensor:
        return F.normalize(self.encode_video_hierarchy(batch)["paragraph"], dim=-1)  # [B, 2H]

    def _encode(self, local: CootNet, global_: CootNet, batch: dict[str, Any], prefix: str) -> dict[str, torch.Tensor]:
        context = local(batch[f"{prefix}s"], batch[f"{prefix}_mask"])  # [B, H] global context g
        low = local(batch[f"group_{prefix}s"], batch[f"group_{prefix}_mask"])  # [C, H] clips / sentences
        grouped, mask = group(low, batch["group_counts"])  # [B, N, H]
        high = global_(grouped, mask, context)  # [B, 2H]
        return {"paragraph": high, "low": low, "context": context, "grouped": grouped, "mask": mask}

    # --- loss --------------------------------------------------------------------------
    def loss(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Eq. 9: align^L + align^H + align^g + cluster + λ·CMC."""
        cfg = self.config
        video = self.encode_video_hierarchy(batch["video"])
        text = self.encode_text_hierarchy(batch["text"])
        if not torch.equal(batch["video"]["group_counts"].cpu(), batch["text"]["group_counts"].cpu()):
            raise ValueError("coot: each video needs as many clips as its paragraph has sentences")
        video, text = self.gather(video, text)  # global-batch negatives under torchrun
        m, norm = cfg.margin, cfg.loss_normalise
        parts = {
            "align_low": alignment_loss(video["low"], text["low"], m, norm),
            "align_high": alignment_loss(video["paragraph"], text["paragraph"], m, norm),
            "align_context": alignment_loss(video["context"], text["context"], m, norm),
            "cluster": cluster_loss(video["low"], text["low"], m, norm)
            + cluster_loss(video["paragraph"], text["paragraph"], m, norm),
        }
        loss = sum(parts.values())
        if cfg.cmc_weight > 0:
            parts["cmc"] = cycle_consistency_loss(video["grouped"], video["mask"], text["grouped"], text["mask"],
                                                  cfg.cmc_distance, cfg.cmc_samples)
            loss = loss + cfg.cmc_weight * parts["cmc"]
        return {"loss": loss, **parts}

    # --- data hooks ----------------------------------------------------------------------
    def video_reader(self, read_features: Any) -> Any:
        """One `HierarchyVideoReader` per feature reader (it caches frame timelines)."""
        readers = self.__dict__.setdefault("_video_readers", {})
        if id(read_features) not in readers:
            readers[id(read_features)] = (read_features, HierarchyVideoReader(
                read_features, self.config.max_frames, self.config.min_clip_frames,
                standardise_experts=self.config.standardise_experts))
        return readers[id(read_features)][1]

    def text_source(self, read_features: Any) -> Any:
        """Where paragraph token features come from: the run's FeatureStore expert
        `model.text_features` (precomputed / imported, §4 "Text encoding"), else the model."""
        if not self.config.text_features or read_features is None:
            return self.text_features
        sources = self.__dict__.setdefault("_text_sources", {})
        if id(read_features) not in sources:
            stored = StoredParagraphFeatures(read_features.store, self.config.text_features, fallback=None)
            expected = self.text_local.norm_input.weight.shape[0]
            if stored.dim != expected:
                raise ConfigError(f"model.text_features={self.config.text_features!r}: {stored.dim}-d features, "
                                  f"the model expects {expected} (model.text_feature_dim)")
            sources[id(read_features)] = (read_features, stored)
        return sources[id(read_features)][1]

    def train_batches(self, dataset: Any, read_features: Any, batch_size: int, seed: int) -> Any:
        return HierarchyBatches(dataset, self.video_reader(read_features), self.text_source(read_features),
                                batch_size, seed)

    def video_batches(self, dataset: Any, read_features: Any, batch_size: int) -> Iterable[dict[str, Any]]:
        return hierarchy_video_batches(dataset, self.video_reader(read_features), batch_size)
