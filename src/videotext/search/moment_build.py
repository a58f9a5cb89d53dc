"""The build step that keeps an index's moment track (`search.moment_track`): one vector per step of
every indexed video, from the features the build has just extracted, so a search for moments needs
no second extraction and no model.

A step's vector is the run's index vector of the clip of `context_steps` steps centred on that step
(cut at the video's ends; default 1, the step alone), encoded as `--window` encodes its clips
(`search.windows.window_clips`, one step apart), through the model's `IndexModel` calls only. More
context suits events of several steps and blurs shorter ones: on the long-video moment set's val
split (events of 2-8 s) three steps found more spans than one for each of three runs, on the 1-3 s
events of `bench/moment_spans.py` fewer (docs/moments.md), so it is a build option
(`index build --moment-context`), kept in the track and by its updates. An update encodes the steps
of new and changed videos and copies the rows of the others from the previous track (same weights,
same context, same file hash).

The track needs every step of each video: a whole-video build of a method that reads a few frames
per video extracts only those (`RunModel.extraction_settings`, `max_steps`), so a video longer than
that many steps is left out of the track (`index build --moments` extracts every step instead;
`--window` builds always do).
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from videotext.data.features import FeatureStore
from videotext.data.loaders import VideoFeatures
from videotext.data.schema import VideoTextDataset
from videotext.errors import VideoTextError
from videotext.search.moment_track import MomentTrack, TrackWriter, check_context_steps, open_track, remove_track
from videotext.search.windows import window_clips

CLIPS_PER_PASS = 2048  # step clips encoded at once: a 10-hour video is 18 passes of bounded memory
DEFAULT_STEP = 1.0  # seconds per step where no expert stores two steps of a video
UNCAPPED = 1 << 20  # steps a clip may hold for a model that names no cap (`RunModel.max_steps` does)
CONTEXT_STEPS = 1  # steps in the clip that gives a step its vector, by default (odd; module docstring)


def step_caps(model: Any, store: FeatureStore) -> dict[str, int]:
    """The run's experts whose features in `store` hold at most some steps of each video, with that
    cap (`max_steps`: a whole-video build of a method that reads subsampled steps)."""
    caps = {e: store.info(e)["config"].get("max_steps") for e in model.experts if store.has_expert(e)}
    return {e: int(cap) for e, cap in caps.items() if cap}


def has_every_step(store: FeatureStore, caps: dict[str, int], key: str) -> bool:
    """Whether a video's features hold all its steps: under every cap (a video that reached it may
    have had more steps than were extracted)."""
    return all(len(store.timestamps(e, key)) < cap for e, cap in caps.items() if store.has(e, key))


def weights_source(model: Any) -> str:
    """What identifies the weights the step vectors come from (kept rows need the same)."""
    stamp = getattr(model, "weights_stamp", None)
    return f"{model.method_name}:{stamp() if callable(stamp) else Path(model.run_dir).resolve()}"


def step_seconds(store: FeatureStore, experts: list[str], key: str) -> float:
    """The length of one step of a video: the shortest median gap between the step times of its experts."""
    gaps = []
    for expert in experts:
        if store.has(expert, key):
            times = np.asarray(store.timestamps(expert, key), np.float64)
            if len(times) > 1:
                gaps.append(float(np.median(np.diff(times))))
    positive = [g for g in gaps if g > 0]
    return min(positive) if positive else DEFAULT_STEP


def build_moment_track(model: Any, index: Any, dataset: VideoTextDataset, out: str | os.PathLike,
                       features_dir: str | os.PathLike, progress: bool = True,
                       context_steps: int | None = None) -> dict[str, Any]:
    """Keep the moment track of the index `index` (folder `out`) for the videos of `dataset` it holds:
    a video's rows are copied from the previous track when they came from the same weights, file and
    `context_steps` (None: the previous track's, else CONTEXT_STEPS), else encoded from its features
    in `features_dir` (never extracted here). Returns a summary:
    `videos`, `steps`, `encoded` (videos whose steps were encoded now), `kept` (copied) and `left_out`
    (videos whose features hold only some of their steps, or none)."""
    store = FeatureStore(features_dir)
    caps = step_caps(model, store) if Path(features_dir).is_dir() else {}
    source = weights_source(model)
    previous = _readable_track(out)
    if context_steps is None:  # an update keeps the track's context
        context_steps = previous.context_steps if previous is not None else CONTEXT_STEPS
    check_context_steps(context_steps)
    if previous is not None and (previous.source != source or previous.context_steps != context_steps):
        previous = None  # other weights or another context: every row is encoded anew
    indexed = {entry.video_id: entry for entry in index.entries()}
    plan = []  # (video, video id, file hash, True: copy its previous rows)
    for video in dataset:
        video_id = video.meta.get("video_id", video.id)
        if video_id not in indexed:
            continue
        digest = indexed[video_id].meta.get("hash")
        if previous is not None and video_id in previous and previous.hashes[video_id] == digest:
            plan.append((video, video_id, digest, True))
        elif Path(features_dir).is_dir() and any(store.has(e, video.key) for e in model.experts) \
                and has_every_step(store, caps, video.key):
            plan.append((video, video_id, digest, False))
    left_out = len({v.meta.get("video_id", v.id) for v in dataset} & set(indexed)) - len(plan)
    summary = {"videos": len(plan), "encoded": sum(not copy for *_, copy in plan), "left_out": left_out}
    summary["kept"] = len(plan) - summary["encoded"]
    if not plan:
        remove_track(out)
        return {**summary, "steps": 0}
    if previous is not None and [(i, d) for _, i, d, _ in plan] == [(i, previous.hashes[i]) for i in previous.rows]:
        return {**summary, "steps": previous.steps}  # the track as it is
    with TrackWriter(out, index.dim, source, context_steps) as writer:
        for video, video_id, digest, copy in tqdm(plan, desc="moment track", unit="video",
                                                  disable=not progress or len(plan) < 2):
            if copy:
                vectors, times = previous.video(video_id)
            else:
                vectors, times = step_vectors(model, dataset.subset([video.id]), store, index.dim, context_steps)
            writer.add(video_id, vectors, times, digest)
        writer.finish()
    return {**summary, "steps": writer.steps}


def _readable_track(out: str | os.PathLike) -> MomentTrack | None:
    """The folder's track, or None when it has none or a damaged one (made again, never read)."""
    try:
        return open_track(out)
    except VideoTextError:
        return None


class OneVideo:
    """The calls `WindowFeatures` makes of a FeatureStore, over one video's features read whole once (as
    stored, float16 by default: an hour at one step a second is a few tens of MB), so its thousands of
    one-step clips cost no HDF5 read each."""

    def __init__(self, store: Any, experts: list[str], key: str):
        self.store, self.key = store, key
        self.stored = {e: store.stored(e, key) for e in experts if store.has(e, key)}  # (features, times)

    def has(self, expert: str, key: str) -> bool:
        return key == self.key and expert in self.stored

    def dim(self, expert: str) -> int:
        return self.store.dim(expert)

    def info(self, expert: str) -> dict[str, Any]:
        return self.store.info(expert)

    def is_missing(self, expert: str, key: str) -> bool:
        return self.store.is_missing(expert, key)

    def timestamps(self, expert: str, key: str) -> np.ndarray:
        return self.stored[expert][1]

    def get(self, expert: str, key: str, rows: slice | None = None) -> tuple[np.ndarray, np.ndarray]:
        features, times = self.stored[expert]
        rows = slice(None) if rows is None else rows
        return features[rows].astype(np.float32), times[rows]


def step_vectors(model: Any, video: VideoTextDataset, store: FeatureStore, dim: int,
                 context_steps: int = CONTEXT_STEPS) -> tuple[np.ndarray, np.ndarray]:
    """One video's step vectors [T, D] (float16, unit rows) and step times [T, 2]: the index vector of
    the clip of `context_steps` steps centred on each step (fewer at the ends), encoded CLIPS_PER_PASS
    clips at a time."""
    key = next(iter(video)).key
    step = step_seconds(store, model.experts, key)
    # the features are in the store already; read whole once, not once per step clip. Not through
    # `features_for`: under torchrun only rank 0 keeps the track, and that call is a collective
    reader = VideoFeatures(OneVideo(store, model.experts, key), model.experts,
                           getattr(model, "max_steps", None) or UNCAPPED)
    clips, clip_reader = window_clips(video, reader, step, step)  # one clip a step
    ids = [clip.id for clip in clips]
    times = np.asarray([[clip.meta["start"], clip.meta["end"]] for clip in clips], np.float32).reshape(-1, 2)
    half, widened = context_steps // 2, []
    for k, clip in enumerate(clips):  # each step's clip widened to its context; the step keeps its own time
        start, end = float(times[max(0, k - half), 0]), float(times[min(len(ids) - 1, k + half), 1])
        clip_reader.windows[clip.id] = (clip_reader.windows[clip.id][0], start, end)
        widened.append(dataclasses.replace(clip, duration=end - start))
    clips = VideoTextDataset(clips.name, widened, clips.splits, root=clips.root)
    parts = []
    for first in range(0, len(ids), CLIPS_PER_PASS):
        embedding = model.video_embedding(clips.subset(ids[first : first + CLIPS_PER_PASS]), clip_reader)
        vectors = np.asarray(model.index_vectors(embedding), np.float32)  # [n, D]
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        parts.append((vectors / np.where(norms > 0, norms, 1.0)).astype(np.float16))
    return (np.concatenate(parts) if parts else np.zeros((0, dim), np.float16)), times
