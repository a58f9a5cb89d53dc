"""Windows of per-step features: the grid, the windows of a long video, training draws and their targets."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from videotext.data.moment_batches import (
    StepFeatures, collate_windows, draw_window, sliding_windows, window_item, window_targets,
)
from videotext.data.schema import Moment, MomentQuery, Video


class Store:
    """A FeatureStore look-alike: {(expert, key): (values, times)}."""

    def __init__(self, entries):
        self.entries = entries

    def has(self, expert, key):
        return (expert, key) in self.entries

    def get(self, expert, key):
        return self.entries[(expert, key)]

    def dim(self, expert):
        return next(v.shape[1] for (e, _), (v, _t) in self.entries.items() if e == expert)


def test_step_features_put_every_expert_on_one_grid():
    video = Video("v", duration=4.0)
    store = Store({("a", "v"): (np.arange(8, dtype=np.float32).reshape(4, 2), np.array([0.0, 1.0, 2.0, 3.0])),
                   ("b", "v"): (np.ones((3, 1), np.float32), np.array([0.0, 1.0, 3.0]))})  # step 2 missing
    features, step = StepFeatures(store, ["a", "b", "c"], {"a": 2, "b": 1, "c": 5})(video)
    assert step == 1.0
    assert features["a"].tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert features["b"][:, 0].tolist() == [1, 1, 0, 1]
    assert features["c"].shape == (4, 5) and not features["c"].any()  # an expert the video lacks: zeros


def test_sliding_windows_cover_the_video_and_end_at_its_end():
    assert sliding_windows(50, 75, 37) == [0]
    assert sliding_windows(200, 75, 37) == [0, 37, 74, 111, 125]
    assert sliding_windows(75, 75, 37) == [0]


def test_window_targets_keep_spans_mostly_inside():
    # window [100, 175) s: a span inside, one cut in half (kept), one mostly outside (dropped)
    targets = window_targets([(110.0, 125.0), (170.0, 180.0), (90.0, 102.0)], 100.0, 75.0)
    assert np.allclose(targets, [(10 / 75, 25 / 75), (70 / 75, 1.0)])


def test_positive_draws_hold_a_span_and_are_reproducible():
    query = MomentQuery("q", Video("v", duration=600.0), Moment("x", [(300.0, 306.5)]))
    for seed in range(30):
        start = draw_window(query, 600, 1.0, 75, 1.0, random.Random(seed))
        assert start <= 300 and start + 75 >= 307
        assert draw_window(query, 600, 1.0, 75, 1.0, random.Random(seed)) == start
    starts = {draw_window(query, 600, 1.0, 75, 0.0, random.Random(s)) for s in range(30)}
    assert any(s > 300 or s + 75 < 307 for s in starts)  # odds 0: any window, most without the span


def test_collated_windows_with_span_and_annotated_saliency():
    features = {"a": np.ones((100, 3), np.float32)}
    spans_only = MomentQuery("q1", Video("v"), Moment("one", [(80.0, 84.0)]))
    annotated = MomentQuery("q2", Video("w"), Moment("two", [(4.0, 8.0)], clip_length=2.0, clip_ids=[2, 3],
                                                     saliency=[[4, 2, 3], [1, 1, 1]]))
    a = window_item(spans_only, features, 1.0, 25, 75)
    b = window_item(annotated, {"a": np.ones((40, 3), np.float32)}, 2.0, 0, 75)  # 80 s: one short window
    assert np.allclose(a.targets, [(55 / 75, 59 / 75)]) and np.allclose(b.targets, [(0.05, 0.1)])
    assert (b.steps, b.window_seconds) == (40, 80.0)
    batch = collate_windows([a, b], ["a"], 75, lambda texts: {"texts": texts})
    assert batch["features"]["a"].shape == (2, 75, 3) and batch["mask"].sum(1).tolist() == [75, 40]
    assert torch.nonzero(batch["saliency"][0]).flatten().tolist() == [55, 56, 57, 58]
    assert batch["saliency"][1, :4].tolist() == [0.0, 0.0, 4.0, 2.0]  # mean annotator score + 1
    assert batch["text"] == {"texts": ["one", "two"]} and batch["qids"] == ["q1", "q2"]
