"""Shard samples decoded in a loader worker: expert features (`FeatureDecoder`, `decode_sample`)
or a training clip decoded from the media (`FrameDecoder`), and the features in hand read as a
FeatureStore is (`SampleStore`)."""
from __future__ import annotations

import dataclasses
import io
import json
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from videotext.data.frames import FrameSource, frame_item
from videotext.data.schema import Video, VideoTextDataset
from videotext.errors import VideoTextError


def sample_video(sample: dict[str, bytes], record: dict[str, Any] | None = None) -> Video:
    """The sample's Video, from its JSON (`record`, when already parsed)."""
    record = json.loads(sample["json"].decode("utf-8")) if record is None else record
    return Video.from_dict({k: v for k, v in record.items() if k not in ("split", "missing")}, source=sample["__key__"])


class FeatureDecoder:
    """A features sample → (Video, {expert: (features, times, missing)}), in a loader worker."""

    def __init__(self, experts: Sequence[str]):
        self.experts = list(experts)
        self.needs = ["json", *[f"{e}.npy" for e in self.experts], *[f"{e}.times.npy" for e in self.experts]]

    def __call__(self, sample: dict[str, bytes], epoch: int) -> tuple[Video, Any]:
        return decode_sample(sample, self.experts)


class FrameDecoder:
    """A media sample → (Video, (drawn caption, clip [F, 3, S, S])), decoded in a loader worker as
    `FrameBatches` decodes a file (`frame_item`): the media is written to a scratch file first."""

    needs = ["json"]

    def __init__(self, spec: Any, seed: int, frames: dict[int, int], paragraphs: bool = False):
        # as the files' source reads: "off" decodes the clip's frames, a cache decodes the video at
        # cache_fps and picks the nearest (in memory here: a sample is read once per epoch)
        self.spec = dataclasses.replace(spec, cache="off" if spec.cache == "off" else "memory")
        self.seed, self.frames, self.paragraphs = seed, dict(frames), paragraphs

    def __call__(self, sample: dict[str, bytes], epoch: int) -> tuple[Video, Any]:
        video = sample_video(sample)
        media = next((k for k in sample if k not in ("json", "__key__")), None)
        if media is None:
            raise VideoTextError(f"shard sample {sample['__key__']} ({video.id}) holds no media file: frames need "
                                 f"media shards (`videotext dataset shard --content media`)")
        with tempfile.TemporaryDirectory(prefix="videotext-frames-") as scratch:
            path = Path(scratch) / f"clip.{media}"
            path.write_bytes(sample[media])
            video.path = str(path)
            source = FrameSource(VideoTextDataset("shard", [video]), self.spec)
            return video, frame_item(source, video, self.seed, epoch, self.frames.get(epoch, max(self.frames.values())),
                                     self.paragraphs)


def decode_sample(sample: dict[str, bytes], experts: Sequence[str]) -> tuple[Video, dict[str, Any]]:
    """The sample's Video (its JSON) and {expert: (features [T, D], times [T])}."""
    record = json.loads(sample["json"].decode("utf-8"))
    video = sample_video(sample, record)
    features = {}
    for expert in experts:
        values = np.load(io.BytesIO(sample[f"{expert}.npy"]), allow_pickle=False)
        times = np.load(io.BytesIO(sample[f"{expert}.times.npy"]), allow_pickle=False)
        features[expert] = (values, times, expert in (record.get("missing") or []))
    return video, features


class SampleStore:
    """The features of the samples in hand, read as a FeatureStore is (`has`, `get`, `dim`,
    `is_missing`), so the method's own feature reader and collation build the batch."""

    def __init__(self, dims: dict[str, int], samples: Sequence[tuple[Video, dict[str, Any]]]):
        self.dims = dims
        self.by_key = {video.key: features for video, features in samples}

    def dim(self, expert: str) -> int:
        return self.dims[expert]

    def has(self, expert: str, key: str) -> bool:
        return expert in self.by_key.get(key, {})

    def get(self, expert: str, key: str, rows: slice | None = None) -> tuple[np.ndarray, np.ndarray]:
        values, times, _ = self.by_key[key][expert]
        rows = slice(None) if rows is None else rows
        return np.asarray(values[rows], dtype=np.float32), times[rows]

    def is_missing(self, expert: str, key: str) -> bool:
        return bool(self.by_key[key][expert][2])
