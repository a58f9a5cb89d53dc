"""How often a video shares an event with another video of the same training batch.

Support-set's captioning rebuilds a caption from the *other* videos of the batch (§3.1.2);
that only helps when they show the same events. This measures the share on a data set's
own events (`meta.events`), for the default data and the `shared_events` variant alike.
"""
from __future__ import annotations

import random
from typing import Sequence

import numpy as np

from videotext.data.schema import Video


def event_keys(video: Video) -> set[tuple[str, str, str]]:
    """The video's events as (colour, shape, action), order and timing left out."""
    return {(e.get("colour"), e.get("shape"), e.get("action")) for e in video.meta.get("events", [])}


def batch_event_sharing(videos: Sequence[Video], batch_size: int, batches: int = 200, seed: int = 0) -> float:
    """% of videos in random batches of `batch_size` (without replacement, as the trainer
    draws them) that have an event also shown by another video of their batch."""
    keys = [event_keys(v) for v in videos]
    rng = random.Random(f"videotext-batch-sharing:{seed}")
    sharing, total = 0, 0
    for _ in range(batches):
        batch = rng.sample(range(len(keys)), min(batch_size, len(keys)))
        for i in batch:
            others = set().union(*(keys[j] for j in batch if j != i))
            sharing += bool(keys[i] & others)
            total += 1
    return 100.0 * sharing / max(total, 1)


def sharing_matrix(videos: Sequence[Video]) -> np.ndarray:
    """[N, N] bool: video i shows an event (colour, shape, action) that video j also shows;
    the diagonal is False."""
    keys = [event_keys(v) for v in videos]
    shares = np.array([[bool(a & b) for b in keys] for a in keys], dtype=bool).reshape(len(keys), len(keys))
    np.fill_diagonal(shares, False)
    return shares
