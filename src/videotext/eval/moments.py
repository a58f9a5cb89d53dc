"""Moment retrieval and highlight detection metrics, as the field computes them.

Moment retrieval (a text query → spans of one video) is measured by

- ``R{K}@{m}``: the percent of queries with at least one of their first K predicted spans at
  temporal IoU ≥ m with a ground-truth span (K = 1, 5; m = 0.3, 0.5, 0.7: the Charades-STA /
  ActivityNet Captions tables of 2D-TAN and after; R1@0.5 and R1@0.7 are QVHighlights' too);
- ``mIoU``: the mean IoU of each query's first span with its best-overlapping ground truth;
- ``mAP@{m}`` / ``mAP``: detection average precision per query (its first `max_predictions`
  spans ranked by score, each matched greedily to the unmatched ground-truth span it overlaps
  most, a match counting at IoU ≥ m), interpolated as in PASCAL VOC 2011 / ActivityNet, averaged
  over queries; ``mAP`` is its mean over m = 0.5, 0.55, …, 0.95 (QVHighlights' headline "mAP").

Highlight detection (a saliency score per fixed-length clip) is measured by ``HIT@1`` (the
percent of queries whose best-scored clip is a highlight for at least one annotator) and ``mAP``
(the ranking AP of the clip scores against each annotator's highlights, averaged over annotators
and queries); a clip is a highlight when its annotated score is ≥ `min_score` (QVHighlights: 4,
"Very Good"; its tables' HD columns).

These are the definitions of the official QVHighlights evaluation (Lei et al. 2021,
`standalone_eval/eval.py` of jayleicn/moment_detr), written anew over arrays; the tests run that
code beside this module and find the same figures within 1e-6 (`tests/eval/test_moments_official.py`).
Where the official code makes a choice, this module makes the same one, named here:

- Predictions are ranked as given (best first): R@K reads the first K, mAP the first
  `max_predictions` (10), re-sorted by score with ties kept in the given order.
- IoU is computed as the official code computes it in each place, so a span exactly at a
  threshold counts the same: recall and mIoU take the ground-truth span of highest IoU (the
  first of equals) by intersection / (|a| + |b| − intersection), then that pair's IoU by
  intersection / (hull of the two spans); detection AP uses the first form throughout and visits
  equally overlapping ground-truth spans last index first.
- Highlight AP is the mean, over the distinct recall levels, of the interpolated precision at that
  level (the official `get_ap`, not the area under the curve); a query whose clips are all
  highlights (or none) scores 1 (or 0). The clips of a video are ⌊duration / clip length⌋:
  predicted scores past them are cut for AP (missing ones count as 0), and a best score past
  them is a miss for HIT@1.

Two departures, for inputs the official code refuses or skips: a query with no predicted span
scores 0 everywhere (the official code skips it in mAP and fails in R1), and predictions for a
query absent from the ground truth are an error.

    metrics = moment_metrics({"q1": [(12.0, 30.0, 0.9), (40.0, 52.0, 0.4)]}, {"q1": [(10.0, 28.0)]})
    metrics["R1@0.7"], metrics["mAP"]
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from videotext.errors import VideoTextError

Span = tuple[float, float]  # start, end in seconds
ScoredSpan = tuple[float, float, float]  # start, end, score

RECALL_AT = (1, 5)  # R1, R5
RECALL_IOUS = (0.3, 0.5, 0.7)
#: 0.5:0.05:0.95 as the decimals they name (the official code rounds its linspace to two places)
MAP_IOUS = tuple(round(0.5 + 0.05 * i, 2) for i in range(10))
MAP_REPORTED = (0.5, 0.75)  # mAP@0.5, mAP@0.75 beside the average
MAX_PREDICTIONS = 10  # spans per query read by mAP (official `max_pred_windows`)
CLIP_LENGTH = 2.0  # seconds per saliency clip (QVHighlights)
HIGHLIGHT_MIN_SCORE = 4  # "Very Good" (QVHighlights' HD columns)
#: the headline columns of moment tables, (metric key, header)
TABLE_COLUMNS = (("R1@0.5", "R1@0.5"), ("R1@0.7", "R1@0.7"), ("mAP", "mAP"))


# --- temporal IoU ------------------------------------------------------------------------
def _as_spans(spans: Any, what: str) -> np.ndarray:
    array = np.asarray(spans, dtype=np.float64)
    if array.size == 0:
        return np.zeros((0, 2))
    if array.ndim != 2 or array.shape[1] < 2:
        raise VideoTextError(f"{what}: expected (start, end) pairs, got an array of shape {array.shape}")
    return array[:, :2]


def iou_matrix(a: Any, b: Any) -> np.ndarray:
    """[N, M] IoU of spans `a` [N, 2] and `b` [M, 2] by intersection / (|a| + |b| − intersection)."""
    a, b = _as_spans(a, "spans"), _as_spans(b, "spans")
    inter = np.clip(np.minimum(a[:, None, 1], b[None, :, 1]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0, None)
    with np.errstate(invalid="ignore", divide="ignore"):
        return inter / ((a[:, 1] - a[:, 0])[:, None] + (b[:, 1] - b[:, 0])[None, :] - inter)


def hull_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[N] IoU of paired spans by intersection / (hull of the pair); 0 where the hull is empty.
    Equal to the plain IoU wherever the spans overlap (and 0 where they do not)."""
    inter = np.maximum(0.0, np.minimum(a[:, 1], b[:, 1]) - np.maximum(a[:, 0], b[:, 0]))
    hull = np.maximum(a[:, 1], b[:, 1]) - np.minimum(a[:, 0], b[:, 0])
    return np.divide(inter, hull, out=np.zeros_like(inter), where=hull != 0)


