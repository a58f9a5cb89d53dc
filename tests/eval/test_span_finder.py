"""Spans from per-step scores (`eval.span_finder.find_spans`): hand-computed cases, the proposal ladder,
smoothing, suppression of overlaps, times of irregular steps, and a seeded noisy event whose span is
sharper than the fixed windows around it."""
from __future__ import annotations

import numpy as np
import pytest

from videotext.errors import VideoTextError
from videotext.eval.span_finder import DEFAULT_SETTINGS, SpanSettings, find_spans, smooth_scores, span_lengths


def steps(count: int) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of `count` one-second steps."""
    starts = np.arange(count, dtype=float)
    return starts, starts + 1.0


def iou(a: tuple[float, float], b: tuple[float, float]) -> float:
    overlap = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    return overlap / ((a[1] - a[0]) + (b[1] - b[0]) - overlap)


def test_a_plateau_is_found_with_its_exact_boundaries_and_score():
    scores = np.full(120, 0.1)
    scores[40:46] = 0.6
    top = find_spans(scores, *steps(120), k=1, settings=SpanSettings(smooth=1, context_ratio=0.5, context_weight=1.0))[0]
    # inside 0.6; context 3 steps each side at 0.1: score 0.6 - 1.0 * 0.1
    assert (top.start, top.end) == (40.0, 46.0)
    assert top.score == pytest.approx(0.5) and top.inside == pytest.approx(0.6)


def test_the_context_weight_sets_the_score_and_a_span_at_the_edge_has_context_on_one_side():
    scores = np.full(20, 0.2)
    scores[:4] = 0.8
    top = find_spans(scores, *steps(20), k=1, settings=SpanSettings(smooth=1, context_ratio=0.5, context_weight=0.5))[0]
    assert (top.start, top.end) == (0.0, 4.0)
    assert top.score == pytest.approx(0.8 - 0.5 * 0.2)  # context: 2 steps on the right only


def test_two_events_come_best_first_and_overlapping_spans_are_suppressed():
    scores = np.full(200, 0.0)
    scores[30:38] = 0.5
    scores[120:124] = 0.9
    spans = find_spans(scores, *steps(200), k=5, settings=SpanSettings(smooth=1, context_ratio=0.5, context_weight=1.0, nms_iou=0.3))
    assert [(s.start, s.end) for s in spans[:2]] == [(120.0, 124.0), (30.0, 38.0)]
    assert [s.score for s in spans] == sorted((s.score for s in spans), reverse=True)
    for a in range(len(spans)):
        for b in range(a):
            assert iou((spans[a].start, spans[a].end), (spans[b].start, spans[b].end)) <= 0.3


def test_spans_take_the_times_of_their_steps():
    scores = np.array([0.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    starts = np.array([0.0, 0.5, 2.0, 2.25, 4.0, 7.0])
    ends = np.array([0.5, 2.0, 2.25, 4.0, 7.0, 9.0])
    top = find_spans(scores, starts, ends, k=1, settings=SpanSettings(smooth=1))[0]
    assert (top.start, top.end) == (2.0, 4.0)


def test_the_proposal_lengths_grow_geometrically_up_to_the_whole_video():
    assert span_lengths(10, SpanSettings(min_steps=1, scale_ratio=1.5)) == [1, 2, 3, 5, 8, 10]
    assert span_lengths(10, SpanSettings(min_steps=2, scale_ratio=1.25)) == [2, 3, 4, 5, 7, 9, 10]
    assert span_lengths(1) == [1]
    # a longest proposal keeps the ladder's lengths at most it; a video shorter than it keeps its whole length
    assert span_lengths(10, SpanSettings(min_steps=2, scale_ratio=1.5, max_steps=6)) == [2, 3, 5]
    assert span_lengths(4, SpanSettings(min_steps=2, scale_ratio=1.5, max_steps=6)) == [2, 3, 4]
    with pytest.raises(VideoTextError, match="max_steps must be 0"):
        SpanSettings(min_steps=2, max_steps=1)


def test_a_longest_proposal_keeps_a_short_event_from_spilling_over_a_broad_rise():
    """A 5-step event (score 1) on a 20-step rise (0.6) in a flat video, proposals unrefined: uncapped,
    the rise stands out most against its flat context (the whole rise, 20-40 s, scores 0.7 − 0 = 0.7);
    capped at 6 steps, the event does: its 5 steps score 1 − 0.6 (its context lies on the rise) = 0.4."""
    scores = np.zeros(60)
    scores[20:40] = 0.6
    scores[28:33] = 1.0
    settings = SpanSettings(smooth=1, min_steps=2, context_ratio=1.0, context_weight=1.0, refine_rounds=0)
    whole = find_spans(scores, *steps(60), k=1, settings=settings)[0]
    capped = find_spans(scores, *steps(60), k=1, settings=SpanSettings(**{**settings.__dict__, "max_steps": 6}))[0]
    assert whole.end - whole.start >= 18 and 18.0 <= whole.start and whole.end <= 42.0
    assert (capped.start, capped.end) == (28.0, 33.0) and capped.score == pytest.approx(0.4)


def test_smoothing_is_a_centred_box_shorter_at_the_ends():
    np.testing.assert_allclose(smooth_scores(np.array([0.0, 3.0, 0.0, 0.0]), 3), [1.5, 1.0, 1.0, 0.0])
    np.testing.assert_allclose(smooth_scores(np.array([1.0, 2.0]), 1), [1.0, 2.0])


def test_a_noisy_short_event_is_sharper_than_the_windows_around_it():
    """A 4-s event in 10 minutes of noisy scores: the top span covers it closely, while the best 10-s
    window of a --window 10 index (stride 5) can overlap it at most 4/10."""
    rng = np.random.default_rng(0)
    scores = 0.1 + 0.03 * rng.standard_normal(600)
    scores[301:305] += 0.3
    top = find_spans(scores, *steps(600), k=1)[0]
    assert iou((top.start, top.end), (301.0, 305.0)) >= 0.75
    windows = [(float(s), float(s) + 10.0) for s in range(0, 591, 5)]
    assert max(iou(w, (301.0, 305.0)) for w in windows) == pytest.approx(0.4)


def test_bad_and_empty_inputs():
    assert find_spans(np.zeros(0), np.zeros(0), np.zeros(0)) == []
    assert find_spans(np.ones(3), *steps(3), k=0) == []
    with pytest.raises(VideoTextError, match="one length"):
        find_spans(np.ones(3), *steps(4))
    with pytest.raises(VideoTextError, match="odd"):
        SpanSettings(smooth=2)
    with pytest.raises(VideoTextError, match="scale_ratio"):
        SpanSettings(scale_ratio=1.0)
    assert isinstance(DEFAULT_SETTINGS, SpanSettings)


def test_a_single_step_video_is_its_own_span():
    top = find_spans(np.array([0.3]), *steps(1), k=3)
    assert [(s.start, s.end) for s in top] == [(0.0, 1.0)]
    assert top[0].score == pytest.approx(0.3 * (1 - DEFAULT_SETTINGS.context_weight))  # no context: its own mean
