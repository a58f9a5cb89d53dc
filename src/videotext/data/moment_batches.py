"""Windows of per-step features for moment retrieval: what a grounding head trains and predicts on.

A moment method reads a video as a sequence of steps (one feature vector per step and expert, every
expert on one step grid: `StepFeatures`) and looks at `window` steps at a time. A video no longer
than a window (a QVHighlights clip: 75 steps of 2 s) is one window, as in Moment-DETR; a long video
is read in windows of `window` steps, `stride` apart (`sliding_windows`). Training draws, per query
and epoch, one window: with odds `positive_odds` one that holds a ground-truth span, else any (so the
head also learns to say "not here"); its targets are the spans inside it, as fractions of the window
(`window_targets`). Draws are pure functions of (seed, epoch, query id), so a resumed run sees the
same batches.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from videotext.data.loaders import SeededBatches
from videotext.data.schema import MomentQuery, Video, VideoTextDataset
from videotext.errors import VideoTextError

#: a span cut by a window's edge is a target of that window when this share of it is inside
KEEP_INSIDE = 0.5


class StepFeatures:
    """Whole videos' features on one step grid: ``(features {expert: [T, D_e]}, step seconds)``.

    The grid is the first expert's (its median step); every expert's rows go to the step of their
    timestamp, so experts extracted at the same rate line up and a missing expert is zeros. Arrays
    are kept in memory as float16 once read (`cache`), returned as float32.
    """

    def __init__(self, store: Any, experts: Sequence[str], dims: dict[str, int], cache: bool = True):
        self.store, self.experts, self.dims, self.cache = store, list(experts), dict(dims), cache
        self._cache: dict[str, tuple[dict[str, np.ndarray], float]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_cache": {}}

    def __call__(self, video: Video) -> tuple[dict[str, np.ndarray], float]:
        cached = self._cache.get(video.key)
        if cached is None:
            cached = self._read(video)
            if self.cache:
                self._cache[video.key] = cached
        features, step = cached
        return {e: v.astype(np.float32) for e, v in features.items()}, step

    def _read(self, video: Video) -> tuple[dict[str, np.ndarray], float]:
        read = {e: self.store.get(e, video.key) for e in self.experts if self.store.has(e, video.key)}
        if not read:
            raise VideoTextError(f"video {video.id!r}: no features for any of {self.experts} (key {video.key!r})")
        step = 1.0
        for values, times in read.values():
            if len(times) >= 2:
                step = float(np.median(np.diff(np.asarray(times, dtype=np.float64))))
                break
        if step <= 0:
            raise VideoTextError(f"video {video.id!r}: its feature timestamps do not increase")
        count = max(int(round(float(np.asarray(t)[-1]) / step)) + 1 for _, t in read.values() if len(t))
        out = {}
        for expert in self.experts:
            grid = np.zeros((count, self.dims[expert]), dtype=np.float16)
            if expert in read:
                values, times = read[expert]
                index = np.clip(np.round(np.asarray(times, dtype=np.float64) / step).astype(np.int64), 0, count - 1)
                grid[index] = np.asarray(values).reshape(len(index), -1)
            out[expert] = grid
        return out, step


def step_features(read_features: Any) -> StepFeatures:
    """The `StepFeatures` of a run's feature reader (`videotext.data.loaders.VideoFeatures`), made once
    and kept on it, so training and evaluation share one cache."""
    found = getattr(read_features, "moment_steps", None)
    if found is None:
        found = StepFeatures(read_features.store, read_features.experts, read_features.dims)
        read_features.moment_steps = found
    return found


def sliding_windows(steps: int, window: int, stride: int) -> list[int]:
    """Start steps of windows of `window` steps, `stride` apart, the last one ending at `steps`."""
    if steps <= window:
        return [0]
    starts = list(range(0, steps - window + 1, max(1, stride)))
    if starts[-1] != steps - window:
        starts.append(steps - window)
    return starts


def window_targets(spans: Sequence[tuple[float, float]], start: float, length: float) -> list[tuple[float, float]]:
    """The spans inside the window [start, start + length) seconds, as (start, end) fractions of it; a
    span cut by an edge is kept (cut) when at least `KEEP_INSIDE` of it is inside."""
    out = []
    for s, e in spans:
        cut_s, cut_e = max(s, start), min(e, start + length)
        if cut_e > cut_s and (cut_e - cut_s) >= KEEP_INSIDE * (e - s):
            out.append(((cut_s - start) / length, (cut_e - start) / length))
    return out


def draw_window(query: MomentQuery, steps: int, step: float, window: int, positive_odds: float,
                rng: random.Random) -> int:
    """The start step of one training window for `query` (see the module docstring)."""
    if steps <= window:
        return 0
    if query.spans and rng.random() < positive_odds:
        s, e = query.spans[rng.randrange(len(query.spans))]
        low = max(0, math.ceil(e / step) - window)
        high = min(steps - window, int(math.floor(s / step)))
        if low <= high:
            return rng.randint(low, high)
        centre = int(round((s + e) / 2 / step)) - window // 2  # a span longer than a window: centre on it
        return min(max(0, centre), steps - window)
    return rng.randint(0, steps - window)


@dataclass
class WindowItem:
    """One (query, window) pair: the window's features and where it sits in its video."""

    qid: str
    query: str
    features: dict[str, np.ndarray]  # {expert: [W, D_e]}
    start: int  # first step
    steps: int  # steps in this window (≤ the window size at a video's end)
    step: float  # seconds per step
    targets: list[tuple[float, float]]  # spans inside, as fractions of `window_seconds`
    window_seconds: float  # the window's length in seconds (its real steps × step)
    saliency: np.ndarray | None = None  # [W] annotated clip scores (mean over annotators), None without


