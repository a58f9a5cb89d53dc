"""Pixel batches for methods on raw frames (Frozen in Time §3.2 "Frame sampling", §4.3).

- Training: M equal segments, one random frame in each (TSN); a random square crop
  (a fraction `crop_scale` of the shorter side) resized to the input size, and a
  horizontal flip with probability `flip` (§4.3).
- Test: several strided samplings of the M segments (§3.2: "the i-th frame in every
  segment" for i = 0, S, 2S, …; stride `test_stride` seconds, §4.3: 2 s), each a clip;
  the method averages the clip embeddings per video. Centre maximal square crop.
- Images (`Video.kind == "image"`) are 1-frame videos.

Every random choice comes from a generator seeded by (seed, epoch, video id), so a
batch is a pure function of (seed, epoch, index) and a resumed run sees the same pixels.

Decoding: with a cache (``cache="memory"`` or a folder), each video is decoded once at
`cache_fps` frames per second at the input resolution and sampled from there (small
datasets train fast on CPU); with ``cache="off"`` every clip is decoded at its exact
times by seeking (`videotext.data.video.read_frames`).

CLIP image towers (`FrameSpec.preprocess`, a `videotext.openclip.FramePreprocess`): frames
are decoded at their native size and resized by open_clip's own transform (shorter side to
the input size, bicubic through PIL) before the cache; the test crop is then open_clip's
centre crop and normalisation, so test pixels equal open_clip's eval transform of each frame
exactly. Training crops are cut from the same resized frames (the augmentation above).
"""
from __future__ import annotations

import hashlib
import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from videotext.data.loaders import SeededBatches
from videotext.data.mixtures import MixtureBatches
from videotext.data.schema import Video, VideoTextDataset
from videotext.data.transforms import center_crop, normalize, resize_short, to_tensor
from videotext.data.video import pick_frames, probe, read_frames
from videotext.errors import VideoTextError

IMAGENET_MEAN = (0.485, 0.456, 0.406)  # the official Frozen transforms' normalisation
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass
class FrameSpec:
    """How clips are sampled and transformed."""

    size: int = 224  # input resolution (§4.3: 224×224)
    mean: Sequence[float] = IMAGENET_MEAN
    std: Sequence[float] = IMAGENET_STD
    crop_scale: tuple[float, float] = (0.5, 1.0)  # random square crop side / shorter side (official RandomResizedCrop)
    flip: float = 0.5  # horizontal flip probability (§4.3)
    test_stride: float = 2.0  # seconds between test samplings (§4.3)
    max_test_clips: int = 4  # cap on test samplings per video (CPU budget)
    cache: str = "memory"  # memory | off | a folder for .npy files
    cache_fps: float = 4.0  # frames per second kept in the cache
    # open_clip's eval transform (videotext.openclip.FramePreprocess) for CLIP image towers: native
    # decode + its resize before the cache, its crop + normalisation at test; None = the transforms here
    preprocess: Any = None


def rng_for(seed: int, epoch: int, key: str) -> np.random.Generator:
    """A generator that depends only on (seed, epoch, key)."""
    return np.random.default_rng([seed, epoch, zlib.crc32(key.encode("utf-8"))])


def train_times(duration: float, frames: int, rng: np.random.Generator) -> np.ndarray:
    """One uniformly random time in each of `frames` equal segments (TSN) [F]."""
    return (np.arange(frames) + rng.random(frames)) * (max(duration, 0.0) / frames)


def eval_times(duration: float, frames: int, stride: float, max_clips: int) -> np.ndarray:
    """[S, F] times: S strided samplings of the F segments (offsets spread over one segment)."""
    segment = max(duration, 0.0) / frames
    clips = int(min(max_clips, max(1, math.ceil(segment / stride - 1e-9)))) if stride > 0 else 1
    offsets = (np.arange(clips) + 0.5) * segment / clips  # [S]
    return np.arange(frames)[None, :] * segment + offsets[:, None]  # [S, F]


