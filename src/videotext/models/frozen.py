"""`frozen`: Frozen in Time (Bain et al. 2021), end to end from pixels.

Video: the space-time transformer (`models/layers/space_time.py`) → [CLS] → Linear to
256 (§3.1). Text: a BERT-family encoder ([CLS] of the last layer, §3.1; MiniLM by
default here, DistilBERT in the paper) → Linear. Both L2-normalised; the loss is the
symmetric InfoNCE with σ = 0.05 (eq. 2–3, §4.3).

Data (this method reads pixels, `video_inputs = "frames"`, `data.experts: []`):
`train_batches` / `video_batches` build pixel batches with `videotext.data.frames`.
Two training features need more than the one train split the trainer hands over, so
they live in this method's config and `train_batches`:
- joint image-video training (§3.2): `image_manifest` (its `image_split`) is loaded and
  its batches (size `image_batch_size`, images as 1-frame videos) alternate with the
  video batches;
- the frame curriculum (§3.2, §4.5): `frame_schedule` (frame counts) starting at
  `frame_schedule_epochs`; when a batch has more frames than the model has trained on,
  the temporal embeddings are expanded (`temporal_expansion`: zeros | nearest |
  bilinear, appendix Table 7) before the forward pass. The count trained so far is a
  buffer in the state dict, so a resumed run never expands twice.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from videotext import openclip
from videotext.config import ConfigError
from videotext.data.frames import (
    AlternatingBatches, FrameBatches, FrameSpec, cached_source, eval_video_batches,
)
from videotext.data.schema import VideoTextDataset
from videotext.data.streaming.training import ClipShards, ImageShards
from videotext.errors import VideoTextError, closest
from videotext.hub import from_hub
from videotext.losses import info_nce
from videotext.models.base import Method
from videotext.models.layers.space_time import (CLIP_LN_EPS, CLS_MODES, EXPANSIONS, LN_EPS, RESIDUALS,
                                                 SpaceTimeTransformer)
from videotext.models.registry import register
from videotext.runtime import full_precision
from videotext.text import build_text_encoder

# Video-encoder sizes: `base` is the paper's ViT-B/16 at 224 (appendix §2.1); the others
# are CPU presets (`small`: 4 blocks, D = 192, P = 8 on 64×64 frames; `mini`: the synthetic
# runs on a shared 2-core CPU, 48×48 frames, D = 128; `tiny` for tests).
PRESETS: dict[str, dict[str, int]] = {
    "base": {"img_size": 224, "patch_size": 16, "video_dim": 768, "depth": 12, "heads": 12},
    "small": {"img_size": 64, "patch_size": 8, "video_dim": 192, "depth": 4, "heads": 3},
    "mini": {"img_size": 48, "patch_size": 8, "video_dim": 128, "depth": 4, "heads": 4},
    "tiny": {"img_size": 32, "patch_size": 8, "video_dim": 32, "depth": 2, "heads": 2},
}


@dataclass
class FrozenConfig:
    # video encoder (§3.1, appendix §2.1); 0 = the preset's value
    preset: str = "base"
    img_size: int = 0
    patch_size: int = 0
    video_dim: int = 0
    depth: int = 0
    heads: int = 0
    mlp_ratio: float = 4.0
    num_frames: int = 4  # M: frames per clip (§4.3 default 4-frame model); temporal_embed size
    residual: str = "frozen"  # frozen (appendix Fig. 2 right) | timesformer (left, the ablation)
    cls_attention: str = "shared"  # shared (official) | per_frame (see layers/space_time.py)
    time_init: str = "zeros"  # §3.2: temporal attention starts as a no-op
    vit_checkpoint: str = ""  # spatial init (§3.2): a timm ViT state dict file, timm:NAME[@FILE] or openclip:ARCH@PRETRAINED
    fused_attention: bool = True  # scaled_dot_product_attention; False = plain einsum (bench)
    # text encoder (§3.1)
    text_model: str = ""  # HF folder or name; "" = bundled all-MiniLM-L6-v2 (paper: distilbert-base-uncased)
    text_pooling: str = "cls"  # §3.1: the [CLS] output of the final layer
    freeze_text: bool = False
    max_text_tokens: int = 30
    text_relu: bool = False  # official txt_proj = Sequential(ReLU, Linear) (official model.py)
    embed_dim: int = 256  # §4.3: common space of dimension 256
    temperature: float = 0.05  # σ (§4.3)
    paragraph_captions: bool = False  # §4.3: train on random concatenations of a video's captions (DiDeMo)
    # frames (§3.2 "Frame sampling", §4.3)
    # ImageNet's (official transforms); a tower from CLIP (vit_checkpoint openclip:…) uses CLIP's (frame_spec)
    pixel_mean: list[float] = field(default_factory=lambda: [0.485, 0.456, 0.406])
    pixel_std: list[float] = field(default_factory=lambda: [0.229, 0.224, 0.225])
    crop_scale: list[float] = field(default_factory=lambda: [0.5, 1.0])
    flip: float = 0.5
    test_stride: float = 2.0  # §4.3: clip embeddings every 2 s at test, averaged
    max_test_clips: int = 4
    frame_cache: str = "memory"  # memory | off | folder
    cache_fps: float = 4.0
    # curriculum (§4.5) and temporal expansion (appendix Table 7)
    frame_schedule: list[int] = field(default_factory=list)  # e.g. [1, 4, 8]; [] = num_frames throughout
    frame_schedule_epochs: list[int] = field(default_factory=list)  # first epoch of each count, e.g. [0, 5, 10]
    temporal_expansion: str = "zeros"  # zeros | nearest | bilinear
    # §4.3: "batch sizes of 16, 24, and 96 for 8, 4, and 1-frame inputs": one video batch
    # size per curriculum stage (same length as frame_schedule); [] = train.batch_size
    frame_batch_sizes: list[int] = field(default_factory=list)
    # joint image-video training (§3.2)
    image_manifest: str = ""  # a manifest of images (kind "image"), e.g. CC3M / COCO / Tux Paint
    image_split: str = "train"
    image_batch_size: int = 0  # 0 = 4 × the video batch size (§4.3: 96 vs 24 for 1 vs 4 frames)
    image_shards: str = ""  # with data.shards: media shards of images (CC3M-style, `videotext dataset shard`)
    image_samples_per_epoch: int = 0  # images per epoch from image_shards (0 = their index's image_split count)


def resolve_sizes(config: FrozenConfig) -> dict[str, int]:
    if config.preset not in PRESETS:
        raise ConfigError(f"model.preset: expected one of {sorted(PRESETS)}, got {config.preset!r}")
    sizes = dict(PRESETS[config.preset])
    for key in sizes:
        value = getattr(config, key)
        if value:
            sizes[key] = value
    return sizes


def _check(config: FrozenConfig) -> None:
    for name, value, allowed in (("residual", config.residual, RESIDUALS), ("cls_attention", config.cls_attention, CLS_MODES),
                                 ("temporal_expansion", config.temporal_expansion, EXPANSIONS),
                                 ("time_init", config.time_init, ("zeros", "random"))):
        if value not in allowed:
            raise ConfigError(f"model.{name}: expected one of {list(allowed)}, got {value!r}")
    if len(config.frame_schedule) != len(config.frame_schedule_epochs):
        raise ConfigError("model.frame_schedule and model.frame_schedule_epochs must have the same length")
    if config.frame_schedule_epochs and (config.frame_schedule_epochs[0] != 0 or
                                         sorted(config.frame_schedule_epochs) != config.frame_schedule_epochs):
        raise ConfigError("model.frame_schedule_epochs: must start at 0 and increase, e.g. [0, 5]")
    if any(f < 1 or f > config.num_frames for f in config.frame_schedule):
        raise ConfigError(f"model.frame_schedule: counts must be in 1..num_frames={config.num_frames}")
    if config.frame_batch_sizes and (len(config.frame_batch_sizes) != len(config.frame_schedule)
                                     or min(config.frame_batch_sizes) < 1):
        raise ConfigError("model.frame_batch_sizes: one positive batch size per model.frame_schedule stage, "
                          f"got {config.frame_batch_sizes} for {config.frame_schedule}")


def load_state_file(path: str | Path) -> dict[str, torch.Tensor]:
    """A state dict from .safetensors or a torch file (tensors only; a 'state_dict'/'model' entry is unwrapped)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: checkpoint file not found")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    data = torch.load(path, map_location="cpu", weights_only=True)
    for key in ("state_dict", "model"):
        if isinstance(data, dict) and isinstance(data.get(key), dict):
            data = data[key]
    return data


