"""The method glue of training from shards (`data.shards`): the trainer asks for a run's batches
(`shard_training_batches`); a method on expert features assembles them with its own
`stream_batch`, a method on pixels declares the clips it trains on (`ClipShards`, from its
`shard_clips(config)`) and the readers are built here. No method builds a shard reader itself."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from videotext.data.frames import AlternatingBatches, FrameSpec, frame_batch
from videotext.data.loaders import VideoFeatures
from videotext.data.narration import SpanStore, window_of
from videotext.data.streaming.batches import ShardBatches, samples_in
from videotext.data.streaming.decoders import FeatureDecoder, FrameDecoder, SampleStore
from videotext.data.streaming.shard import Retry
from videotext.data.streaming.urls import read_index
from videotext.errors import VideoTextError


@dataclass
class ImageShards:
    """Image batches from media shards that alternate with the video batches (joint image-video
    training, Frozen §3.2); images are 1-frame clips."""

    pattern: str | Sequence[str]  # brace pattern of the image shards
    split: str  # the split of them trained on
    batch_size: int  # images per batch
    samples_per_epoch: int = 0  # 0: the count of `split` in the shards' shards.json
    samples_key: str = "model.image_samples_per_epoch"  # the key a user sets when there is no count


@dataclass
class ClipShards:
    """What a method on pixels trains on from media shards, as its `train_batches` reads it from
    disk: frame sampling and transforms, frames per clip and batch size per epoch (a curriculum),
    captions or paragraphs, the text inputs, and optional image batches."""

    spec: FrameSpec
    prepare_text: Callable[[list[str]], Any]
    frames_for_epoch: Callable[[int], int]
    batch_size_for_epoch: Callable[[int], int]
    paragraphs: bool = False
    images: ImageShards | None = None


def clip_training_batches(clips: ClipShards, pattern: str | Sequence[str], samples: int, index: dict[str, Any] | None,
                          config: Any, common: dict[str, Any]) -> Any:
    """The clip batches of `clips` from the media shards `pattern` (and its images, alternating)."""
    seed = common["seed"]
    frames = {epoch: clips.frames_for_epoch(epoch) for epoch in range(config.train.epochs)}

    def assemble(items: list[Any], epoch: int) -> dict[str, Any]:
        return frame_batch([video.id for video, _ in items], [item for _, item in items], clips.prepare_text)

    videos = ShardBatches(pattern, FrameDecoder(clips.spec, seed, frames, clips.paragraphs), assemble,
                          clips.batch_size_for_epoch, samples, index=index, split=config.data.train_split, **common)
    images = clips.images
    if images is None:
        return videos
    image_index = read_index(images.pattern, config.data.shard_timeout)
    image_batches = ShardBatches(images.pattern, FrameDecoder(clips.spec, seed + 1, {0: 1}), assemble, images.batch_size,
                                 samples_in(image_index, images.split, images.samples_per_epoch, images.samples_key),
                                 index=image_index, split=images.split, **{**common, "seed": seed + 1})
    return AlternatingBatches(videos, image_batches)


def shard_training_batches(method: Any, config: Any, dims: dict[str, int], failures: str | os.PathLike | None) -> Any:
    """The run's training batches from `data.shards`: expert features assembled by the method's own
    `stream_batch`, or, for a method on pixels, the clips its `shard_clips(config)` declares."""
    cfg = config.data
    if not getattr(method, "streams_shards", False):
        raise VideoTextError(f"data.shards: method {config.method!r} does not train from shards yet (its batches "
                             f"are neither one caption with one video's features nor clips); use data.manifest")
    windows = cfg.text == "narration" and cfg.narration.window_words > 0  # MMT §4.2 pre-training
    if cfg.mixture or cfg.text not in ("captions", "narration") or (cfg.text == "narration" and not windows):
        raise VideoTextError(f"data.shards: streams captions, or narration windows (data.narration.window_words "
                             f"> 0); data.mixture, data.text {cfg.text!r} and narration clips are for data on disk")
    index = read_index(cfg.shards, cfg.shard_timeout)
    samples = samples_in(index, cfg.train_split, cfg.samples_per_epoch, "data.samples_per_epoch")
    seed = config.train.seed
    common = {"seed": seed, "workers": cfg.num_workers, "buffer": cfg.shuffle_buffer, "failures": failures,
              "retry": Retry(cfg.shard_retries, 1.0, cfg.shard_timeout)}
    if getattr(method, "video_inputs", "features") == "frames":
        return clip_training_batches(method.shard_clips(config), cfg.shards, samples, index, config, common)
    if index is not None:
        stored = index.get("dims") or {}
        wrong = {e: (stored.get(e), d) for e, d in dims.items() if stored.get(e) != d}
        if wrong:
            raise VideoTextError(f"data.shards: expert dims (shards, run) {wrong} differ")
    experts = list(cfg.experts)

    def assemble(items: list[Any], epoch: int) -> dict[str, Any]:
        videos = [video for video, _ in items]
        store: Any = SampleStore(dims, items)
        if windows:  # each video's narration window of (seed, epoch, video), its features cut to it
            videos, store = [window_of(video, seed, epoch, cfg.narration) for video in videos], SpanStore(store)
        reader = VideoFeatures(store, experts, cfg.max_steps_per_expert)
        return method.stream_batch(videos, reader, epoch, seed)

    return ShardBatches(cfg.shards, FeatureDecoder(experts), assemble, config.train.batch_size, samples,
                        index=index, split=cfg.train_split, narrated=windows, **common)
