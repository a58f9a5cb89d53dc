"""Torch datasets and collation over expert features, for training and evaluation.

Training draws one caption per video per step (MMT §4.2: "sample one caption per
video"); which caption, and the order of videos, are pure functions of
(seed, epoch, position), so a resumed run sees exactly the batches an uninterrupted
run would have seen, with no sampler state to save.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from videotext.data.schema import VideoTextDataset
from videotext.errors import VideoTextError


def subsample_steps(num_steps: int, max_steps: int) -> np.ndarray:
    """Indices of at most `max_steps` time steps spread uniformly over `num_steps`, in order."""
    if num_steps <= max_steps:
        return np.arange(num_steps)
    return np.floor((np.arange(max_steps) + 0.5) * num_steps / max_steps).astype(np.int64)


class VideoFeatures:
    """Reads one video's expert features from a FeatureStore, capped at `max_steps` steps.

    With `cache_mb` > 0 the arrays read are kept in memory (read-only) until they fill that
    many MiB: training reads every video once per epoch and validation once per evaluation,
    and an HDF5 read costs about 1 ms a video, which on the demo was a third of the time
    the trainer spent outside the text encoder.
    """

    def __init__(self, store: Any, experts: Sequence[str], max_steps: int, cache_mb: float = 0.0):
        self.store, self.experts, self.max_steps = store, list(experts), max_steps
        self.dims = {e: int(store.dim(e)) for e in self.experts}
        self.cache_bytes = int(cache_mb * 2**20)
        self._cache: dict[str, dict[str, np.ndarray]] = {}
        self._cached_bytes = 0

    def __getstate__(self) -> dict[str, Any]:  # loader workers build their own cache
        return {**self.__dict__, "_cache": {}, "_cached_bytes": 0}

    def __call__(self, key: str) -> dict[str, np.ndarray]:
        cached = self._cache.get(key)
        if cached is not None:
            return dict(cached)
        out = self._read(key)
        size = sum(values.nbytes for values in out.values())
        if self._cached_bytes + size <= self.cache_bytes:
            for values in out.values():
                values.flags.writeable = False  # shared between batches: never changed in place
            self._cache[key] = out
            self._cached_bytes += size
            return dict(out)
        return out

    def _read(self, key: str) -> dict[str, np.ndarray]:
        out = {}
        for expert in self.experts:
            if self.store.has(expert, key):
                values, _times = self.store.get(expert, key)  # [T, D]
                values = np.asarray(values, dtype=np.float32).reshape(-1, self.dims[expert])
                values = np.ascontiguousarray(values[subsample_steps(len(values), self.max_steps)])
            else:  # a missing expert (no audio track, no speech): zero steps, masked out
                values = np.zeros((0, self.dims[expert]), dtype=np.float32)
            out[expert] = values
        return out


def collate_video_features(items: list[dict[str, np.ndarray]], experts: Sequence[str]) -> dict[str, Any]:
    """Pad each expert to the longest sequence in the batch.

    Returns {"features": {expert: [B, T, D]}, "masks": {expert: [B, T] bool, True = real step}}.
    """
    features, masks = {}, {}
    for expert in experts:
        seqs = [item[expert] for item in items]
        dim = seqs[0].shape[1]
        length = max(1, max(len(s) for s in seqs))
        padded = np.zeros((len(seqs), length, dim), dtype=np.float32)
        mask = np.zeros((len(seqs), length), dtype=bool)
        for i, seq in enumerate(seqs):
            padded[i, : len(seq)] = seq
            mask[i, : len(seq)] = True
        features[expert] = torch.from_numpy(padded)
        masks[expert] = torch.from_numpy(mask)
    return {"features": features, "masks": masks}


class SeededBatches:
    """The one batching rule of every training input: a seeded permutation of `count`
    items per epoch, cut into batches. Subclasses turn `positions(epoch, index)` into a
    batch; since both depend only on (seed, epoch, index), resume needs no sampler state.
    """

    def __init__(self, count: int, batch_size: int, seed: int, drop_last: bool = True):
        self.count, self.batch_size, self.seed, self.drop_last = count, batch_size, seed, drop_last

    def batch_size_at(self, epoch: int) -> int:
        """The batch size of `epoch` (constant here; Frozen's curriculum changes it per stage)."""
        return self.batch_size

    def epoch_length(self, epoch: int) -> int:
        """Number of batches of `epoch`."""
        size = self.batch_size_at(epoch)
        return self.count // size if self.drop_last else -(-self.count // size)

    def __len__(self) -> int:
        return self.epoch_length(0)

    groups: list[Any] | None = None  # per item: a group key (None = alone); see `group_by`

    def group_by(self, keys: Sequence[Any]) -> None:
        """Keep the items that share a key next to each other in every epoch's order, so
        they mostly land in one batch: each is the others' hard negative (`train.group_batches`)."""
        if len(keys) != self.count:
            raise ValueError(f"group_by: {len(keys)} keys for {self.count} items")
        self.groups = list(keys)

    def order(self, epoch: int) -> list[int]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        perm = torch.randperm(self.count, generator=generator).tolist()
        if self.groups is None:
            return perm
        units: dict[Any, list[int]] = {}  # in permuted order: members shuffled, groups placed at their first member
        for i in perm:
            units.setdefault(("group", self.groups[i]) if self.groups[i] is not None else ("item", i), []).append(i)
        return [i for members in units.values() for i in members]

    shard_rank, shard_world = 0, 1  # set by `shard` under torchrun

    def shard(self, rank: int, world: int) -> None:
        """Make `batch()` return this rank's contiguous rows of each global batch (DDP)."""
        self.shard_rank, self.shard_world = rank, world

    def positions(self, epoch: int, index: int) -> list[int]:
        """Item positions of batch `index` of `epoch` (this rank's rows of it when sharded)."""
        size = self.batch_size_at(epoch)
        rows = self.order(epoch)[index * size : (index + 1) * size]
        if self.shard_world > 1:
            rank, world = self.shard_rank, self.shard_world
            rows = rows[rank * len(rows) // world : (rank + 1) * len(rows) // world]
        return rows

    def batch(self, epoch: int, index: int) -> dict[str, Any]:
        raise NotImplementedError

    def epoch(self, epoch: int, start_batch: int = 0) -> Iterator[dict[str, Any]]:
        for index in range(start_batch, self.epoch_length(epoch)):
            yield self.batch(epoch, index)


def epoch_length(batches: Any, epoch: int) -> int:
    """Batches in `epoch` of any training-batch object (`epoch_length` if it varies, else len)."""
    length = getattr(batches, "epoch_length", None)
    return int(length(epoch)) if callable(length) else len(batches)


TEXT_MODES = ("captions", "paragraph")


def with_text(dataset: VideoTextDataset, mode: str = "captions") -> VideoTextDataset:
    """The dataset whose videos' captions are the text `data.text` names.

    "captions": as stored. "paragraph": each video with segments gets one caption, its
    segment sentences in time order joined (`Video.paragraph`; ActivityNet paragraphs,
    Support-set §4.1 / COOT §4), so caption batches and the caption↔video evaluation of
    every method read paragraphs. Videos without segments keep their captions."""
    if mode == "captions":
        return dataset
    if mode != "paragraph":
        raise VideoTextError(f"data.text: expected one of {list(TEXT_MODES)}, got {mode!r}")
    videos = (dataclasses.replace(v, captions=[v.paragraph]) if v.segments else v for v in dataset.videos.values())
    paragraphs = VideoTextDataset(dataset.name, videos, dataset.splits, dataset.root, dataset.meta)
    paragraphs.origin = dataset.origin  # the same videos, from the same file
    return paragraphs


class CaptionVideoBatches(SeededBatches):
    """Training batches of (one sampled caption, its video) for the videos of one split.

    Iterating gives the batches of one epoch in a seeded order; `start_batch` skips the
    batches a resumed run has already done. Videos without captions are left out.
    """

    def __init__(
        self, dataset: VideoTextDataset, read_features: VideoFeatures, prepare_text: Any,
        batch_size: int, seed: int, drop_last: bool = True,
    ):
        self.video_ids = [v.id for v in dataset if v.captions]
        self.dataset, self.read_features, self.prepare_text = dataset, read_features, prepare_text
        if not self.video_ids:
            raise ValueError(f"{dataset.name}: no video has a caption to train on")
        super().__init__(len(self.video_ids), batch_size, seed, drop_last)

    def caption_for(self, video_id: str, epoch: int) -> str:
        return caption_for(self.dataset[video_id], self.seed, epoch)

    def batch(self, epoch: int, index: int) -> dict[str, Any]:
        ids = [self.video_ids[i] for i in self.positions(epoch, index)]
        return caption_video_batch([self.dataset[i] for i in ids], self.read_features, self.prepare_text, self.seed, epoch)


def caption_for(video: Any, seed: int, epoch: int) -> str:
    """The caption of `video` drawn for `epoch`: a pure function of (seed, epoch, video id)."""
    return video.captions[random.Random(f"{seed}/{epoch}/{video.id}").randrange(len(video.captions))]


def caption_video_batch(videos: Sequence[Any], read_features: Any, prepare_text: Any, seed: int, epoch: int,
                        collate: Any = collate_video_features) -> dict[str, Any]:
    """One training batch of these videos: their features collated, one drawn caption each. The
    same for batches from disk and from shards (`videotext.data.streaming`)."""
    ids = [v.id for v in videos]
    video_batch = collate([read_features(v.key) for v in videos], read_features.experts)
    video_batch["video_ids"] = ids
    texts = [caption_for(v, seed, epoch) for v in videos]
    return {"video": video_batch, "text": prepare_text(texts), "video_ids": ids}


def video_batches(
    dataset: VideoTextDataset, read_features: VideoFeatures, batch_size: int,
    collate: Any = collate_video_features,
) -> Iterator[dict[str, Any]]:
    """Every video of `dataset` once, in order, batched for encoding (`collate(items, experts)`)."""
    videos = list(dataset)
    for start in range(0, len(videos), batch_size):
        chunk = videos[start : start + batch_size]
        batch = collate([read_features(v.key) for v in chunk], read_features.experts)
        batch["video_ids"] = [v.id for v in chunk]
        yield batch
