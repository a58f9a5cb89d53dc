"""Moment retrieval and highlight metrics against hand-computed values (the official code: test_moments_official)."""
from __future__ import annotations

import numpy as np
import pytest

from videotext.errors import VideoTextError
from videotext.eval.moments import (
    MAP_IOUS, best_match_iou, clip_saliency_table, detection_ap, highlight_metrics, iou_matrix, moment_metrics,
    ranking_ap, spans_in_clips,
)


def test_iou_of_overlapping_disjoint_and_nested_spans():
    ious = iou_matrix([(12.0, 30.0)], [(10.0, 28.0), (30.0, 40.0), (14.0, 20.0)])
    assert ious[0].tolist() == pytest.approx([16 / 20, 0.0, 6 / 18])
    # the best ground truth of each prediction, and its IoU
    assert best_match_iou([(12.0, 30.0), (31.0, 39.0)], [(10.0, 28.0), (30.0, 40.0)]).tolist() == pytest.approx([0.8, 0.8])


def test_recall_at_k_and_miou_by_hand():
    truth = {"a": [(10.0, 20.0)], "b": [(0.0, 4.0), (50.0, 60.0)]}
    predictions = {
        # a: first span IoU 5/15 = 0.333, the third IoU 1.0
        "a": [(15.0, 25.0, 0.9), (40.0, 44.0, 0.8), (10.0, 20.0, 0.7)],
        # b: first span IoU with (50, 60) = 8/10 = 0.8
        "b": [(52.0, 60.0, 0.5)],
    }
    metrics = moment_metrics(predictions, truth)
    assert metrics["R1@0.3"] == 100.0  # 0.333 and 0.8
    assert metrics["R1@0.5"] == 50.0
    assert metrics["R1@0.7"] == 50.0
    assert metrics["R5@0.7"] == 100.0  # a's third span
    assert metrics["mIoU"] == pytest.approx(100 * (1 / 3 + 0.8) / 2)
    assert metrics["n_queries"] == 2


def test_detection_ap_by_hand():
    truth = [(0.0, 10.0), (20.0, 30.0)]
    # by score: TP (gt 0); (1, 11) overlaps gt 0 most but it is taken and gt 1 is too far: FP; (20, 28): TP
    predicted = [(20.0, 28.0), (0.0, 10.0), (1.0, 11.0)]
    scores = [0.7, 0.9, 0.8]
    ap = detection_ap(predicted, scores, truth, thresholds=(0.5, 0.85))
    # precision 1, 1/2, 2/3; envelope at the hits: 1 and 2/3 → (1 + 2/3) / 2; at 0.85 only the first hit
    assert ap.tolist() == pytest.approx([(1 + 2 / 3) / 2, 0.5])
    assert detection_ap([], [], truth).tolist() == [0.0] * len(MAP_IOUS)


def test_map_averages_queries_and_thresholds():
    truth = {"a": [(0.0, 10.0)], "b": [(0.0, 10.0)]}
    predictions = {"a": [(0.0, 10.0, 1.0)], "b": [(0.0, 6.0, 1.0)]}  # b's IoU 0.6: a hit up to 0.6
    metrics = moment_metrics(predictions, truth)
    assert metrics["mAP@0.5"] == 100.0
    assert metrics["mAP@0.75"] == 50.0
    assert metrics["mAP"] == pytest.approx(100 * (10 + 3) / 20)  # b hits at 0.5, 0.55, 0.6


def test_only_the_first_ten_spans_count_for_map():
    truth = {"a": [(90.0, 100.0)]}
    misses = [(float(i), float(i) + 1, 1.0 - i / 100) for i in range(10)]
    late_hit = [(90.0, 100.0, 0.0)]
    assert moment_metrics({"a": misses + late_hit}, truth)["mAP"] == 0.0
    assert moment_metrics({"a": misses[:9] + late_hit}, truth)["mAP"] == pytest.approx(10.0)  # precision 1/10