def clip_quick_gelu(vit_checkpoint: str) -> bool:
    """A spatial init from CLIP weights trained with QuickGELU (OpenAI's: the tag's config says so)
    keeps that activation in every block's MLP; ImageNet ViTs use GELU."""
    if not str(vit_checkpoint).startswith("openclip:"):
        return False
    return openclip.needs_quick_gelu(*openclip.parse_spec(vit_checkpoint))


def known_timm_name(name: str, source: str) -> None:
    """A `timm:NAME` whose NAME timm has pretrained weights for, else one line listing the closest names."""
    import timm

    names = timm.list_pretrained()
    if name in names or (name in timm.list_models() and "." not in name):
        return
    close = closest(name, names, cutoff=0.6) or closest(name.split(".")[0], timm.list_models(), cutoff=0.6)
    raise ConfigError(f"model.vit_checkpoint {source!r}: timm has no pretrained weights named {name!r}; "
                      f"closest: {', '.join(close) or 'none'} (timm.list_pretrained() lists them)")


def vit_weights(source: str) -> dict[str, torch.Tensor]:
    """A timm-layout ViT state dict for the spatial initialisation (§3.2), from `source`:

    - a local file (.pth / .safetensors) of timm's layout;
    - `timm:NAME`: timm's pretrained weights of NAME (e.g. vit_base_patch16_224, downloaded
      into the hub cache); `timm:NAME@FILE` loads FILE through timm instead (any format
      timm reads for NAME, e.g. Google's .npz);
    - `openclip:ARCH@PRETRAINED`: CLIP's image tower (e.g. openclip:ViT-B-16@openai) in timm
      names (`videotext.openclip.vit_timm_state`).
    """
    if source.startswith("timm:"):
        import timm

        name, _, file = source[len("timm:"):].partition("@")
        overlay = {"file": str(Path(file).resolve())} if file else None
        if file and not Path(file).is_file():
            raise ConfigError(f"model.vit_checkpoint {source!r}: {file} not found")
        known_timm_name(name, source)
        try:
            model = from_hub(f"model.vit_checkpoint {source!r}", lambda: timm.create_model(
                name, pretrained=True, pretrained_cfg_overlay=overlay))
        except VideoTextError:
            raise
        except Exception as exc:  # noqa: BLE001 - timm raises several types (unknown name, download, format)
            raise ConfigError(f"model.vit_checkpoint {source!r}: timm cannot load it ({type(exc).__name__}: {exc})") from None
        return model.state_dict()
    if source.startswith("openclip:"):
        arch, pretrained = openclip.parse_spec(source)
        return openclip.vit_timm_state(openclip.load_clip(arch, pretrained).visual)
    return load_state_file(source)


