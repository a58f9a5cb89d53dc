"""HowTo100M-style noisy pre-training text: clips cut from narration timestamps.

`data.text: narration` turns each video's timed `speech` (ASR lines, see
`readers.howto100m`; the synthetic `--narration` track) into training pairs:

- clips: one clip per narration line, its video span the line's timestamps; with
  `data.narration.concat: K`, K consecutive lines join into one longer clip (Frozen §4.4
  on HowTo100M: single ASR lines are short and badly aligned, longer spans help);
- windows (`data.narration.window_words > 0`, MMT §4.2): each training step draws a
  random window of consecutive words of the video's narration, and keeps the
  `window_seconds` of video closest in time to those words;
- stop-word removal (`data.narration.remove_stop_words`, MMT Table 1: helps zero-shot,
  hurts fine-tuning).

A clip is an ordinary `Video` whose `feature_key` names a time span of its source
video's features, ``"<key>@<start>-<end>"``; `SpanStore` wraps a FeatureStore so every
feature reader (VideoFeatures, MMT's) crops to that span. Windows are drawn from
(seed, epoch, video id) alone, so resume stays exact.
"""
from __future__ import annotations

import dataclasses
import random
import re
from typing import Any

import numpy as np

from videotext.config import NarrationConfig as NarrationOptions
from videotext.data.loaders import TEXT_MODES, with_text
from videotext.data.schema import Segment, Video, VideoTextDataset
from videotext.errors import VideoTextError

# A small English stop-word list (the NLTK list's most frequent words plus speech fillers):
# MMT Table 1 removes stop words from HowTo100M narrations.
STOP_WORDS = frozenset("""
a an the and or but if so then than that this these those there here it its it's i me my we our
you your he she they them his her their is am are was were be been being do does did doing
have has had having of at by for with about to from in on off out over under again further
just very can will would should could now um uh like okay ok well actually basically alright
know yeah oh really also too some any all each both as into through during before after
""".split())
SPAN = re.compile(r"^(?P<key>.+)@(?P<start>-?\d+(?:\.\d+)?)-(?P<end>\d+(?:\.\d+)?)$")


def remove_stop_words(text: str) -> str:
    """`text` without stop words (case-insensitive; punctuation around words ignored)."""
    kept = [w for w in text.split() if w.strip(".,!?;:\"'").lower() not in STOP_WORDS]
    return " ".join(kept)


def span_key(key: str, start: float, end: float) -> str:
    """The feature key of seconds [start, end] of video `key`'s features."""
    return f"{key}@{start:.3f}-{end:.3f}"


def parse_span_key(key: str) -> tuple[str, float, float] | None:
    match = SPAN.match(key)
    if match is None:
        return None
    return match["key"], float(match["start"]), float(match["end"])


def crop_steps(times: np.ndarray, start: float, end: float) -> np.ndarray:
    """Indices of the feature steps whose start time lies in [start, end); if none does,
    the one step closest to the span's middle (a clip never comes out empty)."""
    times = np.asarray(times, dtype=np.float64).reshape(-1)
    inside = np.flatnonzero((times >= start) & (times < end))
    if len(inside) or not len(times):
        return inside
    return np.array([int(np.argmin(np.abs(times - (start + end) / 2)))])


class SpanStore:
    """A FeatureStore whose keys may name a time span, ``"<key>@<start>-<end>"``.

    Everything else is the wrapped store's; `get` of a span key returns the steps inside it.
    """

    def __init__(self, store: Any):
        self.store = store

    def __getattr__(self, name: str) -> Any:
        if name == "store":  # not set yet (unpickling, copying): no recursion
            raise AttributeError(name)
        return getattr(self.store, name)

    def _key(self, key: str) -> str:
        span = parse_span_key(key)
        return span[0] if span else key

    def has(self, expert: str, key: str) -> bool:
        return self.store.has(expert, self._key(key))

    def is_missing(self, expert: str, key: str) -> bool:
        return self.store.is_missing(expert, self._key(key))

    def get(self, expert: str, key: str) -> tuple[np.ndarray, np.ndarray]:
        span = parse_span_key(key)
        if span is None:
            return self.store.get(expert, key)
        values, times = self.store.get(expert, span[0])  # [T, D], [T]
        keep = crop_steps(times, span[1], span[2])
        return np.asarray(values)[keep], np.asarray(times)[keep]


def text_dataset(dataset: VideoTextDataset, mode: str, options: NarrationOptions | None = None) -> VideoTextDataset:
    """`data.text` applied to a loaded dataset: captions | paragraph (`loaders.with_text`) | narration."""
    if mode == "narration":
        return narration_dataset(dataset, options)
    if mode not in TEXT_MODES:
        raise VideoTextError(f"data.text: expected one of {list(TEXT_MODES) + ['narration']}, got {mode!r}")
    return with_text(dataset, mode)


def narration_clips(video: Video, concat: int = 1, stop_words: bool = False) -> list[Video]:
    """Clips of `video` cut from its narration lines, `concat` consecutive lines per clip
    (non-overlapping; the last clip may hold fewer lines). Empty lines are dropped."""
    if concat < 1:
        raise VideoTextError(f"data.narration.concat: expected ≥ 1, got {concat}")
    lines = [s for s in sorted(video.speech, key=lambda s: (s.start, s.end)) if s.sentence.strip()]
    clips = []
    for k in range(0, len(lines), concat):
        group = lines[k : k + concat]
        start, end = group[0].start, max(s.end for s in group)
        text = " ".join(s.sentence.strip() for s in group)
        if stop_words:
            text = remove_stop_words(text)
        if not text:
            continue
        clips.append(Video(
            id=f"{video.id}#{k // concat}", path=video.path, duration=end - start, captions=[text],
            kind=video.kind, feature_key=span_key(video.key, start, end),
            meta={"source": video.id, "start": start, "end": end},
        ))
    return clips


