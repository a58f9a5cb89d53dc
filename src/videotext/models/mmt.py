"""`mmt`: Multi-modal Transformer for video retrieval (Gabeur et al., ECCV 2020).

Video (§3.1): every expert's per-time-step features are projected to d_model (F), tagged
with a learned expert embedding (E) and a learned temporal embedding by second (T), and
preceded by one aggregated token per expert, initialised by max-pooling that expert's
features. A BERT-style encoder attends over all tokens of all experts; the output at
each expert's aggregated token, L2-normalised, is that expert's video embedding ψ_agg^i.

Caption (§3.2): BERT's [CLS] vector h(c) goes through one gated embedding unit per
expert (φ^i) and a linear layer + softmax over experts (the mixture weights w_i(c),
eq. 7). Similarity (eq. 6): s(v, c) = Σ_i w_i(c) ⟨φ^i, ψ_agg^i⟩, with the weights of
experts a video lacks renormalised away (§4.2 "missing experts", Miech et al. 2018).
The released models (official code, keep_missing_modalities true) score otherwise: a
missing expert's [AGG] token starts from the normalised projection bias, is masked as
a key only, and its output keeps the expert's weight — `missing_agg: bias` with
`keep_missing_experts: true`, which `videotext convert mmt` sets.

Embeddings are dicts: text {"experts" [N, M, D], "weights" [N, M]}, video
{"experts" [N, M, D], "available" [N, M]} — both precomputable, and `similarity`
reduces eq. 6 to two chunked matrix products (see `mixture_similarity`).

Token layout and embedding tables follow the official `gabeur/mmt` code (so its
checkpoints convert by name): position 0 = T_agg, 1 = T_unk, 2 + ⌊t / window⌋ = the
second t falls in ([t, t+1) → T_{t+1} of the paper); experts in sorted-name order,
each as [AGG] + its feature tokens.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from videotext.config import ConfigError
from videotext.data.loaders import caption_video_batch, video_batches
from videotext.data.mmt_features import MMTCaptionBatches, MMTFeatures, collate_mmt
from videotext.losses import contrastive_loss
from videotext.models.base import Method
from videotext.models.layers.gated_unit import GatedEmbeddingUnit
from videotext.models.layers.mmt_bert import MMTBert
from videotext.models.layers.pooling import masked_pool
from videotext.models.registry import register
from videotext.text import build_text_encoder

POS_AGG, POS_UNK, POS_FIRST = 0, 1, 2  # position-table rows: T_agg, T_unk, T_1 (official layout)


@dataclass
class MMTConfig:
    # --- caption side (§3.2, §4.2) ---
    text_model: str = ""  # HF folder or name; "" = bundled MiniLM (the paper: BERT-base-cased)
    text_pooling: str = "cls"  # §3.2: h(c) is the [CLS] output
    freeze_text: bool = False  # §4.2: BERT is fine-tuned
    max_text_tokens: int = 30  # §4.2: first 30 word pieces (100 for ActivityNet)
    text_dropout: float = 0.1  # §4.2: dropout 10% (official: on h(c) before the mixture-weight layer)
    gated_batch_norm: bool = True  # gated embedding unit with BatchNorm (official txt_pro 'gbn')
    # --- video side (§3.1, §4.2) ---
    d_model: int = 512  # §4.2
    layers: int = 4  # §4.2, Table 3c
    heads: int = 4  # §4.2, Table 3c
    intermediate: int = 3072  # §4.2
    dropout: float = 0.1  # §4.2
    max_seconds: int = 30  # §3.1: D = |t_max| temporal embeddings (+ T_agg, T_unk → official table of 32)
    temporal_window: float = 1.0  # §3.1: one temporal embedding per second
    agg_init: str = "max"  # Table 3b: max | mean | zero pooling for the aggregated tokens
    encoder: str = "mmt"  # Table 3a: mmt | none (no encoder: projected pooled features)
    inputs: str = "all"  # Table 3a: all (aggregated + every feature) | agg (aggregated tokens only)
    feature_order: str = "ordered"  # Table 3a: ordered | shuffled (features permuted against their times)
    project_l2norm: bool = True  # L2-normalise projected features (official ReduceDim; §3.1 is silent)
    cls_token: bool = False  # prepend a zero [CLS] token (official code; unused by the paper)
    expert_types: dict[str, int] = field(default_factory=dict)  # token-type row per expert; {} = 1..M (sorted)
    num_token_types: int = 0  # rows of the expert-embedding table; 0 = max type + 1 (official: 19)
    keep_missing_experts: bool = False  # False = paper: missing experts' weights renormalised away
    missing_agg: str = "zero"  # a missing expert's [AGG] input: zero (§4.2) | bias (official: ReduceDim(0))
    # --- loss (§3.4, §4.2) ---
    loss: str = "max_margin"  # eq. 8; "infonce" is an option (not the paper's, Frozen in Time eq. 2-3)
    margin: float = 0.05  # §4.2
    loss_normalise: str = "positives"  # eq. 8 (1/B); "terms" = official MaxMarginRankingLoss(fix_norm=True)
    temperature: float = 0.05  # InfoNCE σ when loss = infonce (Frozen in Time §3.3)
    expert_loss_weight: float = 0.0  # not the paper's: + λ · mean over experts of the loss on ⟨φ^i, ψ^i⟩ alone


_CHOICES = {"agg_init": ("max", "mean", "zero"), "encoder": ("mmt", "none"), "inputs": ("all", "agg"),
            "missing_agg": ("zero", "bias"),
            "feature_order": ("ordered", "shuffled"), "text_pooling": ("cls", "mean"),
            "loss": ("max_margin", "infonce")}


# --- similarity -------------------------------------------------------------------------
def mixture_similarity(text: dict[str, torch.Tensor], video: dict[str, torch.Tensor],
                       chunk_size: int = 1024) -> torch.Tensor:
    """Eq. 6 with per-pair renormalised weights, [n_text, n_video], in text chunks.

    s(c, v) = Σ_m w_cm a_vm ⟨φ_cm, ψ_vm⟩ / Σ_m w_cm a_vm  (a = availability 0/1), computed as
    (w ⊙ φ).flatten @ (a ⊙ ψ).flatten.T divided by w @ a.T: no [n_text, n_video, M] tensor
    is built. A pair with no available expert scores 0 (denominator 1e-5, as official l.816).
    """
    avail = video["available"].to(video["experts"].dtype)  # [V, M]
    video_flat = (video["experts"] * avail[..., None]).flatten(1)  # [V, M*D]
    rows = []
    for start in range(0, text["weights"].shape[0], chunk_size):
        weights = text["weights"][start : start + chunk_size]  # [c, M]
        text_flat = (text["experts"][start : start + chunk_size] * weights[..., None]).flatten(1)  # [c, M*D]
        denom = weights @ avail.T  # [c, V]
        denom = torch.where(denom == 0, torch.full_like(denom, 1e-5), denom)
        rows.append((text_flat @ video_flat.T) / denom)
    return torch.cat(rows) if rows else avail.new_zeros((0, avail.shape[0]))


def mixture_similarity_reference(text: dict[str, torch.Tensor], video: dict[str, torch.Tensor]) -> torch.Tensor:
    """The same score computed naively per pair and expert ([n_text, n_video, M] in memory)."""
    per_expert = torch.einsum("tmd,vmd->tvm", text["experts"], video["experts"])  # [T, V, M]
    weights = text["weights"][:, None, :] * video["available"][None, :, :]  # [T, V, M]
    total = weights.sum(-1)
    total = torch.where(total == 0, torch.full_like(total, 1e-5), total)
    return (weights * per_expert).sum(-1) / total


# --- the method -------------------------------------------------------------------------
@register
class MMT(Method):
    name = "mmt"
    Config = MMTConfig
    video_inputs = "features"
    report_section = "experts"  # each expert's contribution: videotext.eval.mmt_report
    # An exported query side (videotext.search.query_export) gives the mixture weights w_c too: a
    # shortlist's dot products divided by Σ_m w_cm a_vm are eq. 6 (`mixture_scores`), no torch needed.
    exported_rescore = "mixture"

    def __init__(self, config: MMTConfig, expert_dims: dict[str, int] | None = None):
        super().__init__(config)
        for key, allowed in _CHOICES.items():
            if getattr(config, key) not in allowed:
                raise ConfigError(f"model.{key}: expected one of {list(allowed)}, got {getattr(config, key)!r}")
        if config.loss_normalise not in ("positives", "terms", "entries"):
            raise ConfigError(f"model.loss_normalise: expected positives, terms or entries, got {config.loss_normalise!r}")
        if not expert_dims:
            raise ConfigError("mmt needs the feature dimension of each expert (expert_dims)")
        self.experts = sorted(expert_dims)  # official token order: experts by sorted name
        unknown = sorted(set(config.expert_types) - set(self.experts))
        if unknown:
            raise ConfigError(f"model.expert_types: experts {unknown} are not among the data experts {self.experts}")
        self.type_ids = {e: int(config.expert_types.get(e, i + 1)) for i, e in enumerate(self.experts)}
        d = config.d_model
        # caption side
        self.text_encoder = build_text_encoder(config.text_model, config.text_pooling, config.freeze_text,
                                          config.max_text_tokens)
        hidden = self.text_encoder.hidden_size
        self.text_gated = nn.ModuleDict({e: GatedEmbeddingUnit(hidden, d, config.gated_batch_norm) for e in self.experts})
        self.text_dropout = nn.Dropout(config.text_dropout)
        self.mixture = nn.Linear(hidden, len(self.experts))  # eq. 7: rows a_1 … a_N
        # video side
        self.project = nn.ModuleDict({e: nn.Linear(expert_dims[e], d) for e in self.experts})  # §3.1 F
        self.video_bert = None
        if config.encoder == "mmt":
            self.video_bert = MMTBert(d, config.layers, config.heads, config.intermediate,
                                      num_positions=config.max_seconds + POS_FIRST,
                                      num_types=max(config.num_token_types, max(self.type_ids.values()) + 1),
                                      dropout=config.dropout)

    # --- data hooks ---
    def prepare_text(self, texts: list[str]) -> dict[str, Any]:
        return self.text_encoder.tokenize(texts)

    def feature_reader(self, read_features: Any) -> MMTFeatures:
        """`read_features` as this model reads it: with timestamps, pooled vectors and its feature order."""
        return MMTFeatures.wrap(read_features, shuffle=self.config.feature_order == "shuffled")

    def train_batches(self, dataset: Any, read_features: Any, batch_size: int, seed: int) -> MMTCaptionBatches:
        return MMTCaptionBatches(dataset, self.feature_reader(read_features), self.prepare_text, batch_size, seed)

    def stream_batch(self, videos: list[Any], read_features: Any, epoch: int, seed: int) -> dict[str, Any]:
        return caption_video_batch(videos, self.feature_reader(read_features), self.prepare_text, seed, epoch,
                                   collate=collate_mmt)

    def video_batches(self, dataset: Any, read_features: Any, batch_size: int) -> Iterator[dict[str, Any]]:
        return video_batches(dataset, self.feature_reader(read_features), batch_size, collate=collate_mmt)

    # --- caption ---
    def encode_text(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        h = self.text_encoder(batch)  # [B, H]
        experts = torch.stack([self.text_gated[e](h) for e in self.experts], dim=1)  # [B, M, D]
        weights = torch.softmax(self.mixture(self.text_dropout(h)), dim=-1)  # [B, M], eq. 7
        return {"experts": F.normalize(experts, dim=-1), "weights": weights}

    # --- video ---
    def _project(self, expert: str, x: torch.Tensor) -> torch.Tensor:
        x = self.project[expert](x)
        return F.normalize(x, dim=-1) if self.config.project_l2norm else x

    def _positions(self, times: torch.Tensor | None, mask: torch.Tensor) -> torch.Tensor:
        """Timestamps [B, T] (s) → position rows: 2 + ⌊t / window⌋ clamped; unknown → T_unk."""
        if times is None:
            return torch.full(mask.shape, POS_UNK, dtype=torch.long, device=mask.device)
        known = torch.isfinite(times) & mask
        seconds = torch.where(known, times, torch.zeros_like(times)) / self.config.temporal_window
        index = (seconds.clamp_min(0) + POS_FIRST).clamp_max(self.config.max_seconds + POS_FIRST - 1).long()
        return torch.where(known, index, torch.full_like(index, POS_UNK))

    def _pooled(self, batch: dict[str, Any], expert: str) -> torch.Tensor:
        """The aggregated token's input feature F_agg (Table 3b), [B, D_e] before projection."""
        if self.config.agg_init == "mean" and "pooled_mean" in batch:
            return batch["pooled_mean"][expert]
        if self.config.agg_init != "mean" and "pooled_max" in batch:
            return batch["pooled_max"][expert]
        features, mask = batch["features"][expert], batch["masks"][expert]  # a batch from the shared loader
        return masked_pool(features, mask, "mean" if self.config.agg_init == "mean" else "max")

    def encode_video(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        cfg = self.config
        masks = batch["masks"]
        available = torch.stack([masks[e].any(1) for e in self.experts], dim=1)  # [B, M]
        aggregated = []
        for i, e in enumerate(self.experts):
            pooled = self._pooled(batch, e)  # [B, D_e]
            present = available[:, i, None].to(pooled.dtype)  # [B, 1]
            if cfg.missing_agg == "bias":  # official: ReduceDim of the all-zero max-pool = normalised bias
                agg = self._project(e, pooled * present)
            else:  # §4.2: a missing expert's aggregated feature is a zero vector
                agg = self._project(e, pooled) * present
            aggregated.append(agg if cfg.agg_init != "zero" else torch.zeros_like(agg))
        if self.video_bert is None:  # Table 3a "NONE": the pooled, projected features are the embedding
            experts = torch.stack(aggregated, dim=1)
        else:
            experts = self._transformer(batch, aggregated, available)
        if cfg.keep_missing_experts:
            available = torch.ones_like(available)
        return {"experts": F.normalize(experts, dim=-1), "available": available.float()}

    def _transformer(self, batch: dict[str, Any], aggregated: list[torch.Tensor],
                     available: torch.Tensor) -> torch.Tensor:
        """Build the token sequence ([CLS]) + per expert [AGG] + features; return the [AGG] outputs [B, M, D]."""
        b, d = available.shape[0], self.config.d_model
        device = available.device
        feats, types, positions, masks, agg_index = [], [], [], [], []
        full = lambda value, n=1: torch.full((b, n), value, dtype=torch.long, device=device)  # noqa: E731
        if self.config.cls_token:
            feats.append(aggregated[0].new_zeros(b, 1, d)), types.append(full(0)), positions.append(full(POS_AGG))
            masks.append(torch.ones(b, 1, dtype=torch.bool, device=device))
        length = sum(f.shape[1] for f in feats)
        for i, e in enumerate(self.experts):
            agg_index.append(length)
            feats.append(aggregated[i][:, None]), types.append(full(self.type_ids[e])), positions.append(full(POS_AGG))
            masks.append(available[:, i : i + 1])
            length += 1
            if self.config.inputs == "all":
                mask = batch["masks"][e]  # [B, T]
                feats.append(self._project(e, batch["features"][e]))  # [B, T, D]
                types.append(full(self.type_ids[e], mask.shape[1]))
                positions.append(self._positions(batch.get("times", {}).get(e), mask))
                masks.append(mask)
                length += mask.shape[1]
        out = self.video_bert(torch.cat(feats, 1), torch.cat(types, 1), torch.cat(positions, 1),
                              torch.cat(masks, 1))  # [B, L, D]
        return out[:, agg_index]  # [B, M, D]: ψ_agg per expert (§3.1)

    # --- scoring and training ---
    def similarity(self, text: dict[str, torch.Tensor], video: dict[str, torch.Tensor],
                   chunk_size: int = 1024) -> torch.Tensor:
        return mixture_similarity(text, video, chunk_size)

    def index_vectors(self, video: dict[str, torch.Tensor]) -> torch.Tensor:
        """One vector per video for a dot-product index: concat_m a_vm ψ_vm, [N, M*D].

        `query_vectors(text) @ index_vectors(video).T` is eq. 6 exactly when the video has
        every expert (or with keep_missing_experts); otherwise it is the numerator of the
        renormalised score, so re-score the shortlist with `similarity`.
        """
        return (video["experts"] * video["available"][..., None]).flatten(1)

    def query_vectors(self, text: dict[str, torch.Tensor]) -> torch.Tensor:
        """concat_m w_cm φ_cm, [N, M*D] (see `index_vectors`)."""
        return (text["experts"] * text["weights"][..., None]).flatten(1)

    def loss(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        text, video = self.gather(self.encode_text(batch["text"]), self.encode_video(batch["video"]))
        sims = self.similarity(text, video)  # [B, B] (the global batch under torchrun)
        cfg = self.config
        options = ({"temperature": cfg.temperature} if cfg.loss == "infonce"
                   else {"margin": cfg.margin, "normalise": cfg.loss_normalise})
        positives = self.gather.positives(batch.get("positives"))
        out = contrastive_loss(cfg.loss, sims, positives=positives, **options)
        if cfg.expert_loss_weight > 0:  # keeps every expert's own similarity discriminative (no dead experts)
            per_expert = [contrastive_loss(cfg.loss, self.expert_similarity(text, video, i), positives=positives,
                                           **options)["loss"] for i in range(len(self.experts))]
            out["expert_loss"] = torch.stack(per_expert).mean()
            out["loss"] = out["loss"] + cfg.expert_loss_weight * out["expert_loss"]
        return out

    @staticmethod
    def expert_similarity(text: dict[str, torch.Tensor], video: dict[str, torch.Tensor], index: int) -> torch.Tensor:
        """⟨φ^i, ψ_agg^i⟩ of one expert, [n_text, n_video]; 0 where the video lacks the expert."""
        return (text["experts"][:, index] @ video["experts"][:, index].T) * video["available"][None, :, index]
