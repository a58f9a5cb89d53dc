"""Sliding-window clips of indexed videos: `window_clips` turns each video into its windows
(`sliding_windows`) and `WindowFeatures` reads a clip's features from its video's stored steps
(through `ClipStore`, a store whose keys are clips), so a clip is encoded exactly like a video made
of those steps, by any method's feature reader."""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from videotext.data.loaders import VideoFeatures
from videotext.data.schema import VideoTextDataset
from videotext.errors import VideoTextError


class ClipStore:
    """A FeatureStore look-alike whose keys are clips (`windows`: clip key → (video key, start, end)):
    per expert, a clip holds the steps of its video whose start lies in [start, end) (the step covering
    `start` when none does), with their times, read alone from a long video. Any other key is the base
    store's. Every feature reader works through it: `VideoFeatures`, and readers that take a reader's
    store, such as MMT's (times and missing experts included)."""

    def __init__(self, store: Any, windows: dict[str, tuple[str, float, float]]):
        self.base, self.windows = store, windows
        self._times: tuple[str, dict[str, np.ndarray | None]] | None = None  # one video's step times

    def _video(self, key: str) -> str:
        clip = self.windows.get(key)
        return key if clip is None else clip[0]

    def dim(self, expert: str) -> int:
        return self.base.dim(expert)

    def info(self, expert: str) -> dict[str, Any]:
        return self.base.info(expert)

    def has(self, expert: str, key: str) -> bool:
        return self.base.has(expert, self._video(key))

    def is_missing(self, expert: str, key: str) -> bool:
        return self.base.is_missing(expert, self._video(key))

    def timestamps(self, expert: str, key: str) -> np.ndarray:
        return self.get(expert, key)[1] if key in self.windows else np.asarray(_step_times(self.base, expert, key))

    def _step_times(self, expert: str, video_key: str) -> np.ndarray | None:
        """Step times of one video for one expert (None: not stored), kept for its next clip."""
        if self._times is None or self._times[0] != video_key:
            self._times = (video_key, {})
        cached = self._times[1]
        if expert not in cached:
            cached[expert] = _step_times(self.base, expert, video_key)
        return cached[expert]

    def get(self, expert: str, key: str, rows: slice | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(features float32 [T, D], times [T]) of a clip (or of a video of the base store)."""
        if key not in self.windows:
            return self.base.get(expert, key) if rows is None else self.base.get(expert, key, rows=rows)
        video_key, start, end = self.windows[key]
        times = self._step_times(expert, video_key)  # [T]
        empty = (np.zeros((0, self.dim(expert)), np.float32), np.zeros(0, np.float64))
        if times is None:
            return empty
        keep = (times >= start - 1e-6) & (times < end - 1e-6)
        if not keep.any() and (times <= start + 1e-6).any():
            keep = np.arange(len(times)) == int(np.nonzero(times <= start + 1e-6)[0][-1])
        found = np.nonzero(keep)[0]
        if not len(found):
            return empty
        first, stop = int(found[0]), int(found[-1]) + 1  # a clip's steps are contiguous: read only those rows
        values, clip_times = self._rows(expert, video_key, first, stop)[keep[first:stop]], times[found]
        if rows is not None:
            values, clip_times = values[rows], clip_times[rows]
        return values, clip_times

    def _rows(self, expert: str, video_key: str, first: int, stop: int) -> np.ndarray:
        try:
            features = self.base.get(expert, video_key, rows=slice(first, stop))[0]  # [stop - first, D]
        except TypeError:  # a store look-alike without row reads
            features = self.base.get(expert, video_key)[0][first:stop]
        return np.asarray(features, dtype=np.float32)


class WindowFeatures(VideoFeatures):
    """Features of sliding-window clips (`ClipStore`), capped like whole videos: a clip is encoded
    exactly like a video made of its steps."""

    def __init__(self, base: VideoFeatures, windows: dict[str, tuple[str, float, float]]):
        super().__init__(ClipStore(base.store, windows), base.experts, base.max_steps)
        self.windows = windows  # clip key → (video key, start, end)


def _step_times(store: Any, expert: str, key: str) -> np.ndarray | None:
    """A video's step start times [T] for one expert, without its features where the store can."""
    if not store.has(expert, key):
        return None
    if hasattr(store, "timestamps"):
        return np.asarray(store.timestamps(expert, key))
    return np.asarray(store.get(expert, key)[1])


def window_clips(dataset: VideoTextDataset, reader: VideoFeatures, window: float,
                 stride: float) -> tuple[VideoTextDataset, WindowFeatures]:
    """Each video's sliding windows (`sliding_windows`) as a dataset of clips
    (ids `VIDEO@START-END`, meta start/end/video_id) and the reader of their features."""
    clips, windows, clips_of = [], {}, {}
    for video in dataset:
        duration = video_duration(video, reader)
        for start, end in sliding_windows(duration, window, stride):
            clip_id = f"{video.id}@{start:g}-{end:g}"
            windows[clip_id] = (video.key, start, end)
            clips_of.setdefault(video.id, []).append(clip_id)
            clips.append(dataclasses.replace(video, id=clip_id, feature_key=clip_id, duration=end - start,
                                             meta={**video.meta, "start": start, "end": end, "video_id": video.id,
                                                   "video_duration": duration}))
    splits = {name: [c for video_id in ids for c in clips_of.get(video_id, ())] for name, ids in dataset.splits.items()}
    return (VideoTextDataset(dataset.name, clips, splits, root=dataset.root), WindowFeatures(reader, windows))


def video_duration(video: Any, reader: VideoFeatures) -> float:
    """A video's length: the manifest's, else the end of its last feature step."""
    if video.duration:
        return float(video.duration)
    ends = []
    for expert in reader.experts:
        times = _step_times(reader.store, expert, video.key)
        if times is not None:
            step = float(reader.store.info(expert)["config"].get("rate") or 0)
            if len(times):
                ends.append(float(times[-1]) + (1.0 / step if step else 0.0))
    return max(ends, default=0.0)


def sliding_windows(duration: float, length: float, stride: float) -> list[tuple[float, float]]:
    """Windows `(start, end)` of `length` seconds every `stride` seconds that cover
    `[0, duration]`; the last one is clipped at `duration`. Times are rounded to µs."""
    if length <= 0 or stride <= 0:
        raise VideoTextError(f"window length and stride must be positive, got length={length}, stride={stride}")
    if stride > length:
        raise VideoTextError(f"stride {stride} > window length {length} would leave gaps")
    if duration <= 0:
        return []
    windows = []
    for i in range(int(math.ceil(duration / stride)) + 1):
        start = round(i * stride, 6)
        end = round(min(start + length, duration), 6)
        windows.append((start, end))
        if start + length >= duration - 1e-9:
            break
    return windows
