"""`dual`: the baseline dual encoder every paper compares against.

Text: a BERT-family encoder (MiniLM by default) pooled to one vector → Linear.
Video: each expert's per-time-step features [T, D_e] are pooled over time (mean or
max over the valid steps), normalised per expert, concatenated → Linear. Both sides
are L2-normalised, so the similarity is a cosine. Pooling over time discards event
order on purpose: it is the order-free baseline the temporal methods must beat.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from videotext.config import ConfigError
from videotext.losses import contrastive_loss
from videotext.models.base import Method
from videotext.models.layers.pooling import masked_pool
from videotext.models.registry import register
from videotext.text import build_text_encoder


@dataclass
class DualConfig:
    text_model: str = ""  # HF folder or name; "" = bundled all-MiniLM-L6-v2
    text_pooling: str = "mean"  # cls | mean (MiniLM was trained with mean pooling)
    freeze_text: bool = False
    max_text_tokens: int = 30  # MMT §4.2
    temporal_pooling: str = "mean"  # mean | max over time steps
    embed_dim: int = 256  # shared space (Frozen in Time §4.1: 256)
    dropout: float = 0.1
    loss: str = "infonce"  # infonce | max_margin | triplet
    temperature: float = 0.05  # InfoNCE σ (Frozen in Time §3.3)
    margin: float = 0.2  # max_margin (MMT eq. 8 uses 0.05) / triplet (Support-set eq. 1: α = 0.2)


@register
class DualEncoder(Method):
    name = "dual"
    Config = DualConfig
    video_inputs = "features"

    def __init__(self, config: DualConfig, expert_dims: dict[str, int] | None = None):
        super().__init__(config)
        if config.temporal_pooling not in ("mean", "max"):
            raise ConfigError(f"model.temporal_pooling: expected mean or max, got {config.temporal_pooling!r}")
        if not expert_dims:
            raise ConfigError("dual needs the feature dimension of each expert (expert_dims)")
        self.experts = list(expert_dims)
        self.text_encoder = build_text_encoder(
            config.text_model, config.text_pooling, config.freeze_text, config.max_text_tokens
        )
        self.text_proj = nn.Sequential(nn.Dropout(config.dropout), nn.Linear(self.text_encoder.hidden_size, config.embed_dim))
        # per-expert LayerNorm: experts live on very different scales (logits vs. flow vs. log-mel)
        self.expert_norms = nn.ModuleDict({e: nn.LayerNorm(d) for e, d in expert_dims.items()})
        self.video_proj = nn.Sequential(
            nn.Dropout(config.dropout), nn.Linear(sum(expert_dims.values()), config.embed_dim)
        )

    def prepare_text(self, texts: list[str]) -> dict[str, Any]:
        return self.text_encoder.tokenize(texts)

    def encode_text(self, batch: dict[str, Any]) -> torch.Tensor:
        return F.normalize(self.text_proj(self.text_encoder(batch)), dim=-1)  # [B, E]

    def pool_time(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """[B, T, D] features, [B, T] valid mask → [B, D]; videos with no valid step give 0."""
        return masked_pool(features, mask, self.config.temporal_pooling)

    def encode_video(self, batch: dict[str, Any]) -> torch.Tensor:
        pooled = [
            self.expert_norms[e](self.pool_time(batch["features"][e], batch["masks"][e])) for e in self.experts
        ]
        return F.normalize(self.video_proj(torch.cat(pooled, dim=-1)), dim=-1)  # [B, E]

    def loss(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        return self.loss_from_embeddings(self.encode_text(batch["text"]), self.encode_video(batch["video"]), batch)

    def chunk_inputs(self, batch: dict[str, Any]) -> tuple[Any, Any]:
        return batch["text"], batch["video"]

    def loss_from_embeddings(self, text: torch.Tensor, video: torch.Tensor, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        text, video = self.gather(text, video)  # global-batch negatives under torchrun
        sims = text @ video.T  # [B, B] cosine
        cfg = self.config
        kwargs = {"temperature": cfg.temperature} if cfg.loss == "infonce" else {"margin": cfg.margin}
        return contrastive_loss(cfg.loss, sims, positives=self.gather.positives(batch.get("positives")), **kwargs)