def narration_dataset(dataset: VideoTextDataset, options: NarrationOptions | None = None) -> VideoTextDataset:
    """The dataset of narration clips: each split lists the clips of its videos.

    With `options.window_words > 0` videos stay whole here (one per source video, its
    captions the narration text) and `NarrationWindows` draws the windows per step.
    """
    options = options or NarrationOptions()
    clips: list[Video] = []
    members: dict[str, list[str]] = {}
    for video in dataset:
        if options.window_words > 0:
            words = " ".join(s.sentence.strip() for s in sorted(video.speech, key=lambda s: (s.start, s.end))
                             if s.sentence.strip())
            made = [dataclasses.replace(video, captions=[words], segments=[])] if words.strip() else []
        else:
            made = narration_clips(video, options.concat, options.remove_stop_words)
        clips.extend(made)
        members[video.id] = [c.id for c in made]
    if not clips:
        raise VideoTextError(f"{dataset.name}: data.text=narration but no video has speech segments "
                             f"(narration lines; HowTo100M caption.json or `videotext synth --narration`)")
    splits = {name: [c for vid in ids for c in members.get(vid, [])] for name, ids in dataset.splits.items()}
    return VideoTextDataset(dataset.name, clips, splits, dataset.root, dataset.meta)


def timed_words(speech: list[Segment]) -> list[tuple[str, float]]:
    """Every narration word with a time: the words of a line spread evenly over its span."""
    out = []
    for line in sorted(speech, key=lambda s: (s.start, s.end)):
        words = line.sentence.split()
        for i, word in enumerate(words):
            out.append((word, line.start + (i + 0.5) * line.duration / max(1, len(words))))
    return out


def sample_window(video: Video, rng: random.Random, window_words: int, window_seconds: float,
                  stop_words: bool = False) -> tuple[str, float, float]:
    """MMT §4.2: a random window of `window_words` consecutive narration words, and the
    `window_seconds` of video closest in time to them (centred on the words, shifted to
    stay inside the video). Returns (text, start, end)."""
    words = timed_words(video.speech)
    if not words:
        raise VideoTextError(f"video {video.id}: no narration words to sample a window from")
    first = rng.randrange(max(1, len(words) - window_words + 1))
    chosen = words[first : first + window_words]
    middle = (chosen[0][1] + chosen[-1][1]) / 2
    start = middle - window_seconds / 2
    if video.duration is not None:
        start = min(start, video.duration - window_seconds)
    start = max(0.0, start)
    end = start + window_seconds if video.duration is None else min(video.duration, start + window_seconds)
    text = " ".join(w for w, _ in chosen)
    return (remove_stop_words(text) if stop_words else text), start, end


def window_of(video: Video, seed: int, epoch: int, options: NarrationOptions) -> Video:
    """`video` as a training step of `epoch` sees it: the narration window of (seed, epoch, video
    id) as its one caption, its features cut to the window's span (a `SpanStore` key)."""
    rng = random.Random(f"narration/{seed}/{epoch}/{video.id}")
    text, start, end = sample_window(video, rng, options.window_words, options.window_seconds,
                                     options.remove_stop_words)
    return dataclasses.replace(video, captions=[text], feature_key=span_key(video.key, start, end),
                               duration=end - start)


def has_narration(speech: list[Any]) -> bool:
    """Whether narration lines (Segments, or their dicts in a manifest) hold a word."""
    return any(str(line.sentence if isinstance(line, Segment) else line.get("sentence", "")).strip() for line in speech)


class _WindowView:
    """The dataset as batches of one epoch see it: each video a freshly drawn window."""

    def __init__(self, dataset: VideoTextDataset, seed: int, epoch: int, options: NarrationOptions):
        self.dataset, self.seed, self.epoch, self.options = dataset, seed, epoch, options

    def __getitem__(self, video_id: str) -> Video:
        return window_of(self.dataset[video_id], self.seed, self.epoch, self.options)

    def __getattr__(self, name: str) -> Any:
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)


class NarrationWindows:
    """Training batches of random narration windows (MMT §4.2) around a method's batches.

    `inner` is the method's own caption batches over whole narrated videos (anything with
    a `dataset` it indexes by video id, e.g. `CaptionVideoBatches`); each batch of
    (epoch, index) reads the videos through a view that cuts the window of
    (seed, epoch, video id), so the method's collation is reused unchanged.
    """

    def __init__(self, inner: Any, options: NarrationOptions, seed: int):
        if not hasattr(inner, "dataset"):
            raise VideoTextError(f"data.narration.window_words: {type(inner).__name__} batches cannot read "
                                 f"narration windows (they need a `dataset`); use clips (window_words: 0)")
        self.inner, self.options, self.seed = inner, options, seed
        self.source = inner.dataset
        self.sources = (inner,)  # sharding under DDP reaches the inner batches

    def __len__(self) -> int:
        return len(self.inner)

    def batch(self, epoch: int, index: int) -> dict[str, Any]:
        self.inner.dataset = _WindowView(self.source, self.seed, epoch, self.options)
        try:
            return self.inner.batch(epoch, index)
        finally:
            self.inner.dataset = self.source
