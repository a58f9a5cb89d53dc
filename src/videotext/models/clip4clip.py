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

Input (`input`): `features` runs the image tower once in the `clip` expert (precomputed,
frozen); `frames` decodes pixels and trains the image tower end to end, as the paper does
(§3.1). CLIP (text tower, `logit_scale`, image tower) is fine-tuned at lr 1e-7 while new layers
use 1e-4 (§4.2; configs set `optim.lr: 1e-4` and `optim.lr_scale: {text_encoder: 0.001, visual: 0.001}`).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from videotext import openclip
from videotext.config import ConfigError
from videotext.data.frames import FrameBatches, FrameSpec, cached_source, eval_video_batches
from videotext.losses import info_nce
from videotext.models.base import Method
from videotext.models.layers.pooling import masked_pool
from videotext.models.registry import register
from videotext.text.openclip import OpenCLIPTextEncoder

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
    # input: features = the `clip` expert (image tower run once, frozen); frames = pixels through
    # the image tower end to end (§3.1; `data.experts: []`), `num_frames` per video
    input: str = "features"
    num_frames: int = 12  # §4.2 (frames mode; features mode caps with data.max_steps_per_expert)
    frame_cache: str = "memory"  # memory | off | folder (decoded frames, see videotext.data.frames)


@register
class CLIP4Clip(Method):
    name = "clip4clip"
    Config = CLIP4ClipConfig
    video_inputs = "features"

    def __init__(self, config: CLIP4ClipConfig, expert_dims: dict[str, int] | None = None):
        super().__init__(config)
        if config.sim_header not in SIM_HEADERS:
            raise ConfigError(f"model.sim_header: expected one of {SIM_HEADERS}, got {config.sim_header!r}")
        if config.input not in ("features", "frames"):
            raise ConfigError(f"model.input: expected features or frames, got {config.input!r}")
        spec = f"{openclip.SPEC_PREFIX}{config.clip_model}" + (f"@{config.pretrained}" if config.pretrained else "")
        self.text_encoder = OpenCLIPTextEncoder(spec, config.freeze_text, config.max_text_tokens)
        dim = self.text_encoder.hidden_size
        if config.input == "frames":
            self.video_inputs = "frames"
            self.visual = openclip.load_clip(config.clip_model, config.pretrained).visual  # CLIP's image tower
            self.preprocess = openclip.image_preprocess(config.clip_model, config.pretrained)
        elif expert_dims is not None and expert_dims.get(config.expert) != dim:
            raise ConfigError(f"clip4clip: expert {config.expert!r} has dims {expert_dims.get(config.expert)}, but "
                              f"{config.clip_model}'s embedding is {dim}-d (extract it with the same CLIP model)")
        if config.sim_header == "seqLSTM":
            self.lstm_visual = nn.LSTM(dim, dim, batch_first=True)
        elif config.sim_header == "seqTransf":
            self.frame_position_embeddings = nn.Embedding(config.max_frames, dim)
            self.transformer_clip = self._frame_transformer(dim)

    def _frame_transformer(self, dim: int) -> nn.Module:
        """The first `transformer_layers` blocks of CLIP's text transformer (and its positional
        embeddings into the frame positions) when the widths match; else (another width, or an HF
        text tower such as xlm-roberta's) a fresh transformer."""
        from open_clip.transformer import Transformer

        tower = self.text_encoder.tower
        layers = self.config.transformer_layers
        own = getattr(tower, "transformer", None)
        if isinstance(own, Transformer) and own.width == dim and len(own.resblocks) >= layers:
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

    def pool_frames(self, frames: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Frame embeddings [B, T, E] with valid mask [B, T] → unit video vectors [B, E]."""
        states = F.normalize(self.frame_states(frames, mask), dim=-1)
        return F.normalize(masked_pool(states, mask, "mean"), dim=-1)  # [B, E]

    def encode_video(self, batch: dict[str, Any]) -> torch.Tensor:
        if "frames" not in batch:
            expert = self.config.expert
            return self.pool_frames(batch["features"][expert].float(), batch["masks"][expert])
        clips = batch["frames"]  # [K, F, 3, S, S]
        count, frames = clips.shape[:2]
        embedded = self.visual(clips.flatten(0, 1)).float().view(count, frames, -1)  # [K, F, E]
        vectors = self.pool_frames(embedded, torch.ones(count, frames, dtype=torch.bool, device=clips.device))
        owner = batch.get("clip_video")  # test clips → their video (one clip per video here)
        if owner is None:
            return vectors
        sums = vectors.new_zeros(len(batch["video_ids"]), vectors.shape[1]).index_add_(0, owner, vectors)
        return F.normalize(sums, dim=-1)

    # --- loss ------------------------------------------------------------------------------
    @property
    def logit_scale(self) -> torch.Tensor:
        """CLIP's learned inverse temperature, exp(log scale) (CLIP §2.5; 100 for the OpenAI weights)."""
        return self.text_encoder.model.logit_scale.exp()

    def loss(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        return self.loss_from_embeddings(self.encode_text(batch["text"]), self.encode_video(batch["video"]), batch)

    def chunk_inputs(self, batch: dict[str, Any]) -> tuple[Any, Any]:
        return batch["text"], batch["video"]

    def loss_from_embeddings(self, text: torch.Tensor, video: torch.Tensor, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        text, video = self.gather(text, video)
        sims = text @ video.T  # [B, B] cosine
        return info_nce(sims, temperature=1.0 / self.logit_scale, positives=self.gather.positives(batch.get("positives")),
                        reduction="mean")

    # --- frames input (end to end) ---------------------------------------------------------
    def frame_spec(self):
        """CLIP's transform, open_clip's own (`videotext.openclip.FramePreprocess`): frames decoded at
        their native size, shorter side resized to the input size (bicubic, PIL); at test its centre
        crop and mean / std, so test pixels are open_clip's eval transform of each frame; in training
        a square crop of the whole shorter side at a random position, no flip. One test clip of
        `num_frames` frames at the segment centres."""
        pre = self.preprocess
        return FrameSpec(pre["size"], pre["mean"], pre["std"], crop_scale=(1.0, 1.0), flip=0.0, test_stride=0.0,
                         max_test_clips=1, cache=self.config.frame_cache, cache_fps=1.0,
                         preprocess=openclip.FramePreprocess(pre))

    @property
    def streams_shards(self) -> bool:  # type: ignore[override]  # frames do not stream from shards yet
        return self.config.input == "features"

    def train_batches(self, dataset: Any, read_features: Any, batch_size: int, seed: int) -> Any:
        if self.config.input == "features":
            return super().train_batches(dataset, read_features, batch_size, seed)
        return FrameBatches(dataset, cached_source(self, dataset, self.frame_spec()), self.prepare_text, batch_size,
                            seed, lambda epoch: self.config.num_frames)

    def video_batches(self, dataset: Any, read_features: Any, batch_size: int) -> Any:
        if self.config.input == "features":
            return super().video_batches(dataset, read_features, batch_size)
        return eval_video_batches(dataset, cached_source(self, dataset, self.frame_spec()), self.config.num_frames,
                                  min(batch_size, 32))

    @property
    def reads_subsampled_steps(self) -> bool:
        return self.config.input == "features"  # features: the default reader; frames: its own sampling

    # --- index build: extract new videos with this run's image tower --------------------
    def expert_options(self) -> dict[str, dict[str, Any]]:
        """Options of the `clip` expert that gives this run's frame embeddings (features input)."""
        if self.config.input == "frames":
            return {}
        return {self.config.expert: {"model": self.config.clip_model, "pretrained": self.config.pretrained}}