def test_a_query_without_predictions_scores_zero_and_unknown_queries_are_refused():
    truth = {"a": [(0.0, 10.0)], "b": [(0.0, 10.0)]}
    metrics = moment_metrics({"a": [(0.0, 10.0, 1.0)]}, truth)
    assert metrics["R1@0.7"] == 50.0 and metrics["mAP"] == 50.0
    with pytest.raises(VideoTextError, match="no ground truth, e.g. 'c'"):
        moment_metrics({"c": [(0.0, 1.0, 1.0)]}, truth)
    with pytest.raises(VideoTextError, match="start, end, score"):
        moment_metrics({"a": [(0.0, 1.0)]}, truth)


def test_ranking_ap_by_hand_with_ties():
    assert ranking_ap([1, 0, 1, 0], [0.9, 0.8, 0.7, 0.1]) == pytest.approx((1 + 2 / 3) / 2)
    # a tie at 0.9 of a highlight and a non-highlight: one point of precision 1/2, then 2/3 at full recall
    assert ranking_ap([1, 0, 1], [0.9, 0.9, 0.5]) == pytest.approx(2 / 3)
    assert ranking_ap([1, 1], [0.1, 0.2]) == 1.0 and ranking_ap([0, 0], [0.1, 0.2]) == 0.0


def test_highlight_hit_and_map_by_hand():
    # a 10-s video, 2-s clips: 5 clips; clips 1 and 2 annotated by two annotators
    table = clip_saliency_table(10.0, [1, 2], [[4, 2], [3, 4]])
    assert table.tolist() == [[0, 0], [4, 2], [3, 4], [0, 0], [0, 0]]
    # the best clip is 2: a highlight (≥ 4) for annotator 2 → hit
    metrics = highlight_metrics({"q": [0.1, 0.5, 0.9, 0.0, 0.2]}, {"q": table})
    assert metrics["HIT@1"] == 100.0
    # annotator 1's highlight is clip 1, ranked 2nd: AP 1/2; annotator 2's is clip 2, ranked 1st: AP 1
    assert metrics["mAP"] == pytest.approx(100 * (0.5 + 1.0) / 2)
    # with the lower bar (≥ 3) annotator 1 has clips 1 and 2: ranks 2 and 1 → AP 1
    assert highlight_metrics({"q": [0.1, 0.5, 0.9]}, {"q": table}, min_score=3)["mAP"] == pytest.approx(100.0)
    # a score for a clip past the video's end: mAP cuts it, HIT@1 counts a best clip there as a miss
    past_end = highlight_metrics({"q": [0.1, 0.5, 0.9, 0.0, 0.2, 7.0]}, {"q": table})
    assert past_end["mAP"] == metrics["mAP"] and past_end["HIT@1"] == 0.0
    with pytest.raises(VideoTextError, match="outside the video's 5 clips"):
        clip_saliency_table(10.0, [5], [[1, 1]])


def test_spans_in_clips_marks_every_overlapped_clip():
    assert spans_in_clips([(3.0, 6.5)], num_clips=5, clip_length=2.0).tolist() == [0, 1, 1, 1, 0]
    assert spans_in_clips([(0.0, 2.0), (9.0, 30.0)], num_clips=5, clip_length=2.0).tolist() == [1, 0, 0, 0, 1]


def test_seeded_random_predictions_stay_within_bounds():
    rng = np.random.default_rng(0)
    truth, predictions = {}, {}
    for q in range(50):
        start = rng.uniform(0, 100)
        truth[q] = [(start, start + rng.uniform(1, 20))]
        spans = np.sort(rng.uniform(0, 120, size=(8, 2)), axis=1)
        predictions[q] = [(s, e, float(rng.random())) for s, e in spans]
    metrics = moment_metrics(predictions, truth)
    for key in ("R1@0.3", "R1@0.5", "R1@0.7", "R5@0.5", "mAP", "mIoU"):
        assert 0.0 <= metrics[key] <= 100.0
    assert metrics["R5@0.5"] >= metrics["R1@0.5"] >= metrics["R1@0.7"]
    assert metrics["mAP@0.5"] >= metrics["mAP@0.75"]