def window_item(query: MomentQuery, features: dict[str, np.ndarray], step: float, start: int, window: int) -> WindowItem:
    """The (query, window) pair starting at step `start`; targets from the query's spans, saliency
    from its clip annotations where their clips are the steps."""
    steps = min(window, next(iter(features.values())).shape[0] - start)
    cut = {e: v[start : start + steps] for e, v in features.items()}
    seconds = steps * step  # positions are fractions of the window's real steps (a short video: all of it)
    saliency = None
    moment = query.moment
    if moment.clip_ids and moment.clip_length and abs(moment.clip_length - step) < 1e-6:
        saliency = np.zeros(window, dtype=np.float32)
        for clip, row in zip(moment.clip_ids, moment.saliency):
            if start <= clip < start + steps:
                saliency[clip - start] = float(np.mean(row)) + 1.0  # > 0 marks an annotated clip
    return WindowItem(query.qid, query.query, cut, start, steps, step,
                      window_targets(query.spans, start * step, seconds), seconds, saliency)


def collate_windows(items: Sequence[WindowItem], experts: Sequence[str], window: int,
                    prepare_text: Callable[[list[str]], dict[str, Any]]) -> dict[str, Any]:
    """A batch of windows, each padded to `window` steps.

    Returns {"features": {expert: [B, W, D]}, "mask": [B, W] bool (True = real step), "text": the
    prepared queries, "targets": [list of [n_i, 2] (start, end) fractions], "saliency": [B, W] (0 = not
    annotated / outside, > 0 = annotated score + 1; spans alone give 1 inside them), "qids", "starts",
    "steps", "step"}.
    """
    batch_size = len(items)
    features = {}
    for expert in experts:
        dim = items[0].features[expert].shape[1]
        out = np.zeros((batch_size, window, dim), dtype=np.float32)
        for i, item in enumerate(items):
            out[i, : item.steps] = item.features[expert]
        features[expert] = torch.from_numpy(out)
    mask = torch.zeros(batch_size, window, dtype=torch.bool)
    saliency = torch.zeros(batch_size, window)
    for i, item in enumerate(items):
        mask[i, : item.steps] = True
        if item.saliency is not None:
            saliency[i] = torch.from_numpy(item.saliency)
        else:  # spans alone: the steps a target covers are the relevant ones
            for s, e in item.targets:
                first = int(math.floor(s * item.steps + 1e-6))  # fractions of whole steps, up to rounding
                last = int(math.ceil(e * item.steps - 1e-6))
                saliency[i, first:max(last, first + 1)] = 1.0
        saliency[i, item.steps:] = 0.0
    return {"features": features, "mask": mask, "text": prepare_text([item.query for item in items]),
            "targets": [torch.tensor(item.targets, dtype=torch.float32).reshape(-1, 2) for item in items],
            "saliency": saliency, "qids": [item.qid for item in items],
            "starts": [item.start for item in items], "steps": [item.steps for item in items],
            "step": [item.step for item in items]}


class MomentWindowBatches(SeededBatches):
    """Training batches of (query, window) pairs for the queries of one split that have spans."""

    def __init__(self, dataset: VideoTextDataset, step_features: StepFeatures, prepare_text: Callable,
                 batch_size: int, seed: int, window: int, positive_odds: float):
        self.queries = dataset.moment_queries()
        if not self.queries:
            raise VideoTextError(f"{dataset.name}: no moment query with a ground-truth span to train on")
        self.step_features, self.prepare_text = step_features, prepare_text
        self.window, self.positive_odds = window, positive_odds
        super().__init__(len(self.queries), batch_size, seed)

    def item(self, query: MomentQuery, epoch: int) -> WindowItem:
        features, step = self.step_features(query.video)
        steps = next(iter(features.values())).shape[0]
        rng = random.Random(f"{self.seed}/{epoch}/{query.qid}")
        start = draw_window(query, steps, step, self.window, self.positive_odds, rng)
        return window_item(query, features, step, start, self.window)

    def batch(self, epoch: int, index: int) -> dict[str, Any]:
        items = [self.item(self.queries[i], epoch) for i in self.positions(epoch, index)]
        return collate_windows(items, self.step_features.experts, self.window, self.prepare_text)
