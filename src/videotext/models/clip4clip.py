"""`clip4clip`: CLIP4Clip (Luo et al. 2021), CLIP's two towers fine-tuned for video-text retrieval.

Video: CLIP image embeddings of sampled frames (the `clip` expert, §3.1: 1 frame per
second, at most 12, §4.2) → a similarity calculator (§3.3) → L2-normalise per frame →
masked mean over frames → L2-normalise. Text: CLIP's text tower, end-of-text token →
text projection (§3.2), ≤ 32 tokens (§4.2). Score: cosine, scaled by CLIP's learned logit
scale in the loss, the symmetric InfoNCE (§3.4, eq. 5–7: mean of the text→video and
video→text cross-entropies).

Calculators (`sim_header`, §3.3):
- `meanP` — parameter-free mean pooling; with no training it is zero-shot CLIP (the run
  that `videotext convert openclip` writes);
- `seqLSTM` — an LSTM over the frames, added to its input (residual);
- `seqTransf` — frame position embeddings + a 4-layer transformer over the frames
  (padded frames masked out), added to its input; initialised from CLIP's text
  positional embeddings and first text blocks when the widths match (as the official code).

The image tower runs in the `clip` expert (features precomputed, frozen); the text tower
and `logit_scale` are fine-tuned at lr 1e-7 while new layers use 1e-4 (§4.2; configs set
`optim.lr_scale: {text_encoder: 0.001}` with `optim.lr: 1e-4`).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from videotext.config import ConfigError
from videotext.losses import info_nce
from videotext.models.base import Method, register
from videotext.train.distributed import gather_for_loss, gather_positives

SIM_HEADERS = ("meanP", "seqLSTM", "seqTransf")
MASKED = -1e6  # additive attention mask of padded frames (the official value)


@dataclass
class CLIP4ClipConfig:
    clip_model: str = "ViT-B-32"  # §4.2: ViT-B/32 (open_clip name or a model-config JSON)
    pretrained: str = ""  # open_clip tag (openai), checkpoint file, or "" for seeded random weights
    expert: str = "clip"  # feature-store expert holding the CLIP frame embeddings
    sim_header: str = "meanP"  # meanP | seqLSTM | seqTransf (§3.3)
    max_text_tokens: int = 32  # §4.2
    freeze_text: bool = False
    transformer_layers: int = 4  # seqTransf depth (official cross_num_hidden_layers = 4)
    max_frames: int = 77  # frame position embeddings (CLIP's text context, from which they are copied)


@register
class CLIP4Clip(Method):
    name = "clip4clip"
    Config = CLIP4ClipConfig
    video_inputs = "features"

    def __init__(self, config: CLIP4ClipConfig, expert_dims: dict[str, int] | None = None):
        super().__init__(config)
        from videotext.text.openclip import OpenCLIPTextEncoder
        from videotext import openclip

        if config.sim_header not in SIM_HEADERS:
            raise ConfigError(f"model.sim_header: expected one of {SIM_HEADERS}, got {config.sim_header!r}")
        spec = f"{openclip.SPEC_PREFIX}{config.clip_model}" + (f"@{config.pretrained}" if config.pretrained else "")
        self.text_encoder = OpenCLIPTextEncoder(spec, config.freeze_text, config.max_text_tokens)
        dim = self.text_encoder.hidden_size
        if expert_dims is not None and expert_dims.get(config.expert) != dim:
            raise ConfigError(f"clip4clip: expert {config.expert!r} has dims {expert_dims.get(config.expert)}, but "
                              f"{config.clip_model}'s embedding is {dim}-d (extract it with the same CLIP model)")
        if config.sim_header == "seqLSTM":
            self.lstm_visual = nn.LSTM(dim, dim, batch_first=True)
        elif config.sim_header == "seqTransf":
            self.frame_position_embeddings = nn.Embedding(config.max_frames, dim)
            self.transformer_clip = self._frame_transformer(dim)

    def _frame_transformer(self, dim: int) -> nn.Module:
        """The first `transformer_layers` blocks of CLIP's text transformer (and its positional
        embeddings into the frame positions) when the widths match; else a fresh transformer."""
        from open_clip.transformer import Transformer

        tower = self.text_encoder.tower
        layers = self.config.transformer_layers
        if tower.transformer.width == dim and len(tower.transformer.resblocks) >= layers:
            blocks = copy.deepcopy(tower.transformer)
            blocks.resblocks = blocks.resblocks[:layers]
            blocks.layers = layers
            rows = min(self.config.max_frames, tower.positional_embedding.shape[0])
            with torch.no_grad():
                self.frame_position_embeddings.weight[:rows] = tower.positional_embedding[:rows]
            return blocks
        return Transformer(dim, layers, max(1, dim // 64))

    # --- text --------------------------------------------------------------------------
    def prepare_text(self, texts: list[str]) -> dict[str, Any]:
        return self.text_encoder.tokenize(texts)

    def encode_text(self, batch: dict[str, Any]) -> torch.Tensor:
        return F.normalize(self.text_encoder(batch), dim=-1)  # [B, E]

    # --- video -------------------------------------------------------------------------
    def frame_states(self, frames: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The similarity calculator over frames: [B, T, E], valid mask [B, T] → [B, T, E]."""
        header = self.config.sim_header
        if header == "meanP":
            return frames
        if header == "seqLSTM":
            lengths = mask.sum(1).clamp_min(1).cpu()
            packed = pack_padded_sequence(frames, lengths, batch_first=True, enforce_sorted=False)
            out, _ = pad_packed_sequence(self.lstm_visual(packed)[0], batch_first=True, total_length=frames.shape[1])
            return out + frames  # [B, T, E]; padded steps stay the input (masked in the mean)
        positions = torch.arange(frames.shape[1], device=frames.device)
        if frames.shape[1] > self.config.max_frames:
            raise ConfigError(f"clip4clip seqTransf: {frames.shape[1]} frames > model.max_frames {self.config.max_frames}")
        x = frames + self.frame_position_embeddings(positions)[None]  # [B, T, E]
        heads = self._heads()
        keys = (~mask).to(x.dtype) * MASKED  # [B, T]: padded frames are never attended to
        attn_mask = keys[:, None, :].expand(-1, frames.shape[1], -1).repeat_interleave(heads, 0)  # [B·heads, T, T]
        return self.transformer_clip(x, attn_mask=attn_mask) + frames

    def _heads(self) -> int:
        return int(self.transformer_clip.resblocks[0].attn.num_heads)

    def encode_video(self, batch: dict[str, Any]) -> torch.Tensor:
        frames = batch["features"][self.config.expert].float()  # [B, T, E]
        mask = batch["masks"][self.config.expert]  # [B, T] bool
        states = F.normalize(self.frame_states(frames, mask), dim=-1)
        valid = mask.unsqueeze(-1).to(states.dtype)  # [B, T, 1]
        pooled = (states * valid).sum(1) / valid.sum(1).clamp_min(1.0)
        return F.normalize(pooled, dim=-1)  # [B, E]

    # --- loss ------------------------------------------------------------------------------
    @property
    def logit_scale(self) -> torch.Tensor:
        """CLIP's learned inverse temperature, exp(log scale) (CLIP §2.5; 100 for the OpenAI weights)."""
        return self.text_encoder.model.logit_scale.exp()

    def loss(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        text, video = gather_for_loss(self.encode_text(batch["text"]), self.encode_video(batch["video"]))
        sims = text @ video.T  # [B, B] cosine
        return info_nce(sims, temperature=1.0 / self.logit_scale, positives=gather_positives(batch.get("positives")),
                        reduction="mean")

    # --- index build: extract new videos with this run's image tower --------------------
    def expert_options(self) -> dict[str, dict[str, Any]]:
        """Options of the `clip` expert that gives this run's frame embeddings."""
        return {self.config.expert: {"model": self.config.clip_model, "pretrained": self.config.pretrained}}
