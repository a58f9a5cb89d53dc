"""`supportset`: Support-set bottlenecks for video-text representation learning (Patrick et al. 2021).

Video (§3.2, appendix 6.1): per-second expert features concatenated (early fusion) →
pre-encoder f (1D CNN, kernels [2, 3, 4, 6]; or a one-layer MLP) → two transformer
pooling layers (eq. 4) → the first output vector c_v. Text: per-token features of a
BERT-family or T5 encoder by path (MiniLM default here; T5 in the paper) → bidirectional
GRU → the same kind of pooling head → c_t. Retrieval scores are cosines.

Loss (§3.1): hardest-negative triplet (eq. 1, α = 0.2) + λ · cross-captioning (eq. 3,
λ = 10): a caption decoder reconstructs each caption from the support-set mixture
ē_v^i = Σ_j W_ij e_v^j, where e_v = Ψ'(v) is the fused (frozen) feature sequence and W
one of the attention variants of `videotext.losses.captioning`.

The decoder is pre-trained, as in the paper (§3.2: "a pre-trained T-5 decoder"): an HF
T5 by path (`decoder_model`), or, for the embedded default where no T5 weights exist, the
bundled MiniLM used as a decoder with new cross-attention (Rothe et al. 2020).
`decoder: scratch` keeps the earlier small decoder trained from nothing.

Departure, a config switch: experts are LayerNorm-ed before fusion (our experts live on
very different scales; `normalize_experts`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from videotext.config import ConfigError
from videotext.losses import hardest_negative_triplet
from videotext.losses.captioning import VARIANTS, mix_support_set, support_set_weights
from videotext.models.base import Method
from videotext.models.layers.caption_decoder import CaptionDecoder, HFCaptionDecoder
from videotext.models.layers.pooling_head import (
    BiGRUPreEncoder, MLPPreEncoder, TemporalCNN, TransformerPoolingHead,
)
from videotext.models.registry import register
from videotext.text import HFTextEncoder, pretrained
from videotext.distributed import gather_with_grad


@dataclass
class SupportSetConfig:
    text_model: str = ""  # HF folder or name, BERT-family or T5 (its encoder stack is loaded); "" = bundled
    # all-MiniLM-L6-v2 (the paper: T5-base, §6.1)
    freeze_text: bool = False  # §3.2: every network but the video encoder Ψ' is fine-tuned
    max_text_tokens: int = 30  # word pieces per caption (§6.2: 100 on MSR-VTT, 256 on ActivityNet)
    embed_dim: int = 1024  # d, appendix 6.1
    heads: int = 4  # appendix 6.1
    ffn_dim: int = 2048  # appendix 6.1
    pooling_layers: int = 2  # §3.2: "a shallow two-layer transformer"
    dropout: float = 0.3  # §6.2 (0.0 on ActivityNet)
    video_pre_encoder: str = "cnn"  # cnn | mlp (appendix 6.1)
    text_pre_encoder: str = "gru"  # gru | cnn | mlp (appendix 6.1: bi-GRU)
    cnn_kernels: list[int] = field(default_factory=lambda: [2, 3, 4, 6])  # appendix 6.1
    normalize_experts: bool = True  # LayerNorm per expert before early fusion (ours; off = paper)
    margin: float = 0.2  # α of eq. 1 (§3.1.1)
    captioning: str = "cross"  # none | identity | full | hybrid | cross (§3.1.2; cross is the paper's)
    caption_weight: float = 10.0  # λ (§3.1.2)
    caption_weight_rule: str = "fixed"  # fixed: λ = caption_weight | balanced: §3.1.2's rule "to ensure similar
    # magnitudes for both losses": λ = triplet / caption on the first training batch, then held (×caption_weight/10)
    detach_attention: bool = False  # control: W (eq. 3) from detached c_t / c_v, so captioning sends no gradient
    # into the embeddings through the attention (the paper lets it through)
    detach_memory: bool = False  # control: e_v detached for the decoder (no caption gradient into Ψ' / expert_norms)
    diagnose: bool = False  # log the gradient each loss sends into the video and text heads: norms, ratio, cosine (slower)
    diagnose_every: int = 1  # diagnose every N-th training step (train.log_every logs every 10th)
    temperature: float = 0.1  # T of eq. 3 (not given in the paper; ours) on cosine similarities
    support_size: int = 0  # support set = blocks of this many batch samples; 0 = the whole batch (Table 1e)
    caption_memory: str = "features"  # features: e_v = Ψ'(v) (eq. 3) | sequence: the video head's output
    decoder: str = "pretrained"  # pretrained: an HF model by path (§3.2 "a pre-trained T-5 decoder") | scratch
    decoder_model: str = ""  # HF folder: a T5 (the paper: T5-base, §6.1) or a BERT-family model used as a
    # decoder with new cross-attention; "" = the bundled all-MiniLM-L6-v2
    decoder_dim: int = 256  # the scratch decoder's sizes (ours)
    decoder_layers: int = 2
    decoder_heads: int = 4
    decoder_ffn_dim: int = 1024
    decoder_dropout: float = 0.1
    max_caption_tokens: int = 32  # decoder positions (BOS … EOS)
    report_beam_size: int = 3  # beam of the captions scored in the run report


@register
class SupportSet(Method):
    name = "supportset"
    Config = SupportSetConfig
    video_inputs = "features"
    report_section = "captioning"  # captioning scores + attention map: videotext.eval.supportset_report

    def __init__(self, config: SupportSetConfig, expert_dims: dict[str, int] | None = None):
        super().__init__(config)
        self._check(config)
        if not expert_dims:
            raise ConfigError("supportset needs the feature dimension of each expert (expert_dims)")
        self.experts = list(expert_dims)
        d = config.embed_dim
        fused_dim = sum(expert_dims.values())
        self.text_encoder = HFTextEncoder(config.text_model, "cls", config.freeze_text, config.max_text_tokens)
        hidden = self.text_encoder.hidden_size
        self.expert_norms = nn.ModuleDict(
            {e: nn.LayerNorm(dim) if config.normalize_experts else nn.Identity() for e, dim in expert_dims.items()}
        )
        head = dict(dim=d, layers=config.pooling_layers, heads=config.heads, ffn_dim=config.ffn_dim,
                    dropout=config.dropout)
        self.video_head = TransformerPoolingHead(self._pre_encoder(config.video_pre_encoder, fused_dim), **head)
        self.text_head = TransformerPoolingHead(self._pre_encoder(config.text_pre_encoder, hidden), **head)
        self.decoder = None
        if config.caption_weight_rule == "balanced":  # λ measured once, saved with the weights (0: not yet)
            self.register_buffer("balanced_weight", torch.zeros(()))
        memory_dim = fused_dim if config.caption_memory == "features" else d
        if config.captioning != "none" and config.decoder == "pretrained":
            try:
                self.decoder = pretrained(config.decoder_model, lambda source: HFCaptionDecoder(
                    source, memory_dim, config.max_caption_tokens, config.decoder_dropout), what="caption decoder")
            except (OSError, ValueError) as exc:
                raise ConfigError(f"model.decoder_model {config.decoder_model!r}: cannot load ({exc})") from None
        elif config.captioning != "none":
            tok = self.text_encoder.tokenizer
            # BERT: [CLS] w… [SEP]; T5 tokenizers add no begin token (w… </s>): the pad id starts
            # decoding (T5's decoder_start_token_id) and is prepended to the targets in `loss`
            self._prepend_bos = tok.cls_token_id is None
            bos = tok.pad_token_id if self._prepend_bos else tok.cls_token_id
            eos = tok.sep_token_id if tok.sep_token_id is not None else tok.eos_token_id
            self.decoder = CaptionDecoder(
                len(tok), memory_dim,
                bos_id=bos, eos_id=eos, pad_id=tok.pad_token_id,
                dim=config.decoder_dim, layers=config.decoder_layers, heads=config.decoder_heads,
                ffn_dim=config.decoder_ffn_dim, dropout=config.decoder_dropout, max_len=config.max_caption_tokens,
            )

    @staticmethod
    def _check(config: SupportSetConfig) -> None:
        choices = {"video_pre_encoder": ("cnn", "mlp"), "text_pre_encoder": ("gru", "cnn", "mlp"),
                   "captioning": VARIANTS, "caption_memory": ("features", "sequence"),
                   "decoder": ("pretrained", "scratch"), "caption_weight_rule": ("fixed", "balanced")}
        for key, allowed in choices.items():
            if getattr(config, key) not in allowed:
                raise ConfigError(f"model.{key}: expected one of {list(allowed)}, got {getattr(config, key)!r}")
        if config.embed_dim % config.heads:
            raise ConfigError(f"model.embed_dim={config.embed_dim} is not divisible by model.heads={config.heads}")

    def _pre_encoder(self, kind: str, in_dim: int) -> nn.Module:
        cfg = self.config
        if kind == "cnn":
            return TemporalCNN(in_dim, cfg.embed_dim, cfg.cnn_kernels, cfg.dropout)
        if kind == "gru":
            return BiGRUPreEncoder(in_dim, cfg.embed_dim, cfg.dropout)
        return MLPPreEncoder(in_dim, cfg.embed_dim, cfg.dropout)

    # --- text ----------------------------------------------------------------------------
    def prepare_text(self, texts: list[str]) -> dict[str, Any]:
        batch = self.text_encoder.tokenize(texts)
        if isinstance(self.decoder, HFCaptionDecoder):  # the decoder's own vocabulary
            batch["caption_ids"] = self.decoder.tokenize(texts)
        return batch

    def token_features(self, batch: dict[str, Any]) -> torch.Tensor:
        """Per-token encoder states [B, L, H]; a frozen encoder's are cached per caption."""
        return self.text_encoder.token_features(batch)

    def encode_text(self, batch: dict[str, Any]) -> torch.Tensor:
        c_t, _ = self.text_head(self.token_features(batch), batch["attention_mask"].bool())
        return F.normalize(c_t, dim=-1)  # [B, d]

    # --- video ---------------------------------------------------------------------------
    def fuse_experts(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Early fusion (§3.2): per-step concatenation of the experts → e_v [B, T, ΣD_e], mask [B, T].

        Experts are aligned by step index (they share the extraction rate); a shorter or
        missing expert is zero-padded, and a step is real if any expert has it.
        """
        steps = max(batch["features"][e].shape[1] for e in self.experts)
        parts, masks = [], []
        for e in self.experts:
            x, m = batch["features"][e], batch["masks"][e]  # [B, T_e, D_e], [B, T_e]
            x = self.expert_norms[e](x) * m.unsqueeze(-1)
            parts.append(F.pad(x, (0, 0, 0, steps - x.shape[1])))
            masks.append(F.pad(m, (0, steps - m.shape[1])))
        return torch.cat(parts, -1), torch.stack(masks).any(0)

    def video_states(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(c_v [B, d] normalised, e_v [B, T, ΣD], mask [B, T], head sequence [B, T, d])."""
        e_v, mask = self.fuse_experts(batch)
        c_v, sequence = self.video_head(e_v, mask)
        return F.normalize(c_v, dim=-1), e_v, mask, sequence

    def encode_video(self, batch: dict[str, Any]) -> torch.Tensor:
        return self.video_states(batch)[0]

    # --- training ------------------------------------------------------------------------
    def caption_memory(self, e_v: torch.Tensor, mask: torch.Tensor,
                       sequence: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What the decoder reads: the fused features e_v (eq. 3) or the video head's sequence."""
        if self.config.caption_memory == "sequence":
            mask = mask.clone()
            mask[:, 0] = True  # the pooling head always keeps the first step
            return sequence, mask
        return e_v, mask

    def support_attention(self, batch: dict[str, Any]) -> torch.Tensor:
        """The support-set attention W [B, B] of a training batch (for plots, paper Fig. 3)."""
        variant = "cross" if self.config.captioning == "none" else self.config.captioning
        c_v = self.encode_video(batch["video"])
        c_t = self.encode_text(batch["text"])
        return support_set_weights(c_t, c_v, variant, self.config.temperature, self.config.support_size or None)

    def loss(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        cfg = self.config
        c_t = self.encode_text(batch["text"])
        c_v, e_v, mask, sequence = self.video_states(batch["video"])
        c_t, c_v = self.gather(c_t, c_v)  # global batch (support set) under torchrun
        positives = self.gather.positives(batch.get("positives"))
        parts = hardest_negative_triplet(c_t @ c_v.T, margin=cfg.margin, positives=positives)
        out = {"loss": parts["loss"], "contrast": parts["loss"], "t2v": parts["t2v"], "v2t": parts["v2t"]}
        if self.decoder is not None:
            w_t, w_v = (c_t.detach(), c_v.detach()) if cfg.detach_attention else (c_t, c_v)
            weights = support_set_weights(w_t, w_v, cfg.captioning, cfg.temperature, cfg.support_size or None)
            if cfg.detach_memory:
                e_v, sequence = e_v.detach(), sequence.detach()
            memory, memory_mask = self.gather(*self.caption_memory(e_v, mask, sequence))
            if "caption_ids" in batch["text"]:  # a pre-trained decoder's targets
                targets = batch["text"]["caption_ids"]
            else:
                targets = batch["text"]["input_ids"]
                if self._prepend_bos:  # T5 tokenizers: w… </s> → BOS w… </s>
                    targets = F.pad(targets, (1, 0), value=self.decoder.bos_id)
            if self.gather.active:  # every rank decodes the global batch's captions
                targets = gather_with_grad(targets, pad_value=self.decoder.pad_id)
            memory, memory_mask = mix_support_set(weights, memory, memory_mask)
            caption = self.decoder.nll(targets, memory, memory_mask)
            weight = self.caption_lambda(parts["loss"], caption)
            out.update(caption=caption, caption_lambda=torch.tensor(weight), caption_weighted=weight * caption)
            if cfg.diagnose and torch.is_grad_enabled() and self._diagnose_now():
                out.update(self.gradient_norms({"contrast": parts["loss"], "caption": weight * caption}))
            out["loss"] = out["loss"] + weight * caption
        return out

    def caption_lambda(self, triplet: torch.Tensor, caption: torch.Tensor) -> float:
        """λ of eq. 3's weighting: `caption_weight`, or under `caption_weight_rule: balanced` the ratio
        triplet / caption of the first training batch (§3.1.2: "to ensure similar magnitudes for both
        losses"), scaled by caption_weight / 10 and kept in the checkpoint."""
        cfg = self.config
        if cfg.caption_weight_rule == "fixed":
            return cfg.caption_weight
        if float(self.balanced_weight) == 0.0 and self.training:
            ratio = float(triplet.detach()) / max(float(caption.detach()), 1e-8)
            self.balanced_weight.fill_(max(ratio, 1e-8) * cfg.caption_weight / 10.0)
        return float(self.balanced_weight) or cfg.caption_weight

    def _diagnose_now(self) -> bool:
        """Every `diagnose_every`-th training call (a step, without accumulation), counted from the
        process start: with diagnose_every = train.log_every, the diagnosed steps are the logged ones."""
        self._diagnose_calls = getattr(self, "_diagnose_calls", 0) + 1
        return self._diagnose_calls % max(self.config.diagnose_every, 1) == 0

    def gradient_norms(self, losses: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The gradient each loss alone sends into the video head and the text head (the networks
        that make c_v and c_t): its L2 norm `grad_<head>_<loss>`; with exactly two losses (a, b) also
        their ratio `grad_<head>_ratio` = |∇b| / |∇a| (size) and cosine `grad_<head>_cosine` (direction:
        below 0, b pulls the head against a)."""
        heads = {"video": [p for p in self.video_head.parameters() if p.requires_grad],
                 "text": [p for p in self.text_head.parameters() if p.requires_grad]}
        params = [p for group in heads.values() for p in group]
        out: dict[str, torch.Tensor] = {}
        flat: dict[tuple[str, str], torch.Tensor] = {}
        for name, loss in losses.items():
            grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
            start = 0
            for head, group in heads.items():
                parts = [torch.zeros(p.numel()) if g is None else g.detach().float().reshape(-1)
                         for p, g in zip(group, grads[start:start + len(group)])]
                start += len(group)
                vector = torch.cat(parts) if parts else torch.zeros(1)
                flat[head, name] = vector
                out[f"grad_{head}_{name}"] = vector.norm()
        if len(losses) == 2:
            first, second = losses
            for head in heads:
                a, b = flat[head, first], flat[head, second]
                out[f"grad_{head}_ratio"] = b.norm() / a.norm().clamp_min(1e-12)
                out[f"grad_{head}_cosine"] = torch.dot(a, b) / (a.norm() * b.norm()).clamp_min(1e-12)
        return out

    # --- captioning ----------------------------------------------------------------------
    @torch.no_grad()
    def caption(self, batch: dict[str, Any], beam_size: int = 1, max_len: int | None = None,
                length_penalty: float = 0.6) -> list[str]:
        """Captions for a video batch, each generated from its own video (S_i = {i})."""
        if self.decoder is None:
            raise ConfigError("this supportset model has no caption decoder (model.captioning: none)")
        _, e_v, mask, sequence = self.video_states(batch)
        memory, memory_mask = self.caption_memory(e_v, mask, sequence)
        ids = self.decoder.generate(memory, memory_mask, beam_size, max_len, length_penalty)
        tokenizer = getattr(self.decoder, "tokenizer", None) or self.text_encoder.tokenizer
        return [tokenizer.decode(row, skip_special_tokens=True).strip() for row in ids]
