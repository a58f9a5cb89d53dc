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

import zlib
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from videotext.config import ConfigError
from videotext.data.loaders import CaptionVideoBatches, VideoFeatures, subsample_steps, video_batches
from videotext.data.schema import VideoTextDataset
from videotext.losses import contrastive_loss
from videotext.models.base import Method, register
from videotext.models.layers.gated_unit import GatedEmbeddingUnit
from videotext.models.layers.mmt_bert import MMTBert
from videotext.models.layers.pooling import masked_pool
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


# --- data: features with their timestamps ------------------------------------------------
class MMTFeatures:
    """One video's expert features, timestamps and pooled (max / mean) vectors.

    The pooled vectors cover every step of the video, before sub-sampling to
    `max_steps` (as the official loader's max-pool). A store entry flagged `missing`
    (no audio, no speech) or absent gives zero steps. With `shuffle`, features are
    permuted against their timestamps by a fixed per-video permutation (Table 3a
    "shuffled feats"): the temporal embedding then carries no order.
    """

    def __init__(self, store: Any, experts: Sequence[str], max_steps: int, shuffle: bool = False,
                 missing: Sequence[str] = ()):
        self.store, self.experts, self.max_steps, self.shuffle = store, list(experts), max_steps, shuffle
        self.missing = set(missing)  # experts read as missing for every video (test-time removal)
        self.dims = {e: int(store.dim(e)) for e in self.experts}

    @classmethod
    def wrap(cls, reader: VideoFeatures, shuffle: bool = False) -> "MMTFeatures":
        if isinstance(reader, MMTFeatures):
            return reader
        return cls(reader.store, reader.experts, reader.max_steps, shuffle)

    def __call__(self, key: str) -> dict[str, dict[str, np.ndarray]]:
        out: dict[str, dict[str, np.ndarray]] = {"features": {}, "times": {}, "max": {}, "mean": {}}
        for expert in self.experts:
            dim = self.dims[expert]
            values, times = np.zeros((0, dim), np.float32), np.zeros(0, np.float64)
            if expert not in self.missing and self.store.has(expert, key) and not self.store.is_missing(expert, key):
                values, times = self.store.get(expert, key)
                values = np.asarray(values, dtype=np.float32).reshape(-1, dim)
                times = np.asarray(times, dtype=np.float64).reshape(-1)
            out["max"][expert] = values.max(0) if len(values) else np.zeros(dim, np.float32)
            out["mean"][expert] = values.mean(0) if len(values) else np.zeros(dim, np.float32)
            keep = subsample_steps(len(values), self.max_steps)
            times = times[keep] if len(times) == len(values) else np.full(len(keep), np.nan)  # no stamps: T_unk
            values = values[keep]
            if self.shuffle and len(values) > 1:
                perm = np.random.default_rng(zlib.crc32(f"{expert}/{key}".encode())).permutation(len(values))
                values = values[perm]
            out["features"][expert], out["times"][expert] = values, times
        return out


def collate_mmt(items: list[dict[str, dict[str, np.ndarray]]], experts: Sequence[str]) -> dict[str, Any]:
    """Pad per expert: {"features" {e: [B, T, D]}, "masks" {e: [B, T] bool}, "times" {e: [B, T]}
    (NaN = unknown / padding), "pooled_max" / "pooled_mean" {e: [B, D]}}."""
    batch: dict[str, Any] = {"features": {}, "masks": {}, "times": {}, "pooled_max": {}, "pooled_mean": {}}
    for expert in experts:
        seqs = [item["features"][expert] for item in items]
        length = max(1, max(len(s) for s in seqs))
        padded = np.zeros((len(seqs), length, seqs[0].shape[1]), np.float32)
        mask = np.zeros((len(seqs), length), bool)
        times = np.full((len(seqs), length), np.nan, np.float32)
        for i, (seq, item) in enumerate(zip(seqs, items)):
            padded[i, : len(seq)], mask[i, : len(seq)] = seq, True
            times[i, : len(seq)] = item["times"][expert]
        batch["features"][expert] = torch.from_numpy(padded)
        batch["masks"][expert] = torch.from_numpy(mask)
        batch["times"][expert] = torch.from_numpy(times)
        batch["pooled_max"][expert] = torch.from_numpy(np.stack([it["max"][expert] for it in items]))
        batch["pooled_mean"][expert] = torch.from_numpy(np.stack([it["mean"][expert] for it in items]))
    return batch


