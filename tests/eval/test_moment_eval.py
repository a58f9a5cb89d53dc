"""The `moments` protocol: windows of a long video, their spans in seconds, merged, ranked and scored."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from videotext.data.loaders import VideoFeatures
from videotext.data.schema import Moment, Video, VideoTextDataset
from videotext.config import ConfigError
from videotext.errors import VideoTextError
from videotext.eval.moment_eval import evaluate_moments, predict_moments, predictions_records
from videotext.eval.moments import temporal_nms
from videotext.models.moment_detr import SALIENCY_SPANS

from tests.data.test_moment_batches import Store


class Oracle(torch.nn.Module):
    """A moment method that answers each window with the ground-truth spans inside it (score 0.9, or 0.2
    when the span is cut by the window's edge) and one wrong span (score 0.1); saliency 1 on its spans."""

    task, window, stride, experts = "moments", 40, 20, ["a"]
    def __init__(self, truth: dict[str, list[tuple[float, float]]], decode: str = "spans"):
        super().__init__()
        self.truth = truth
        self.config = SimpleNamespace(nms_iou=0.7, max_predictions=10, decode=decode, saliency_spans=dict(SALIENCY_SPANS))

    def prepare_text(self, texts):
        return {"texts": texts}

    def predict_windows(self, batch):
        rows, scores = [], []
        for qid, start, steps, step in zip(batch["qids"], batch["starts"], batch["steps"], batch["step"]):
            begin, length = start * step, steps * step
            spans = [((max(s, begin) - begin) / length, (min(e, begin + length) - begin) / length,
                      0.9 if begin <= s and e <= begin + length else 0.2)
                     for s, e in self.truth[qid] if e > begin and s < begin + length]
            spans.append((0.0, 0.05, 0.1))
            rows.append([(s, e) for s, e, _ in spans] + [(0.0, 0.0)] * (4 - len(spans)))
            scores.append([c for _, _, c in spans] + [0.0] * (4 - len(spans)))
        saliency = batch["saliency"].clone()
        return torch.tensor(rows), torch.tensor(scores), saliency


def moment_set() -> tuple[VideoTextDataset, VideoFeatures]:
    videos = [Video("long", duration=100.0, moments=[Moment("a thing", [(30.0, 34.0), (75.5, 80.0)]),
                                                     Moment("another", [(2.0, 9.0)])]),
              Video("short", duration=30.0, moments=[Moment("third", [(10.0, 14.0)], id="q3")])]
    store = Store({("a", "long"): (np.zeros((100, 2), np.float32), np.arange(100.0)),
                   ("a", "short"): (np.zeros((30, 2), np.float32), np.arange(30.0))})
    dataset = VideoTextDataset("m", videos, {"test": ["long", "short"]})
    return dataset, VideoFeatures(store, ["a"], max_steps=30)


def test_windows_map_back_to_seconds_and_merge():
    dataset, features = moment_set()
    truth = {q.qid: q.spans for q in dataset.moment_queries()}
    predictions, saliency, steps = predict_moments(Oracle(truth), dataset, features)
    # the long video's windows start at 0, 20, 40, 60: each span is found whole by some window, and the
    # copies of other windows are suppressed; the wrong span of each window survives (disjoint)
    first = predictions["long:0"]
    assert np.allclose(first[:2], [(30.0, 34.0, 0.9), (75.5, 80.0, 0.9)])
    assert all(c < 0.9 for _, _, c in first[2:]) and len(first) <= 10
    assert predictions["q3"][0] == pytest.approx((10.0, 14.0, 0.9))
    assert steps == {"long:0": 1.0, "long:1": 1.0, "q3": 1.0}
    assert saliency["q3"].shape == (30,) and saliency["q3"][10:14].tolist() == [1, 1, 1, 1]
    records = predictions_records(dataset, predictions, saliency)
    assert records[2]["qid"] == "q3" and records[2]["vid"] == "short"
    assert records[2]["pred_relevant_windows"][0] == [10.0, 14.0, 0.9]


def test_an_oracle_scores_full_marks():
    dataset, features = moment_set()
    truth = {q.qid: q.spans for q in dataset.moment_queries()}
    metrics = evaluate_moments(Oracle(truth), dataset, features)
    assert metrics["moments"]["R1@0.7"] == 100.0 and metrics["moments"]["mAP"] == 100.0
    assert metrics["moments"]["mIoU"] == 100.0 and metrics["highlight"]["HIT@1"] == 100.0
    assert (metrics["n_queries"], metrics["n_videos"], metrics["highlight_truth"]) == (3, 2, "spans")
    with pytest.raises(VideoTextError, match="ranks videos"):
        evaluate_moments(SimpleNamespace(name="dual", task="retrieval"), dataset, features)


def test_saliency_decoding_reads_spans_off_the_whole_video_saliency():
    """decode "saliency": the span finder over the averaged saliency (1 on the truth's steps here), with the
    packaged settings: smoothed by 3, q3's box of steps 10-13 reads 1/3, 2/3, 1, 1, 2/3, 1/3 over steps 9-14,
    so (11, 13) scores 1 − 0.25 × 0.5 (its 2-step context each side averages 0.5) = 0.875 and (10, 14)
    scores 5/6 − 0.25 × 1/12 = 0.8125."""
    dataset, features = moment_set()
    truth = {q.qid: q.spans for q in dataset.moment_queries()}
    predictions, saliency, _ = predict_moments(Oracle(truth, "saliency"), dataset, features)
    assert predictions["q3"][:2] == [pytest.approx((11.0, 13.0, 0.875)), pytest.approx((10.0, 14.0, 0.8125))]
    assert len(predictions["long:0"]) <= 10 and {(30.0, 34.0), (76.0, 79.0)} <= {(s, e) for s, e, _ in predictions["long:0"]}
    metrics = evaluate_moments(Oracle(truth, "saliency"), dataset, features)
    assert metrics["decode"] == "saliency" and metrics["moments"]["R1@0.5"] == 100.0
    oracle = Oracle(truth, "saliency")
    oracle.config.saliency_spans = {**SALIENCY_SPANS, "smoothing": 3}
    with pytest.raises(ConfigError, match=r"model.saliency_spans: unknown key\(s\) \['smoothing'\]"):
        predict_moments(oracle, dataset, features)
    with pytest.raises(VideoTextError, match="decode 'best'"):
        predict_moments(Oracle(truth, "best"), dataset, features)


def test_temporal_nms_keeps_the_best_of_overlapping_spans():
    kept = temporal_nms([(0, 10, 0.5), (1, 10, 0.9), (20, 30, 0.7), (0, 9, 0.9)], iou_threshold=0.7)
    assert kept == [(1.0, 10.0, 0.9), (20.0, 30.0, 0.7)]  # (0, 9) ties 0.9 but overlaps (1, 10) by 8/10
    assert temporal_nms([(0, 10, 0.5), (20, 30, 0.7)], 0.7, keep=1) == [(20.0, 30.0, 0.7)]
