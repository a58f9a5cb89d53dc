"""Sliding-window clips of indexed videos: `window_clips` turns each video into its windows
(`sliding_windows`) and `WindowFeatures` reads a clip's features from its video's stored steps,
so a clip is encoded exactly like a video made of those steps."""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from videotext.data.loaders import VideoFeatures, subsample_steps
from videotext.data.schema import VideoTextDataset
from videotext.errors import VideoTextError


class WindowFeatures(VideoFeatures):
    """Features of sliding-window clips: per expert, the steps whose start lies in the clip's
    [start, end) (the step covering `start` when none does), capped like whole videos."""

    def __init__(self, base: VideoFeatures, windows: dict[str, tuple[str, float, float]]):
        super().__init__(base.store, base.experts, base.max_steps)
        self.windows = windows  # clip key → (video key, start, end)
        self._times: tuple[str, dict[str, np.ndarray | None]] | None = None  # one video's step times

    def _timestamps(self, video_key: str) -> dict[str, np.ndarray | None]:
        """Step times per expert of one video (None: not stored), kept for its next clip."""
        if self._times is None or self._times[0] != video_key:
            self._times = (video_key, {e: _step_times(self.store, e, video_key) for e in self.experts})
        return self._times[1]

    def __call__(self, key: str) -> dict[str, np.ndarray]:
        video_key, start, end = self.windows[key]
        out = {}
        for expert, times in self._timestamps(video_key).items():
            values = np.zeros((0, self.dims[expert]), dtype=np.float32)
            if times is not None:  # [T]
                keep = (times >= start - 1e-6) & (times < end - 1e-6)
                if not keep.any() and (times <= start + 1e-6).any():
                    keep = np.arange(len(times)) == int(np.nonzero(times <= start + 1e-6)[0][-1])
                rows = np.nonzero(keep)[0]
                if len(rows):  # the clip's steps are contiguous: read only those rows of a long video
                    values = self._rows(expert, video_key, int(rows[0]), int(rows[-1]) + 1)[keep[rows[0] : rows[-1] + 1]]
                values = values[subsample_steps(len(values), self.max_steps)]
            out[expert] = values
        return out

    def _rows(self, expert: str, video_key: str, first: int, stop: int) -> np.ndarray:
        try:
            features = self.store.get(expert, video_key, rows=slice(first, stop))[0]  # [stop - first, D]
        except TypeError:  # a store look-alike without row reads
            features = self.store.get(expert, video_key)[0][first:stop]
        return np.asarray(features, dtype=np.float32)


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
