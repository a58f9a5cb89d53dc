"""Moments of one video for one query: spans from per-step scores.

`find_spans(scores, starts, ends)` takes a query's score at every step of one video and the steps'
times, and returns the best spans, each with its start, end and score. The scores are the cosine of
the query vector with each step's vector for `search --moments` (`search.moment_track`, no training),
or a moment head's step saliency for its `decode: saliency` (`eval.moment_eval.predict_moments`):

    1. smooth     the scores with a centred box of `smooth` steps (1: none);
    2. propose    windows of every length of a geometric ladder (`min_steps`, ×`scale_ratio`, … up to
                  the whole video; none longer than `max_steps` if set), each every max(1, length // 4) steps;
    3. score      each span by its mean inside minus `context_weight` × the mean of its context
                  (`context_ratio` × its length on each side, cut at the video's ends; a span with no
                  context counts its own mean): a span that matches an event sticks out of what
                  surrounds it, one that cuts through it or spills over it does not;
    4. refine     the `candidates` best: each boundary moves, one step at a time, within the
                  proposal's stride, to where the score is highest (start, then end, `refine_rounds`
                  times);
    5. merge and suppress: proposals that refine to the same span become one, and a span whose
                  IoU with a better one exceeds `nms_iou` is dropped (non-maximum suppression).

Everything is cumulative sums over one array, so a 10-hour video (36 000 one-second steps) takes
milliseconds, and memory is a few arrays of its length. Pure numpy, no I/O: a benchmark calls it as
it is. The defaults were chosen on a validation set of synthetic long videos (`bench/moment_spans.py`,
docs/search.md), never on its test set.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple, Sequence, Union

import numpy as np

from videotext.errors import VideoTextError


class Span(NamedTuple):
    """One moment: `start` and `end` in seconds, its `score` (step 3), its mean step score `inside`."""

    start: float
    end: float
    score: float
    inside: float


@dataclass(frozen=True)
class SpanSettings:
    """The knobs of `find_spans` (module docstring). The defaults of smooth, min_steps, scale_ratio,
    context_ratio and context_weight are the best of a 128-setting grid on the validation videos of
    `bench/moment_spans.py` (synthetic long videos, the demo's `dual` run; docs/search.md gives the figures);
    candidates, refine_rounds and nms_iou were set, not searched."""

    smooth: int = 1  # steps in the centred box filter (odd; 1: the raw scores)
    min_steps: int = 1  # shortest proposal, in steps
    scale_ratio: float = 1.5  # each proposal length is this times the previous one (rounded up)
    context_ratio: float = 1.5  # context on each side, as a multiple of the span's length
    context_weight: float = 0.5  # score = inside mean − this × context mean
    candidates: int = 40  # proposals refined per video
    refine_rounds: int = 2  # start-then-end passes of boundary refinement
    nms_iou: float = 0.5  # a span overlapping a better one more than this is dropped
    max_steps: int = 0  # longest proposal, in steps (0: the whole video); refinement may still widen a span
    # by its proposal's stride. Not searched for the defaults: a length prior is the data's, chosen on its val

    def __post_init__(self) -> None:
        if self.smooth < 1 or self.smooth % 2 == 0:
            raise VideoTextError(f"moments: smooth must be an odd number of steps >= 1, got {self.smooth}")
        if self.min_steps < 1 or self.scale_ratio <= 1.0:
            raise VideoTextError(f"moments: min_steps must be >= 1 and scale_ratio > 1, got {self.min_steps} "
                                 f"and {self.scale_ratio}")
        if self.max_steps < 0 or (self.max_steps and self.max_steps < self.min_steps):
            raise VideoTextError(f"moments: max_steps must be 0 (the whole video) or >= min_steps "
                                 f"({self.min_steps}), got {self.max_steps}")
        if self.context_ratio <= 0 or not 0.0 <= self.nms_iou <= 1.0 or self.candidates < 1:
            raise VideoTextError("moments: context_ratio must be > 0, nms_iou within [0, 1], candidates >= 1")


DEFAULT_SETTINGS = SpanSettings()
SpansGiven = Union[SpanSettings, Mapping[str, Any], Sequence[str], None]


def span_settings(given: SpansGiven, where: str = "spans") -> SpanSettings:
    """The settings a caller names, over the defaults: a `SpanSettings`, a mapping {name: value} (the
    Python API, a config's `model.saliency_spans`) or `NAME=VALUE` strings (`search --span`, the HTTP
    API's `span=`), each value read as its field's type. One way for every door, so a setting a user
    chose on a val split means the same everywhere; an unknown name or a bad value is one error naming
    `where` and it. None: the defaults."""
    if given is None:
        return DEFAULT_SETTINGS
    if isinstance(given, SpanSettings):
        return given
    from videotext.config import ConfigError, from_dict, parse_value  # not on a plain search's import path

    if not isinstance(given, Mapping):
        if isinstance(given, (str, bytes)):
            given = [given]  # one NAME=VALUE
        pairs = [str(item).partition("=") for item in given]
        bad = [f"{name}{sep}{value}" for name, sep, value in pairs if not sep or not name.strip()]
        if bad:
            raise ConfigError(f"{where} {bad[0]!r}: expected NAME=VALUE, e.g. max_steps=6 "
                              f"(names: {', '.join(SpanSettings.__dataclass_fields__)})")
        given = {name.strip(): parse_value(value) for name, _, value in pairs}
    return from_dict(SpanSettings, dict(given), where)


def smooth_scores(scores: np.ndarray, width: int) -> np.ndarray:
    """The centred moving average of `scores` [T] over `width` steps (odd), shorter at the ends."""
    if width <= 1 or len(scores) < 2:
        return scores
    half = width // 2
    sums = np.concatenate([[0.0], np.cumsum(scores, dtype=np.float64)])
    index = np.arange(len(scores))
    low, high = np.maximum(index - half, 0), np.minimum(index + half + 1, len(scores))
    return (sums[high] - sums[low]) / (high - low)


def span_lengths(steps: int, settings: SpanSettings = DEFAULT_SETTINGS) -> list[int]:
    """The proposal lengths for a video of `steps` steps: `min_steps`, then ×`scale_ratio` (rounded
    up, each at least one more), up to and including the whole video; with `max_steps`, those of
    them at most it."""
    lengths, length = [], min(settings.min_steps, steps)
    while length < steps:
        lengths.append(length)
        length = max(length + 1, int(np.ceil(length * settings.scale_ratio)))
    lengths.append(steps)
    return [n for n in lengths if n <= settings.max_steps] if settings.max_steps else lengths


class _Scorer:
    """Step 3 of the module docstring for any spans [i, j) of one score array, vectorised."""

    def __init__(self, scores: np.ndarray, settings: SpanSettings):
        self.sums = np.concatenate([[0.0], np.cumsum(scores, dtype=np.float64)])  # [T + 1]
        self.steps, self.settings = len(scores), settings

    def __call__(self, i: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(score, inside mean) of the spans [i, j) (integer arrays, 0 <= i < j <= T)."""
        sums, length = self.sums, j - i
        inside = (sums[j] - sums[i]) / length
        width = np.maximum(1, np.rint(self.settings.context_ratio * length).astype(np.int64))
        low, high = np.maximum(i - width, 0), np.minimum(j + width, self.steps)
        count = (i - low) + (high - j)
        around = (sums[i] - sums[low]) + (sums[high] - sums[j])
        context = np.where(count > 0, around / np.maximum(count, 1), inside)
        return inside - self.settings.context_weight * context, inside


def _proposals(scorer: _Scorer, settings: SpanSettings) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every proposal (step 2): starts [P], ends [P] and strides [P] (its boundary search radius)."""
    starts, ends, strides = [], [], []
    for length in span_lengths(scorer.steps, settings):
        stride = max(1, length // 4)
        first = np.arange(0, scorer.steps - length + 1, stride)
        if first[-1] != scorer.steps - length:  # the last window ends at the video's end
            first = np.append(first, scorer.steps - length)
        starts.append(first)
        ends.append(first + length)
        strides.append(np.full(len(first), stride))
    return np.concatenate(starts), np.concatenate(ends), np.concatenate(strides)


def _refine(scorer: _Scorer, i: np.ndarray, j: np.ndarray, radius: np.ndarray,
            rounds: int) -> tuple[np.ndarray, np.ndarray]:
    """Step 4 for spans [i, j) at once: each start, then each end, moved to the best score within its
    `radius` steps (ties: the earliest), `rounds` times."""
    offsets = np.arange(-int(radius.max()), int(radius.max()) + 1)  # [W]
    near = np.abs(offsets)[None, :] <= radius[:, None]  # [C, W]
    rows = np.arange(len(i))
    for _ in range(rounds):
        starts = i[:, None] + offsets  # [C, W]
        valid = near & (starts >= 0) & (starts < j[:, None])
        starts = np.clip(starts, 0, j[:, None] - 1)
        score = np.where(valid, scorer(starts, np.broadcast_to(j[:, None], starts.shape))[0], -np.inf)
        i = starts[rows, np.argmax(score, axis=1)]
        ends = j[:, None] + offsets
        valid = near & (ends > i[:, None]) & (ends <= scorer.steps)
        ends = np.clip(ends, i[:, None] + 1, scorer.steps)
        score = np.where(valid, scorer(np.broadcast_to(i[:, None], ends.shape), ends)[0], -np.inf)
        j = ends[rows, np.argmax(score, axis=1)]
    return i, j


def _top(values: np.ndarray, count: int) -> np.ndarray:
    """Indices of the `count` largest values, best first (ties: the earlier index)."""
    if len(values) > count:
        part = np.argpartition(-values, count - 1)[:count]
        threshold = values[part].min()
        part = np.flatnonzero(values >= threshold)  # every tie at the threshold, so the order is stable
        return part[np.argsort(-values[part], kind="stable")][:count]
    return np.argsort(-values, kind="stable")


def _iou(i: int, j: int, kept_i: np.ndarray, kept_j: np.ndarray) -> np.ndarray:
    """Temporal IoU of the step span [i, j) with each kept span [kept_i, kept_j)."""
    overlap = np.maximum(0, np.minimum(j, kept_j) - np.maximum(i, kept_i))
    return overlap / ((j - i) + (kept_j - kept_i) - overlap)


def find_spans(scores: np.ndarray, starts: np.ndarray, ends: np.ndarray, k: int = 10,
               settings: SpanSettings = DEFAULT_SETTINGS) -> list[Span]:
    """The k best spans of one video (module docstring), best first.

    `scores` [T]: the query's score at each step; `starts`, `ends` [T]: each step's time span in
    seconds, in order. A span of steps [i, j) runs from starts[i] to ends[j − 1]."""
    scores = np.asarray(scores, dtype=np.float64)
    starts, ends = np.asarray(starts, dtype=np.float64), np.asarray(ends, dtype=np.float64)
    if scores.ndim != 1 or starts.shape != scores.shape or ends.shape != scores.shape:
        raise VideoTextError(f"moments: scores, starts and ends must be three arrays of one length, got shapes "
                             f"{scores.shape}, {starts.shape}, {ends.shape}")
    if not len(scores) or k < 1:
        return []
    scorer = _Scorer(smooth_scores(scores, settings.smooth), settings)
    first, last, strides = _proposals(scorer, settings)
    proposal_scores = scorer(first, last)[0]
    best = _top(proposal_scores, settings.candidates)
    i, j = _refine(scorer, first[best], last[best], strides[best], settings.refine_rounds)
    spans = np.unique(np.stack([i, j], axis=1), axis=0)  # proposals that refine to the same span merge
    final, inside = scorer(spans[:, 0], spans[:, 1])
    kept: list[int] = []
    for p in np.argsort(-final, kind="stable").tolist():  # step 5
        i, j = spans[p]
        if kept and _iou(i, j, spans[kept, 0], spans[kept, 1]).max() > settings.nms_iou:
            continue
        kept.append(p)
        if len(kept) == k:
            break
    return [Span(float(starts[spans[p, 0]]), float(ends[spans[p, 1] - 1]), float(final[p]), float(inside[p]))
            for p in kept]