class MMTCaptionBatches(CaptionVideoBatches):
    """The shared caption-video batches (same seeded order and caption choice), with timestamps."""

    def batch(self, epoch: int, index: int) -> dict[str, Any]:
        ids = [self.video_ids[i] for i in self.positions(epoch, index)]
        video = collate_mmt([self.read_features(self.dataset[i].key) for i in ids], self.read_features.experts)
        video["video_ids"] = ids
        texts = [self.caption_for(i, epoch) for i in ids]
        return {"video": video, "text": self.prepare_text(texts), "video_ids": ids}


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

    def _reader(self, read_features: Any) -> MMTFeatures:
        return MMTFeatures.wrap(read_features, shuffle=self.config.feature_order == "shuffled")

    def train_batches(self, dataset: Any, read_features: Any, batch_size: int, seed: int) -> MMTCaptionBatches:
        return MMTCaptionBatches(dataset, self._reader(read_features), self.prepare_text, batch_size, seed)

    def video_batches(self, dataset: Any, read_features: Any, batch_size: int) -> Iterator[dict[str, Any]]:
        return video_batches(dataset, self._reader(read_features), batch_size, collate=collate_mmt)

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

    # --- run report ------------------------------------------------------------------------
    def report_extras(self, dataset: Any, read_features: Any, report_dir: Any, device: Any = "cpu") -> dict[str, Any]:
        """Per-expert view of the test split: the mean mixture weight w_i(c) of the captions
        (eq. 7) and t2v R@1 with each expert removed at test time (read as a missing expert:
        no tokens; weight renormalised away unless keep_missing_experts). The paper's Fig. 4 *retrains* without the expert:
        `videotext compare` over such runs gives that plot."""
        from pathlib import Path

        from videotext.eval.evaluate import Encoded, encode_split, encode_videos, evaluate_encoded
        from videotext.eval.report import _new_figure, _save

        reader = self._reader(read_features)
        encoded = encode_split(self, dataset, reader, device=device)
        if not encoded.refs or len(encoded.video_ids) < 2:
            return {}
        rows = {"t2v, all experts": evaluate_encoded(self, encoded)["t2v"]}
        mean_weights = encoded.text["weights"].mean(0)  # [M]
        was_training = self.training
        self.eval()
        try:
            for expert in self.experts:  # read as missing: no tokens, then as missing_agg / keep_missing_experts say
                drop = MMTFeatures(reader.store, reader.experts, reader.max_steps, reader.shuffle, missing=[expert])
                video = encode_videos(self, dataset, drop, device=device)
                rows[f"t2v without {expert}"] = evaluate_encoded(self, Encoded(encoded.text, video, encoded.refs,
                                                                               encoded.video_ids))["t2v"]
        finally:
            self.train(was_training)
        alone = {f"t2v, {expert} alone": evaluate_encoded(  # ⟨φ^i, ψ^i⟩ only: a dead expert is near chance
            self, encoded, sims=self.expert_similarity(encoded.text, encoded.video, i))["t2v"]
            for i, expert in enumerate(self.experts)}
        report_dir = Path(report_dir)
        report_dir.mkdir(parents=True, exist_ok=True)
        fig, (left, middle, right) = _new_figure(13.0, 3.2, ncols=3)
        labels = list(rows)
        left.bar(range(len(labels)), [r["R1"] for r in rows.values()], color="#1f77b4")
        left.set_xticks(range(len(labels)), [label.removeprefix("t2v ") for label in labels], rotation=20, ha="right")
        left.set_ylabel("t2v R@1 (%)")
        left.set_title("expert removed at test time")
        middle.bar(range(len(self.experts)), [r["R1"] for r in alone.values()], color="#2ca02c")
        middle.set_xticks(range(len(self.experts)), self.experts, rotation=20, ha="right")
        middle.set_ylabel("t2v R@1 (%)")
        middle.set_title("one expert's similarity alone")
        right.bar(range(len(self.experts)), mean_weights.tolist(), color="#ff7f0e")
        right.set_xticks(range(len(self.experts)), self.experts, rotation=20, ha="right")
        right.set_ylabel("mean mixture weight w_i(c)")
        right.set_title(f"{len(encoded.refs)} test captions (eq. 7)")
        png = report_dir / "mmt_experts.png"
        _save(fig, png)
        weights = ", ".join(f"{e} {w:.3f}" for e, w in zip(self.experts, mean_weights.tolist()))
        return {"tables": {"each expert removed at test time (no retraining)": rows,
                           "each expert's own similarity ⟨φ^i, ψ^i⟩ alone (same model)": alone},
                "notes": [f"Mean mixture weight per expert over {len(encoded.refs)} test captions: {weights}."],
                "figures": [(png.name, "Left: t2v R@1 with each expert removed at test time. Middle: t2v R@1 of "
                                  "each expert's own similarity (near chance = a dead expert). Right: the mean "
                                  "mixture weight the captions give each expert. Leave-one-out *training* (paper Fig. 4 "
                                  "middle) is `videotext compare` over runs trained without each expert.")]}