def best_match_iou(predicted: Any, truth: Any) -> np.ndarray:
    """[N] each predicted span's IoU with the ground-truth span that overlaps it most."""
    predicted, truth = _as_spans(predicted, "predicted spans"), _as_spans(truth, "ground-truth spans")
    if not len(predicted) or not len(truth):
        return np.zeros(len(predicted))
    best = np.argmax(iou_matrix(predicted, truth), axis=1)  # the first of equals, as np.argmax
    return hull_iou(predicted, truth[best])


# --- detection AP ----------------------------------------------------------------------------
def detection_ap(predicted: Any, scores: Any, truth: Any, thresholds: Sequence[float] = MAP_IOUS) -> np.ndarray:
    """[len(thresholds)] the AP of one query's spans [P, 2] with `scores` [P] against `truth` [G, 2].

    Spans are visited by score (ties in the given order); each is a true positive when the
    unmatched ground-truth span it overlaps most (IoU ≥ threshold) is still free. AP is the area
    under the precision envelope (precision made non-increasing in recall), PASCAL VOC 2011.
    """
    predicted, truth = _as_spans(predicted, "predicted spans"), _as_spans(truth, "ground-truth spans")
    out = np.zeros(len(thresholds))
    if not len(predicted) or not len(truth):
        return out
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    ious = iou_matrix(predicted[order], truth)  # [P, G]
    gt_index = np.arange(len(truth))
    visit = [np.lexsort((-gt_index, -row)) for row in ious]  # per span: GT by IoU desc, equals last index first
    ranks = np.arange(1, len(predicted) + 1)
    for t, threshold in enumerate(thresholds):
        free = np.ones(len(truth), dtype=bool)
        hits = np.zeros(len(predicted))
        for p, candidates in enumerate(visit):
            for g in candidates:
                if ious[p, g] < threshold:
                    break
                if free[g]:
                    free[g], hits[p] = False, 1.0
                    break
        precision = np.cumsum(hits) / ranks
        envelope = np.maximum.accumulate(precision[::-1])[::-1]  # best precision at this recall or more
        out[t] = float(np.sum(envelope[hits > 0])) / len(truth)
    return out


# --- moment retrieval ------------------------------------------------------------------------
def _prediction_arrays(predictions: Sequence[Sequence[float]], qid: Any) -> tuple[np.ndarray, np.ndarray]:
    rows = np.asarray(predictions, dtype=np.float64)
    if rows.size == 0:
        return np.zeros((0, 2)), np.zeros(0)
    if rows.ndim != 2 or rows.shape[1] != 3:
        raise VideoTextError(f"predictions of query {qid!r}: expected (start, end, score) triples, "
                             f"got an array of shape {rows.shape}")
    return rows[:, :2], rows[:, 2]


