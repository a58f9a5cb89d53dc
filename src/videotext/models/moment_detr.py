"""`moment_detr`: a query-conditioned transformer that finds the spans of a video a sentence describes.

Moment-DETR (Lei et al., NeurIPS 2021, "QVHighlights", §4) treats moment retrieval as set
prediction. The video's per-step features (each with its temporal endpoints, the step's start and
end as fractions of the window) and the query's token features are projected to one width and
encoded together by a transformer encoder (sine positions on the video steps); a decoder turns
`num_queries` learned moment queries into spans (centre, width: an MLP and a sigmoid) with a
foreground / background score each; a linear layer on the encoded steps scores each step's
saliency for the query. Training matches predicted spans to the ground truth one-to-one
(Hungarian) and adds the saliency hinge (`videotext.losses.moment_detr`), at every decoder layer.

Defaults are the paper's (§4, and the implementation details of §5): width 256, 2 encoder and 2
decoder layers, 8 heads, 10 moment queries, dropout 0.1 (0.5 on the input projections), λ_L1 10,
λ_iou 1, λ_cls 4, λ_s 1, Δ 0.2, AdamW 1e-4 with weight decay 1e-4, batch 32, 200 epochs; a window
of 75 steps and 2 input projection layers are the official release's. The paper's features are
CLIP + SlowFast for video and CLIP's text tokens; here they are the run's experts and the bundled
MiniLM's tokens (frozen, as the paper's are pre-extracted).

Long videos: the paper's videos fit one window (150 s in 2-s clips). A longer video is read in
windows of `window_steps` steps, half a window apart; a query's spans from every window are merged
(non-maximum suppression) and ranked by their foreground score. Training draws one window per
query and epoch, with odds `positive_window_odds` one holding a ground-truth span, else any, so
that windows without the moment learn to answer "background" (`videotext.data.moment_batches`).

A guide (not the paper's): the paper's video and text features come from one space (CLIP image and
text features, §5), where a step's relevance to the query can be read off directly; the run's
experts and MiniLM's tokens are not. `guide_method` / `guide_model` hold a trained retrieval run
(e.g. a `dual` run, loaded with `train.init_from=RUN train.init_into=guide train.freeze=[guide]`)
frozen inside the head: its vector of the `guide_context` steps centred on each step, their cosine
with its query vector, and the query vector as one more text token join the inputs.

This method grounds a query in a given video; it has no video-level embedding, so it is evaluated
by the `moments` protocol (`videotext.eval.moment_eval`), not by caption-video retrieval.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from videotext.config import ConfigError
from videotext.data.moment_batches import MomentWindowBatches, step_features
from videotext.errors import VideoTextError
from videotext.losses.moment_detr import (
    FOREGROUND, MatchWeights, cxw_to_xx, hungarian_match, negative_pair_hinge, saliency_hinge, set_losses,
)
from videotext.models.base import Method
from videotext.models.registry import build_method, register
from videotext.text import build_text_encoder


#: the span finder's settings for decode "saliency": the best of its 256-setting grid on the synthetic long-video
#: set's val split for seeds 0 and 2 of the guided head (seed 1 chose scale_ratio 1.25; bench/moments.py,
#: docs/moments.md). max_steps, the longest span, is a prior on the data's moments: set yours
SALIENCY_SPANS = {"smooth": 3, "min_steps": 2, "scale_ratio": 1.5, "context_ratio": 1.0, "context_weight": 0.25,
                  "max_steps": 6}
DECODINGS = ("spans", "saliency")


@dataclass
class MomentDETRConfig:
    text_model: str = ""  # "" = the bundled MiniLM (the paper: CLIP's text tokens, §5)
    freeze_text: bool = True  # the paper's text features are pre-extracted: a fixed encoder
    max_text_tokens: int = 32  # official max_q_l
    hidden_dim: int = 256  # §5 implementation details: d = 256
    enc_layers: int = 2  # §5: 2 encoder layers
    dec_layers: int = 2  # §5: 2 decoder layers
    heads: int = 8  # official nheads
    ff_dim: int = 1024  # official dim_feedforward
    num_queries: int = 10  # §5: 10 moment queries
    dropout: float = 0.1  # §5: transformer dropout
    input_dropout: float = 0.5  # §5: dropout of the input projections
    input_layers: int = 2  # official n_input_proj
    temporal_endpoints: bool = True  # official ctx_mode video_tef: each step's start and end, as fractions
    span_weight: float = 10.0  # §4: λ_L1
    giou_weight: float = 1.0  # §4: λ_iou
    label_weight: float = 4.0  # §4: λ_cls
    eos_weight: float = 0.1  # DETR's no-object weight (official eos_coef)
    saliency_weight: float = 1.0  # §4: λ_s
    saliency_margin: float = 0.2  # §4: Δ
    negative_pair_weight: float = 0.0  # not the paper's (0 = off): a relevant step must score Δ higher for its
    # own query than for another query of the batch (`losses.moment_detr.negative_pair_hinge`)
    aux_loss: bool = True  # losses at every decoder layer (DETR, official default)
    window_steps: int = 75  # official max_v_l: 75 clips of 2 s
    window_stride: float = 0.5  # windows of a long video start this fraction of a window apart
    positive_window_odds: float = 0.8  # training windows holding a ground-truth span (long videos only)
    nms_iou: float = 0.7  # merging the windows' spans of a long video
    max_predictions: int = 10  # spans kept per query (QVHighlights reads 10)
    decode: str = "spans"  # how a video's spans are read: "spans", the moment queries' spans of every window
    # merged by NMS (the paper, §4); "saliency" (not the paper's), the span finder over the whole-video step
    # saliency (`eval.span_finder`), which validation then selects by too
    saliency_spans: dict[str, Any] = field(default_factory=lambda: dict(SALIENCY_SPANS))  # the span finder's
    # settings for decode "saliency" (`eval.span_finder.SpanSettings` fields; the others keep its defaults)
    guide_method: str = ""  # not the paper's: a trained retrieval method held frozen inside the head, whose
    # step vectors, query vector and their cosine join the inputs ("" = none, the paper's inputs)
    guide_model: dict[str, Any] = field(default_factory=dict)  # that method's model config (its run's `model:`)
    guide_context: int = 1  # steps centred on each step that the guide encodes as one clip (odd)


def sine_positions(mask: torch.Tensor, dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """[B, W, dim] DETR's normalised sine / cosine embedding of each real step's position (mask [B, W])."""
    position = mask.float().cumsum(1)  # [B, W], 1 … n on real steps
    position = position / (position[:, -1:].clamp(min=1.0) + 1e-6) * 2 * math.pi
    frequencies = temperature ** (2 * (torch.arange(dim, device=mask.device) // 2) / dim)  # [dim]
    angles = position[..., None] / frequencies  # [B, W, dim]
    return torch.stack([angles[..., 0::2].sin(), angles[..., 1::2].cos()], dim=-1).flatten(-2)


class InputProjection(nn.Sequential):
    """`layers` × (LayerNorm → Dropout → Linear → ReLU), the last without ReLU (official LinearLayer)."""

    def __init__(self, in_dim: int, out_dim: int, layers: int, dropout: float):
        parts: list[nn.Module] = []
        for i in range(layers):
            parts += [nn.LayerNorm(in_dim if i == 0 else out_dim), nn.Dropout(dropout),
                      nn.Linear(in_dim if i == 0 else out_dim, out_dim)]
            if i < layers - 1:
                parts.append(nn.ReLU())
        super().__init__(*parts)


class EncoderLayer(nn.Module):
    """Post-norm self-attention layer with positions added to queries and keys (DETR)."""

    def __init__(self, dim: int, heads: int, ff_dim: int, dropout: float):
        super().__init__()
        self.attention = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(dim, ff_dim), nn.ReLU(), nn.Dropout(dropout), nn.Linear(ff_dim, dim))
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        q = x + pos
        x = self.norm1(x + self.drop1(self.attention(q, q, x, key_padding_mask=padding, need_weights=False)[0]))
        return self.norm2(x + self.drop2(self.ff(x)))


class DecoderLayer(nn.Module):
    """Post-norm decoder layer: self-attention of the moment queries, cross-attention to the memory."""

    def __init__(self, dim: int, heads: int, ff_dim: int, dropout: float):
        super().__init__()
        self.self_attention = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
        self.cross_attention = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(dim, ff_dim), nn.ReLU(), nn.Dropout(dropout), nn.Linear(ff_dim, dim))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(3))
        self.drops = nn.ModuleList(nn.Dropout(dropout) for _ in range(3))

    def forward(self, tgt: torch.Tensor, query_pos: torch.Tensor, memory: torch.Tensor, pos: torch.Tensor,
                padding: torch.Tensor) -> torch.Tensor:
        q = tgt + query_pos
        tgt = self.norms[0](tgt + self.drops[0](self.self_attention(q, q, tgt, need_weights=False)[0]))
        attended = self.cross_attention(tgt + query_pos, memory + pos, memory, key_padding_mask=padding,
                                        need_weights=False)[0]
        tgt = self.norms[1](tgt + self.drops[1](attended))
        return self.norms[2](tgt + self.drops[2](self.ff(tgt)))


class SpanMLP(nn.Sequential):
    """3-layer MLP with ReLU between layers (DETR's box head), to (centre, width) logits."""

    def __init__(self, dim: int, out_dim: int = 2, layers: int = 3):
        parts: list[nn.Module] = []
        for i in range(layers):
            parts.append(nn.Linear(dim, out_dim if i == layers - 1 else dim))
            if i < layers - 1:
                parts.append(nn.ReLU())
        super().__init__(*parts)


def rolled_by_one(prepared: dict[str, Any]) -> dict[str, Any]:
    """Prepared texts (tensors [B, …], the "texts" list, nested prepared texts such as the guide's)
    with each row replaced by the previous one."""
    out: dict[str, Any] = {}
    for key, value in prepared.items():
        if torch.is_tensor(value):
            out[key] = value.roll(1, 0)  # input_ids, attention_mask [B, L]
        elif isinstance(value, dict):
            out[key] = rolled_by_one(value)
        elif key == "texts":
            out[key] = value[-1:] + value[:-1]
    return out


@register
class MomentDETR(Method):
    """`moment_detr`: spans of a video for a text query (Moment-DETR; grounding, not retrieval)."""

    name = "moment_detr"
    Config = MomentDETRConfig
    video_inputs = "features"
    task: ClassVar[str] = "moments"
    protocol = "moments"
    streams_shards = False

    def __init__(self, config: MomentDETRConfig, expert_dims: dict[str, int] | None = None):
        super().__init__(config)
        if not expert_dims:
            raise ConfigError("moment_detr needs the feature dimension of each expert (expert_dims)")
        if config.hidden_dim % config.heads:
            raise ConfigError(f"model.hidden_dim={config.hidden_dim} is not divisible by model.heads={config.heads}")
        if config.window_steps < 2 or not 0 < config.window_stride <= 1:
            raise ConfigError("model.window_steps must be ≥ 2 and model.window_stride in (0, 1]")
        if config.decode not in DECODINGS:
            raise ConfigError(f"model.decode must be one of {', '.join(DECODINGS)}, got {config.decode!r}")
        self.experts = list(expert_dims)
        d = config.hidden_dim
        self.text_encoder = build_text_encoder(config.text_model, "mean", config.freeze_text, config.max_text_tokens)
        token_width = int(getattr(self.text_encoder, "token_width", self.text_encoder.hidden_size))
        self.guide: Method | None = None
        guide_width = 0
        if config.guide_method:
            if config.guide_context < 1 or config.guide_context % 2 == 0:
                raise ConfigError(f"model.guide_context must be an odd number of steps ≥ 1, got {config.guide_context}")
            self.guide = build_method(config.guide_method, config.guide_model, expert_dims=expert_dims)
            self.guide.requires_grad_(False)
            guide_width = self.guide_width(expert_dims)
        video_dim = (sum(expert_dims.values()) + (2 if config.temporal_endpoints else 0)
                     + (guide_width + 1 if self.guide is not None else 0))  # guide: its step vector and cosine
        self.video_proj = InputProjection(video_dim, d, config.input_layers, config.input_dropout)
        self.text_proj = InputProjection(token_width, d, config.input_layers, config.input_dropout)
        if self.guide is not None:
            self.guide_query_proj = InputProjection(guide_width, d, config.input_layers, config.input_dropout)
        self.encoder = nn.ModuleList(EncoderLayer(d, config.heads, config.ff_dim, config.dropout)
                                     for _ in range(config.enc_layers))
        self.decoder = nn.ModuleList(DecoderLayer(d, config.heads, config.ff_dim, config.dropout)
                                     for _ in range(config.dec_layers))
        self.decoder_norm = nn.LayerNorm(d)
        self.moment_queries = nn.Embedding(config.num_queries, d)
        self.class_head = nn.Linear(d, 2)  # foreground, background
        self.span_head = SpanMLP(d)
        self.saliency_head = nn.Linear(d, 1)
        self.match_weights = MatchWeights(config.span_weight, config.giou_weight, config.label_weight,
                                          config.eos_weight)

    # --- not a retrieval method ----------------------------------------------------------------
    def _no_embedding(self, *args: Any, **kwargs: Any) -> Any:
        raise VideoTextError("moment_detr finds spans of a given video for a query; it has no video or text "
                             "embedding to rank videos by (evaluate it with the moments protocol, `videotext train`)")

    encode_text = encode_video = similarity = index_vectors = query_vectors = _no_embedding

    # --- the guide -----------------------------------------------------------------------------------
    def guide_width(self, expert_dims: dict[str, int]) -> int:
        """Width of the guide's vectors, read from one zero step."""
        assert self.guide is not None
        probe = {"features": {e: torch.zeros(1, 1, dim) for e, dim in expert_dims.items()},
                 "masks": {e: torch.ones(1, 1, dtype=torch.bool) for e in expert_dims}}
        with torch.no_grad():
            return int(self.guide.index_vectors(self.guide.encode_video(probe)).shape[-1])

    def train(self, mode: bool = True) -> "MomentDETR":
        super().train(mode)
        if self.guide is not None:
            self.guide.eval()  # frozen and read as trained: no dropout
        return self

    @torch.no_grad()
    def guide_vectors(self, batch: dict[str, Any], text_batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """(step vectors [B, W, G], query vectors [B, G]), unit rows: each step's vector is the guide's
        encoding of the `guide_context` real steps centred on it (fewer at the window's ends), as
        `index build --moment-context` encodes a track; padding steps are 0."""
        assert self.guide is not None
        mask = batch["mask"]  # [B, W]
        count, width = mask.shape
        half = self.config.guide_context // 2
        index = torch.arange(width, device=mask.device)[:, None] + torch.arange(-half, half + 1, device=mask.device)
        inside = (index >= 0) & (index < width)  # [W, N]
        index = index.clamp(0, width - 1)
        steps_mask = (mask[:, index] & inside).flatten(0, 1)  # [B·W, N]
        clips = {"features": {e: batch["features"][e][:, index].flatten(0, 1) for e in self.experts},  # [B·W, N, D]
                 "masks": {e: steps_mask for e in self.experts}}
        steps = F.normalize(self.guide.index_vectors(self.guide.encode_video(clips)).float(), dim=-1)
        steps = steps.reshape(count, width, -1) * mask[..., None]
        query = self.guide.query_vectors(self.guide.encode_text(text_batch["guide"]))
        return steps, F.normalize(query.float(), dim=-1)

    # --- data --------------------------------------------------------------------------------------
    def prepare_text(self, texts: list[str]) -> dict[str, Any]:
        prepared = self.text_encoder.tokenize(texts)
        if self.guide is not None:
            prepared["guide"] = self.guide.prepare_text(texts)
        return prepared

    @property
    def window(self) -> int:
        return self.config.window_steps

    @property
    def stride(self) -> int:
        return max(1, int(round(self.config.window_steps * self.config.window_stride)))

    def train_batches(self, dataset: Any, read_features: Any, batch_size: int, seed: int) -> MomentWindowBatches:
        return MomentWindowBatches(dataset, step_features(read_features), self.prepare_text, batch_size, seed,
                                   self.window, self.config.positive_window_odds)

    # --- the model -----------------------------------------------------------------------------------
    def video_inputs_of(self, batch: dict[str, Any],
                        guide: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """[B, W, ΣD (+G+1) (+2)]: each expert L2-normalised per step (official normalize_v), concatenated,
        with the guide's step vector and its cosine with the query (`guide_vectors`), and the step's
        temporal endpoints as fractions of the window's real steps."""
        mask = batch["mask"]
        parts = [F.normalize(batch["features"][e], dim=-1) for e in self.experts]
        if guide is not None:
            steps, query = guide
            parts += [steps, (steps * query[:, None]).sum(-1, keepdim=True)]
        if self.config.temporal_endpoints:
            steps = mask.sum(1, keepdim=True).clamp(min=1).float()  # [B, 1]
            index = torch.arange(mask.shape[1], device=mask.device).float()[None, :]
            parts.append(torch.stack([index / steps, (index + 1) / steps], dim=-1) * mask[..., None])
        return torch.cat(parts, dim=-1)

    def encode(self, batch: dict[str, Any], text_batch: dict[str, Any] | None = None,
               guide: tuple[torch.Tensor, torch.Tensor] | None = None,
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(memory [B, W + L, d], positions [B, W + L, d], padding [B, W + L], step saliency [B, W]) of the
        windows read with their queries, or with `text_batch`'s (prepared texts, one per window);
        `guide`: those windows' and texts' `guide_vectors`, when already computed."""
        text_batch = batch["text"] if text_batch is None else text_batch
        video_mask = batch["mask"]  # [B, W] True = real step
        text_mask = text_batch["attention_mask"].bool()  # [B, L]
        if guide is None and self.guide is not None:
            guide = self.guide_vectors(batch, text_batch)
        video = self.video_proj(self.video_inputs_of(batch, guide))  # [B, W, d]
        tokens = F.normalize(self.text_encoder.token_features(text_batch).to(video.dtype), dim=-1)
        text = self.text_proj(tokens)  # [B, L, d]
        if guide is not None:  # the guide's query vector: one more text token
            text = torch.cat([text, self.guide_query_proj(guide[1].to(text.dtype))[:, None]], dim=1)  # [B, L + 1, d]
            text_mask = torch.cat([text_mask, text_mask.new_ones(len(text_mask), 1)], dim=1)
        x = torch.cat([video, text], dim=1)  # [B, W + L, d]
        padding = ~torch.cat([video_mask, text_mask], dim=1)
        pos = torch.cat([sine_positions(video_mask, video.shape[-1]).to(video.dtype), torch.zeros_like(text)], dim=1)
        for layer in self.encoder:
            x = layer(x, pos, padding)
        saliency = self.saliency_head(x[:, : video.shape[1]]).squeeze(-1)  # [B, W]
        return x, pos, padding, saliency.masked_fill(~video_mask, 0.0)

    def forward_windows(self, batch: dict[str, Any], guide: tuple[torch.Tensor, torch.Tensor] | None = None,
                        ) -> dict[str, torch.Tensor]:
        """{"logits" [L, B, Q, 2], "spans" [L, B, Q, 2] (centre, width in the window), "saliency" [B, W]}
        for every decoder layer L (the last is the prediction)."""
        memory, pos, padding, saliency = self.encode(batch, guide=guide)
        x = memory
        query_pos = self.moment_queries.weight[None].expand(len(x), -1, -1)  # [B, Q, d]
        tgt = torch.zeros_like(query_pos)
        outputs = []
        for layer in self.decoder:
            tgt = layer(tgt, query_pos, memory, pos, padding)
            outputs.append(self.decoder_norm(tgt))
        states = torch.stack(outputs)  # [L, B, Q, d]
        return {"logits": self.class_head(states), "spans": self.span_head(states).sigmoid(), "saliency": saliency}

    def mismatched_texts(self, batch: dict[str, Any]) -> tuple[dict[str, Any], torch.Tensor]:
        """The batch's prepared queries rolled by one (each window gets the previous window's query), and
        [B] bool: the windows whose rolled query is another text (its token ids differ)."""
        text = batch["text"]
        rolled = rolled_by_one(text)
        ids = text["input_ids"]
        paired = (ids != rolled["input_ids"]).any(1)  # [B]
        return rolled, paired.to(batch["mask"].device)

    def loss(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        guide = self.guide_vectors(batch, batch["text"]) if self.guide is not None else None
        out = self.forward_windows(batch, guide)
        cfg = self.config
        layers = range(len(out["logits"])) if cfg.aux_loss else [len(out["logits"]) - 1]
        parts = {"span": 0.0, "giou": 0.0, "label": 0.0}
        for layer in layers:
            logits, spans = out["logits"][layer], out["spans"][layer]
            matches = hungarian_match(logits, spans, batch["targets"], self.match_weights)
            for name, value in set_losses(logits, spans, batch["targets"], matches, self.match_weights).items():
                parts[name] = parts[name] + value
        saliency = saliency_hinge(out["saliency"], batch["saliency"], batch["mask"], cfg.saliency_margin)
        loss = (cfg.span_weight * parts["span"] + cfg.giou_weight * parts["giou"] + cfg.label_weight * parts["label"]
                + cfg.saliency_weight * saliency)
        losses = {"span": parts["span"], "giou": parts["giou"], "label": parts["label"], "saliency": saliency}
        if cfg.negative_pair_weight > 0 and len(batch["mask"]) > 1:
            rolled, paired = self.mismatched_texts(batch)
            if guide is not None:  # the same windows: their step vectors again, the queries rolled as the texts are
                guide = (guide[0], guide[1].roll(1, 0))
            other = self.encode(batch, rolled, guide)[3]  # [B, W]
            losses["negative_pair"] = negative_pair_hinge(out["saliency"], other, batch["saliency"], batch["mask"],
                                                          cfg.saliency_margin, paired)
            loss = loss + cfg.negative_pair_weight * losses["negative_pair"]
        return {"loss": loss, **losses}

    @torch.inference_mode()
    def predict_windows(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(spans [B, Q, 2] as (start, end) fractions of each window, foreground scores [B, Q],
        step saliency [B, W]) of the last decoder layer."""
        out = self.forward_windows(batch)
        spans = cxw_to_xx(out["spans"][-1]).clamp(0.0, 1.0)
        scores = out["logits"][-1].float().softmax(-1)[..., FOREGROUND]
        return spans.float(), scores, out["saliency"].float()