@register
class FrozenInTime(Method):
    name = "frozen"
    Config = FrozenConfig
    video_inputs = "frames"
    streams_shards = True  # clips decoded from media shards (`data.shards`, `image_shards`): `shard_clips`

    def __init__(self, config: FrozenConfig, expert_dims: dict[str, int] | None = None):
        super().__init__(config)
        _check(config)
        sizes = resolve_sizes(config)
        self.img_size = sizes["img_size"]
        vit = vit_weights(config.vit_checkpoint) if config.vit_checkpoint else None
        self.video_model = SpaceTimeTransformer(
            sizes["img_size"], sizes["patch_size"], sizes["video_dim"], sizes["depth"], sizes["heads"],
            config.mlp_ratio, config.num_frames, config.residual, config.cls_attention,
            config.fused_attention, config.time_init, pre_norm=vit is not None and "norm_pre.weight" in vit,
            quick_gelu=clip_quick_gelu(config.vit_checkpoint),
            norm_eps=CLIP_LN_EPS if config.vit_checkpoint.startswith("openclip:") else LN_EPS,
        )
        if vit is not None:
            try:
                self.video_model.load_vit(vit)
            except (KeyError, ValueError) as exc:
                raise ConfigError(f"model.vit_checkpoint {config.vit_checkpoint!r}: does not fit the video model "
                                  f"({exc})") from None
        self.text_encoder = build_text_encoder(config.text_model, config.text_pooling, config.freeze_text,
                                          config.max_text_tokens)
        # keys txt_proj.1 / vid_proj.0 as in the official checkpoints
        self.txt_proj = nn.Sequential(nn.ReLU() if config.text_relu else nn.Identity(),
                                      nn.Linear(self.text_encoder.hidden_size, config.embed_dim))
        self.vid_proj = nn.Sequential(nn.Linear(sizes["video_dim"], config.embed_dim))
        # frames the temporal embeddings have been trained on (0 = none yet); saved, so resume is exact
        self.register_buffer("trained_frames", torch.zeros((), dtype=torch.long))

    # --- encoders ----------------------------------------------------------------------
    def prepare_text(self, texts: list[str]) -> dict[str, Any]:
        return self.text_encoder.tokenize(texts)

    def encode_text(self, batch: dict[str, Any]) -> torch.Tensor:
        return F.normalize(self.txt_proj(self.text_encoder(batch)), dim=-1)  # [B, E]

    def encode_clips(self, frames: torch.Tensor) -> torch.Tensor:
        """[K, F, 3, S, S] → unit clip embeddings [K, E]."""
        dtype = self.video_model.cls_token.dtype
        if dtype == frames.dtype:
            features = self.video_model(frames)  # [K, D]
        else:  # bf16 weights (cast_for_inference): run the tower in them, not under per-op autocast
            with full_precision(frames.device):
                features = self.video_model(frames.to(dtype)).float()
        return F.normalize(self.vid_proj(features), dim=-1)

    def cast_for_inference(self, dtype: torch.dtype) -> None:
        """The space-time tower in `dtype`: with bf16 weights it encodes 1.8-1.9x faster than fp32 on
        an AVX512-BF16 CPU, while autocast's per-op casts give 1.1-1.4x (bench/frozen_precision.py);
        outputs stay within cosine 0.999 of fp32 (tests/test_runtime.py)."""
        self.video_model.to(dtype)

    def encode_video(self, batch: dict[str, Any]) -> torch.Tensor:
        """One embedding per video: the mean of its clips' embeddings (§3.2), re-normalised."""
        clips = self.encode_clips(batch["frames"])  # [K, E]
        owner = batch.get("clip_video")
        if owner is None:
            return clips
        n = len(batch["video_ids"]) if "video_ids" in batch else int(owner.max()) + 1
        sums = clips.new_zeros(n, clips.shape[1]).index_add_(0, owner, clips)  # [B, E]
        return F.normalize(sums, dim=-1)

    def loss(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        text_inputs, video_inputs = self.chunk_inputs(batch)
        return self.loss_from_embeddings(self.encode_text(text_inputs), self.encode_video(video_inputs), batch)

    def chunk_inputs(self, batch: dict[str, Any]) -> tuple[Any, Any]:
        self.grow_frames(batch["video"]["frames"].shape[1])  # before the first chunk is encoded
        return batch["text"], batch["video"]

    def loss_from_embeddings(self, text: torch.Tensor, video: torch.Tensor, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        text, video = self.gather(text, video)
        sims = text @ video.T  # [B, B] cosine, over the global batch under torchrun
        return info_nce(sims, temperature=self.config.temperature, positives=self.gather.positives(batch.get("positives")))

    # --- curriculum -----------------------------------------------------------------------
    def grow_frames(self, frames: int) -> None:
        """Expand the temporal embeddings the first time a batch has more frames than trained on."""
        trained = int(self.trained_frames)
        if self.training and frames > trained:
            if trained > 0:
                self.video_model.expand_temporal(trained, frames, self.config.temporal_expansion)
            self.trained_frames.fill_(frames)

    def frames_for_epoch(self, epoch: int) -> int:
        cfg = self.config
        count = cfg.num_frames
        for start, frames in zip(cfg.frame_schedule_epochs, cfg.frame_schedule):
            if epoch >= start:
                count = frames
        return count

    def batch_size_for_epoch(self, epoch: int, default: int) -> int:
        """The video batch size of `epoch`'s curriculum stage (§4.3), else `default`."""
        cfg = self.config
        size = default
        for start, stage_size in zip(cfg.frame_schedule_epochs, cfg.frame_batch_sizes):
            if epoch >= start:
                size = stage_size
        return size

    def eval_frames(self) -> int:
        """Frames per test clip: as many as trained so far (the curriculum's current count)."""
        trained = int(self.trained_frames)
        return trained if trained > 0 else self.config.num_frames

    # --- data hooks ------------------------------------------------------------------------
    def frame_spec(self):
        """Frame sampling and transforms (§3.2, §4.3).

        A tower initialised from CLIP (`vit_checkpoint: openclip:ARCH@PRETRAINED`) sees frames as
        CLIP saw images: decoded at their native size and resized by open_clip's own eval transform
        (shorter side to `img_size`, bicubic through PIL), normalised with that CLIP model's mean /
        std instead of `pixel_mean` / `pixel_std` (ImageNet's, for ImageNet ViTs); at test the
        pixels are exactly open_clip's eval transform at `img_size` (centre crop). Training keeps
        the paper's augmentation (§4.3: a random square of `crop_scale` of the shorter side,
        resized, flipped with probability `flip`), cut from those resized frames.
        """
        cfg = self.config
        mean, std, preprocess = tuple(cfg.pixel_mean), tuple(cfg.pixel_std), None
        if cfg.vit_checkpoint.startswith("openclip:"):
            pre = {**openclip.image_preprocess(*openclip.parse_spec(cfg.vit_checkpoint)), "size": self.img_size}
            mean, std, preprocess = pre["mean"], pre["std"], openclip.FramePreprocess(pre)
        return FrameSpec(self.img_size, mean, std, tuple(cfg.crop_scale), cfg.flip, cfg.test_stride,
                         cfg.max_test_clips, cfg.frame_cache, cfg.cache_fps, preprocess)

    def _source(self, dataset: Any):
        """One FrameSource per dataset object, kept so decoded frames are cached across epochs."""
        return cached_source(self, dataset, self.frame_spec())

    def train_batches(self, dataset: Any, read_features: Any, batch_size: int, seed: int) -> Any:
        cfg = self.config
        videos = FrameBatches(dataset, self._source(dataset), self.prepare_text, batch_size, seed,
                              self.frames_for_epoch, paragraphs=cfg.paragraph_captions,
                              batch_size_for_epoch=lambda epoch: self.batch_size_for_epoch(epoch, batch_size))
        if not cfg.image_manifest:
            return videos
        images_all = VideoTextDataset.load(cfg.image_manifest)
        images = images_all.split(cfg.image_split) if cfg.image_split in images_all.splits else images_all
        image_batches = FrameBatches(images, self._source(images), self.prepare_text,
                                     cfg.image_batch_size or 4 * batch_size, seed + 1, lambda epoch: 1)
        if len(image_batches) == 0:
            raise ConfigError(f"model.image_batch_size is larger than {cfg.image_manifest} ({len(images)} images)")
        return AlternatingBatches(videos, image_batches)

    def shard_clips(self, config: Any) -> ClipShards:
        """What `train_batches` reads, declared for training from media shards (`data.shards`; with
        `image_shards`, the joint image-video batches of §3.2): the same clips, curriculum (§4.5) and
        per-stage batch sizes. The data layer builds the readers (`data.streaming.training`)."""
        cfg, batch_size = self.config, config.train.batch_size
        images = None
        if cfg.image_shards:
            images = ImageShards(cfg.image_shards, cfg.image_split, cfg.image_batch_size or 4 * batch_size,
                                 cfg.image_samples_per_epoch)
        return ClipShards(self.frame_spec(), self.prepare_text, self.frames_for_epoch,
                          lambda epoch: self.batch_size_for_epoch(epoch, batch_size), cfg.paragraph_captions, images)

    def video_batches(self, dataset: Any, read_features: Any, batch_size: int) -> Iterable[dict[str, Any]]:
        return eval_video_batches(dataset, self._source(dataset), self.eval_frames(), min(batch_size, 32))
