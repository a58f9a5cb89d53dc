"""A small long-video moment set with features that say what happens: for the moment tests.

`event_store` writes, for every video of a synthetic moment manifest, features on a 1-s grid
whose expert "events" holds, per step, the one-hot colour, shape and action of the event running
then (zeros when none) plus seeded noise, and "noise" pure noise: a head that reads the query can
learn to find its spans in a few hundred steps, without rendering or extracting anything.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from videotext.data.features import FeatureStore, FeatureWriter
from videotext.data.schema import VideoTextDataset
from videotext.data.synthetic.moments import moment_specs
from videotext.data.synthetic.vocab import ACTIONS, COLOUR_NAMES, SHAPES

EVENT_DIM = len(COLOUR_NAMES) + len(SHAPES) + len(ACTIONS)


def moment_manifest(root: Path, videos: dict[str, int], minutes: tuple[float, float] = (1.0, 3.0),
                    seed: int = 0) -> Path:
    """The manifest of a moment set drawn by `moment_specs` (no media rendered)."""
    specs, splits = moment_specs(seed, videos, minutes)
    dataset = VideoTextDataset("synthetic_moments", [s.to_video(f"videos/{s.id}.mp4") for s in specs], splits,
                               root=root)
    return dataset.save(root / "manifest.json")


def event_features(video, rng: np.random.Generator, noise: float = 0.1) -> np.ndarray:
    """[T, EVENT_DIM] per 1-s step: the one-hot colour, shape and action of the event at the step's centre."""
    steps = int(np.ceil(video.duration))
    out = rng.normal(scale=noise, size=(steps, EVENT_DIM)).astype(np.float32)
    for event in video.meta["events"]:
        first, last = int(np.floor(event["start"] + 0.5)), int(np.ceil(event["end"] - 0.5))
        out[first:last, COLOUR_NAMES.index(event["colour"])] += 1.0
        out[first:last, len(COLOUR_NAMES) + SHAPES.index(event["shape"])] += 1.0
        out[first:last, len(COLOUR_NAMES) + len(SHAPES) + ACTIONS.index(event["action"])] += 1.0
    return out


def event_store(manifest: Path, out: Path, seed: int = 0) -> Path:
    """Experts "events" (see the module docstring) and "noise" (8-d) for every video of `manifest`."""
    dataset = VideoTextDataset.load(manifest)
    rng = np.random.default_rng(seed)
    store = FeatureStore(out)
    events, noise = FeatureWriter(store, "events", EVENT_DIM), FeatureWriter(store, "noise", 8)
    for video in dataset:
        values = event_features(video, rng)
        times = np.arange(len(values), dtype=np.float64)
        events.add(video.key, values, times, step=1.0)
        noise.add(video.key, rng.normal(size=(len(values), 8)).astype(np.float32), times, step=1.0)
    events.commit()
    noise.commit()
    return out