class FrameSource:
    """Decoded frames of a dataset's videos, cached per video (see module doc)."""

    def __init__(self, dataset: VideoTextDataset, spec: FrameSpec):
        self.dataset, self.spec = dataset, spec
        self._memory: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._durations: dict[str, float] = {}
        self._folder = None if spec.cache in ("memory", "off", "") else Path(spec.cache)

    def _path(self, video: Video) -> Path:
        path = self.dataset.media_path(video)
        if path is None:
            raise VideoTextError(f"{self.dataset.name}: video {video.id!r} has no media file (frames need pixels)")
        return path

    def duration(self, video: Video) -> float:
        """Seconds of video (0 for images); probed from the file when the manifest has none."""
        if video.kind == "image":
            return 0.0
        if video.duration is None:
            if video.id not in self._durations:
                self._durations[video.id] = probe(self._path(video)).duration
            return self._durations[video.id]
        return float(video.duration)

    def _decode_all(self, video: Video) -> tuple[np.ndarray, np.ndarray]:
        """(frames uint8 [T, H, W, 3], times [T]) at cache_fps, short side = spec.size."""
        if video.id in self._memory:
            return self._memory[video.id]
        cached = None
        if self._folder is not None:
            resize = "" if self.spec.preprocess is None else f"|openclip:{sorted(self.spec.preprocess.config.items())}"
            name = hashlib.sha1(f"{self._path(video)}|{self.spec.size}|{self.spec.cache_fps}{resize}".encode()).hexdigest()
            cached = self._folder / f"{name}.npz"
            if cached.exists():
                with np.load(cached) as data:
                    out = (data["frames"], data["times"])
                self._memory[video.id] = out
                return out
        duration = self.duration(video)
        steps = max(1, math.ceil(duration * self.spec.cache_fps - 1e-9))
        times = (np.arange(steps) + 0.5) / self.spec.cache_fps if duration > 0 else np.zeros(1)
        frames, got = self._read(video, times, return_times=True)
        out = (frames, got)
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_suffix(".tmp.npz")
            np.savez(tmp, frames=frames, times=got)
            tmp.rename(cached)
        self._memory[video.id] = out
        return out

    def _read(self, video: Video, times: np.ndarray, return_times: bool = False) -> Any:
        """Frames at `times` with the shorter side at spec.size: scaled while decoding, or for
        `spec.preprocess` decoded at the native size and resized by open_clip's transform."""
        if self.spec.preprocess is None:
            return read_frames(self._path(video), times, self.spec.size, return_times=return_times)
        frames, got = read_frames(self._path(video), times, None, return_times=True)  # [N, H, W, 3] native
        frames = self.spec.preprocess.resize(frames)  # [N, h, w, 3], shorter side = size
        return (frames, got) if return_times else frames

    def clip(self, video: Video, times: np.ndarray) -> np.ndarray:
        """uint8 frames [len(times), H, W, 3] on screen at `times` (seconds)."""
        if video.kind == "image":
            times = np.zeros(len(times))
        if self.spec.cache == "off":
            return self._read(video, times)
        frames, stamps = self._decode_all(video)
        return frames[pick_frames(stamps, times)]


def cached_source(owner: Any, dataset: VideoTextDataset, spec: FrameSpec) -> FrameSource:
    """One FrameSource per dataset object, kept on `owner` (a method) so decoded frames are
    cached across epochs."""
    sources = owner.__dict__.setdefault("_frame_sources", {})
    key = (id(dataset), dataset.name)
    if key not in sources:
        sources[key] = FrameSource(dataset, spec)
    return sources[key]


def train_transform(clip: np.ndarray, spec: FrameSpec, rng: np.random.Generator) -> torch.Tensor:
    """uint8 [F, H, W, 3] → float [F, 3, S, S]: random square crop, resize, random flip."""
    video = to_tensor(clip)  # [F, 3, H, W]
    height, width = video.shape[-2:]
    side = max(1, int(round(min(height, width) * rng.uniform(*spec.crop_scale))))
    top, left = int(rng.integers(0, height - side + 1)), int(rng.integers(0, width - side + 1))
    video = resize_short(video[..., top : top + side, left : left + side], spec.size)
    if rng.random() < spec.flip:
        video = video.flip(-1)
    return normalize(video, spec.mean, spec.std)


def eval_transform(clip: np.ndarray, spec: FrameSpec) -> torch.Tensor:
    """uint8 [F, H, W, 3] → float [F, 3, S, S]: centre maximal square crop, resize (§4.3); with
    `spec.preprocess`, open_clip's crop and normalisation of the frames it resized (`FrameSource`)."""
    if spec.preprocess is not None:
        return spec.preprocess.pixels(spec.preprocess.crop(clip))
    video = to_tensor(clip)
    video = resize_short(center_crop(video, min(video.shape[-2:])), spec.size)
    return normalize(video, spec.mean, spec.std)


def sample_text(captions: Sequence[str], rng: np.random.Generator, paragraph: bool = False) -> str:
    """One random caption; with `paragraph`, a random number of the captions, in order, joined
    (§4.3 text augmentation for paragraph retrieval, e.g. DiDeMo)."""
    if not paragraph:
        return captions[int(rng.integers(len(captions)))]
    count = int(rng.integers(1, len(captions) + 1))
    keep = np.sort(rng.choice(len(captions), size=count, replace=False))
    return " ".join(captions[i].strip() for i in keep)