def moment_query_scores(predictions: Sequence[Sequence[float]], truth: Sequence[Sequence[float]],
                        ks: Sequence[int] = RECALL_AT, recall_ious: Sequence[float] = RECALL_IOUS,
                        map_ious: Sequence[float] = MAP_IOUS, max_predictions: int | None = MAX_PREDICTIONS,
                        qid: Any = None) -> dict[str, Any]:
    """One query's figures (fractions, not percent): ``best_iou`` [max(ks)] (the best IoU among its
    first k spans, running), ``iou1``, and ``ap`` [len(map_ious)]."""
    spans, scores = _prediction_arrays(predictions, qid)
    truth_spans = _as_spans(truth, f"ground truth of query {qid!r}")
    if not len(truth_spans):
        raise VideoTextError(f"query {qid!r}: no ground-truth span to evaluate against")
    kmax = max(ks) if ks else 1
    best = best_match_iou(spans[:kmax], truth_spans)  # [≤ kmax]
    running = np.zeros(kmax)
    if len(best):
        running[: len(best)] = np.maximum.accumulate(best)
        running[len(best):] = running[len(best) - 1]
    kept = slice(None) if max_predictions is None else slice(0, max_predictions)
    return {"best_iou": running, "iou1": float(best[0]) if len(best) else 0.0,
            "ap": detection_ap(spans[kept], scores[kept], truth_spans, map_ious)}


def moment_metrics(predictions: Mapping[Any, Sequence[Sequence[float]]], ground_truth: Mapping[Any, Sequence[Sequence[float]]],
                   ks: Sequence[int] = RECALL_AT, recall_ious: Sequence[float] = RECALL_IOUS,
                   map_ious: Sequence[float] = MAP_IOUS, max_predictions: int | None = MAX_PREDICTIONS,
                   ) -> dict[str, float]:
    """R{K}@{m}, mIoU, mAP@{m} and mAP (percent) of `predictions` against `ground_truth`.

    `predictions`: query id → its spans as (start, end, score), best first; `ground_truth`: query id
    → its ground-truth (start, end) spans (one or more). Every ground-truth query counts; one
    without predictions scores 0. Also returns ``n_queries``.
    """
    unknown = [q for q in predictions if q not in ground_truth]
    if unknown:
        raise VideoTextError(f"predictions for {len(unknown)} queries that have no ground truth, e.g. {unknown[0]!r}")
    if not ground_truth:
        raise VideoTextError("moment metrics: no query to evaluate")
    per_query = [moment_query_scores(predictions.get(q, ()), truth, ks, recall_ious, map_ious, max_predictions, q)
                 for q, truth in ground_truth.items()]
    best = np.stack([s["best_iou"] for s in per_query])  # [Q, kmax]
    ap = np.stack([s["ap"] for s in per_query])  # [Q, len(map_ious)]
    out: dict[str, float] = {}
    for k in ks:
        for m in recall_ious:
            out[f"R{k}@{m}"] = 100.0 * float(np.mean(best[:, k - 1] >= m))
    out["mIoU"] = 100.0 * float(np.mean([s["iou1"] for s in per_query]))
    per_threshold = ap.mean(0)
    for i, m in enumerate(map_ious):
        out[f"mAP@{m}"] = 100.0 * float(per_threshold[i])
    out["mAP"] = 100.0 * float(per_threshold.mean())
    out["n_queries"] = len(per_query)
    return out


# --- highlight detection ---------------------------------------------------------------------
def clip_saliency_table(duration: float, clip_ids: Sequence[int], scores: Sequence[Sequence[float]],
                        clip_length: float = CLIP_LENGTH) -> np.ndarray:
    """[⌊duration / clip_length⌋, annotators] annotated scores of every clip of a video (0 where a
    clip is not listed), from a query's relevant clip ids and their per-annotator scores."""
    table_scores = np.asarray(scores, dtype=np.float64)
    annotators = table_scores.shape[1] if table_scores.ndim == 2 else 1
    table = np.zeros((int(duration / clip_length), annotators))
    ids = np.asarray(clip_ids, dtype=np.int64)
    if len(ids) != len(table_scores):
        raise VideoTextError(f"{len(ids)} clip ids but {len(table_scores)} rows of saliency scores")
    if len(ids) and (ids.min() < 0 or ids.max() >= len(table)):
        raise VideoTextError(f"clip id {int(ids.max())} is outside the video's {len(table)} clips "
                             f"(duration {duration} s, clips of {clip_length} s)")
    table[ids] = table_scores.reshape(len(ids), annotators)
    return table