class FrameBatches(SeededBatches):
    """Training batches of (one sampled caption, its clip) — a pure function of (seed, epoch, index).

    `frames_for_epoch(epoch)` gives the number of frames (the curriculum, §4.5); images
    always use one. Batch: {"video": {"frames": [B, F, 3, S, S], "video_ids"}, "text", "video_ids"}.
    """

    def __init__(self, dataset: VideoTextDataset, source: FrameSource, prepare_text: Callable[[list[str]], Any],
                 batch_size: int, seed: int, frames_for_epoch: Callable[[int], int], drop_last: bool = True,
                 paragraphs: bool = False, batch_size_for_epoch: Callable[[int], int] | None = None):
        self.video_ids = [v.id for v in dataset if v.captions]
        if not self.video_ids:
            raise VideoTextError(f"{dataset.name}: no video has a caption to train on")
        self.dataset, self.source, self.prepare_text = dataset, source, prepare_text
        self.frames_for_epoch, self.paragraphs = frames_for_epoch, paragraphs
        self.batch_size_for_epoch = batch_size_for_epoch
        super().__init__(len(self.video_ids), batch_size, seed, drop_last)

    def batch_size_at(self, epoch: int) -> int:
        """Per-stage batch sizes of the curriculum (Frozen §4.3), else the fixed one."""
        return self.batch_size_for_epoch(epoch) if self.batch_size_for_epoch else self.batch_size

    def batch(self, epoch: int, index: int) -> dict[str, Any]:
        ids = [self.video_ids[i] for i in self.positions(epoch, index)]
        items = [frame_item(self.source, self.dataset[i], self.seed, epoch, self.frames_for_epoch(epoch), self.paragraphs)
                 for i in ids]
        return frame_batch(ids, items, self.prepare_text)


def frame_item(source: "FrameSource", video: Video, seed: int, epoch: int, frames: int,
               paragraphs: bool = False) -> tuple[str, torch.Tensor]:
    """One training example of a clip batch: (its drawn caption, its clip [F, 3, S, S]), a pure
    function of (seed, epoch, video id). Images are one frame. Shared by batches from disk and from
    shards (`videotext.data.streaming`)."""
    rng = rng_for(seed, epoch, video.id)
    text = sample_text(video.captions, rng, paragraphs)
    times = train_times(source.duration(video), 1 if video.kind == "image" else frames, rng)
    return text, train_transform(source.clip(video, times), source.spec, rng)


def frame_batch(ids: list[str], items: Sequence[tuple[str, torch.Tensor]], prepare_text: Callable[[list[str]], Any]
                ) -> dict[str, Any]:
    """{"video": {"frames": [B, F, 3, S, S], "video_ids"}, "text", "video_ids"} of `frame_item`s."""
    frames = torch.stack([clip for _, clip in items])
    return {"video": {"frames": frames, "video_ids": ids}, "text": prepare_text([text for text, _ in items]),
            "video_ids": ids}


class AlternatingBatches(MixtureBatches):
    """Joint image-video training (§3.2): alternate video and image batches.

    Batch 2k is the k-th video batch and 2k+1 the k-th image batch while both last; the
    longer source then continues alone. Each source shuffles with its own seed. This is
    the `alternate` mode of the shared `data.mixtures.MixtureBatches`.
    """

    def __init__(self, video: FrameBatches, image: FrameBatches):
        super().__init__((video, image), "alternate")


def eval_video_batches(dataset: VideoTextDataset, source: FrameSource, frames: int,
                       batch_size: int) -> Iterator[dict[str, Any]]:
    """Every video once, in order: {"frames": [K, F, 3, S, S] clips, "clip_video" [K], "video_ids"}.

    `clip_video[k]` is the row (within the batch) of the video clip k belongs to; a video
    contributes S strided clips (images one) whose embeddings the method averages.
    """
    videos = list(dataset)
    spec = source.spec
    for start in range(0, len(videos), batch_size):
        chunk = videos[start : start + batch_size]
        clips, owner = [], []
        for row, video in enumerate(chunk):
            count = 1 if video.kind == "image" else frames
            for times in eval_times(source.duration(video), count, spec.test_stride, spec.max_test_clips):
                clips.append(eval_transform(source.clip(video, times), spec))
                owner.append(row)
        yield {"frames": torch.stack(clips), "clip_video": torch.tensor(owner, dtype=torch.long),
               "video_ids": [v.id for v in chunk]}