def ranking_ap(labels: Any, scores: Any) -> float:
    """The AP of `scores` [N] ranking binary `labels` [N]: the mean over the distinct recall levels of
    the best precision at that recall or more; 1 when every label is positive, 0 when none is."""
    labels = np.asarray(labels, dtype=bool)
    scores = np.asarray(scores, dtype=np.float64)
    if labels.all():
        return 1.0
    if not labels.any():
        return 0.0
    order = np.argsort(-scores, kind="stable")
    ranked, ranked_labels = scores[order], labels[order]
    last_of_tie = np.r_[ranked[1:] != ranked[:-1], True]  # one point per distinct score (threshold)
    hits = np.cumsum(ranked_labels)[last_of_tie]
    seen = np.flatnonzero(last_of_tie) + 1
    precision = hits / seen
    envelope = np.maximum.accumulate(precision[::-1])[::-1]
    new_level = np.diff(np.r_[0, hits]) > 0  # thresholds where recall rises
    return float(envelope[new_level].mean())


def highlight_metrics(saliency: Mapping[Any, Sequence[float]], truth: Mapping[Any, Any],
                      min_score: float = HIGHLIGHT_MIN_SCORE) -> dict[str, float]:
    """HIT@1 and mAP (percent) of predicted clip scores against annotated ones.

    `saliency`: query id → one score per clip of its video, in order; `truth`: query id →
    [clips, annotators] annotated scores (`clip_saliency_table`). Queries are those of `truth`.
    """
    missing = [q for q in truth if q not in saliency]
    if missing:
        raise VideoTextError(f"no predicted clip scores for {len(missing)} queries, e.g. {missing[0]!r}")
    if not truth:
        raise VideoTextError("highlight metrics: no query to evaluate")
    hits, aps = [], []
    for qid, table in truth.items():
        positive = np.asarray(table, dtype=np.float64) >= min_score  # [clips, annotators]
        predicted = np.asarray(saliency[qid], dtype=np.float64).reshape(-1)
        best = int(np.argmax(predicted)) if len(predicted) else len(positive)
        hits.append(float(positive[best].any()) if best < len(positive) else 0.0)
        fitted = np.zeros(len(positive))
        fitted[: min(len(predicted), len(positive))] = predicted[: len(positive)]
        aps.append(np.mean([ranking_ap(positive[:, a], fitted) for a in range(positive.shape[1])]))
    return {"HIT@1": 100.0 * float(np.mean(hits)), "mAP": 100.0 * float(np.mean(aps)), "n_queries": len(hits)}


def spans_in_clips(spans: Iterable[Sequence[float]], num_clips: int, clip_length: float) -> np.ndarray:
    """[num_clips] 1.0 for each clip [i·L, (i+1)·L) that overlaps a span, else 0.0: the binary
    saliency of data sets annotated with spans alone (a clip is relevant when the moment covers it)."""
    out = np.zeros(num_clips)
    for start, end in spans:
        first = max(0, int(np.floor(start / clip_length)))
        last = min(num_clips, int(np.ceil(end / clip_length)))
        out[first:last] = 1.0
    return out


def temporal_nms(predictions: Sequence[Sequence[float]], iou_threshold: float, keep: int | None = None,
                 ) -> list[tuple[float, float, float]]:
    """Greedy non-maximum suppression of (start, end, score) spans: by score (ties in the given order),
    a span is dropped when its IoU with one already kept is ≥ `iou_threshold`; at most `keep` are kept."""
    rows = np.asarray(predictions, dtype=np.float64).reshape(-1, 3)
    order = np.argsort(-rows[:, 2], kind="stable")
    kept: list[int] = []
    for i in order:
        if keep is not None and len(kept) >= keep:
            break
        if kept and iou_matrix(rows[i : i + 1, :2], rows[kept, :2]).max() >= iou_threshold:
            continue
        kept.append(int(i))
    return [(float(s), float(e), float(c)) for s, e, c in rows[kept]]
