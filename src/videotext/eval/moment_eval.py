"""The `moments` protocol: a moment method's spans for every query of a split, scored by the field's metrics.

For each query with ground truth, every window of its video (`videotext.data.moment_batches.sliding_windows`)
is read with the query; its step saliency is averaged over the windows covering each step, and its
spans in seconds are, as the method's `decode` says, the spans of all windows merged by non-maximum
suppression and ranked by score ("spans", the paper's), or the span finder's over the whole-video
saliency ("saliency", `eval.span_finder.find_spans` with the method's `saliency_spans` settings)
(`predict_moments`). `evaluate_moments` gives

    {"moments": R1/R5 at IoU 0.3/0.5/0.7, mIoU, mAP@0.5, mAP@0.75, mAP  (videotext.eval.moments),
     "highlight": HIT@1, mAP of the step saliency, "decode", "n_queries", "n_videos"}

The highlight truth is the query's annotated clip scores (a clip counts from 4, "Very Good") where
its clips are the feature steps (QVHighlights' 2-s clips with 2-s features); for queries annotated
with spans alone, a step is a highlight when a ground-truth span covers it (``highlight_truth``
says which). `predictions_records` writes the predictions in QVHighlights' submission format.
"""
from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np
import torch

from videotext.data.moment_batches import WindowItem, collate_windows, sliding_windows, step_features, window_item
from videotext.data.schema import MomentQuery, VideoTextDataset
from videotext.errors import VideoTextError
from videotext.eval.moments import (
    HIGHLIGHT_MIN_SCORE, clip_saliency_table, highlight_metrics, moment_metrics, spans_in_clips, temporal_nms,
)
from videotext.eval.span_finder import SpanSettings, find_spans, span_settings
from videotext.runtime import to_device


def _windows(method: Any, queries: Sequence[MomentQuery], read_features: Any) -> Iterator[tuple[int, WindowItem]]:
    """(query index, window) for every window of every query's video."""
    steps_of = step_features(read_features)
    for index, query in enumerate(queries):
        features, step = steps_of(query.video)
        count = next(iter(features.values())).shape[0]
        for start in sliding_windows(count, method.window, method.stride):
            yield index, window_item(query, features, step, start, method.window)


@torch.inference_mode()
def predict_moments(method: Any, dataset: VideoTextDataset, read_features: Any, device: Any = "cpu",
                    batch_size: int = 64, queries: Sequence[MomentQuery] | None = None,
                    ) -> tuple[dict[str, list[tuple[float, float, float]]], dict[str, np.ndarray], dict[str, float]]:
    """Per query id: its spans (start, end, score) best first, its saliency per step of the video, and
    the step's seconds."""
    queries = list(dataset.moment_queries() if queries is None else queries)
    was_training = method.training
    method.eval()
    raw: list[list[tuple[float, float, float]]] = [[] for _ in queries]
    sums: list[np.ndarray | None] = [None] * len(queries)
    counts: list[np.ndarray | None] = [None] * len(queries)
    steps: dict[str, float] = {}
    try:
        pending: list[tuple[int, WindowItem]] = []

        def flush() -> None:
            items = [item for _, item in pending]
            batch = to_device(collate_windows(items, method.experts, method.window, method.prepare_text), device)
            spans, scores, saliency = (t.cpu().numpy() for t in method.predict_windows(batch))
            for (index, item), rows, row_scores, row_saliency in zip(pending, spans, scores, saliency):
                offset = item.start * item.step
                raw[index].extend((offset + s * item.window_seconds, offset + e * item.window_seconds, float(c))
                                  for (s, e), c in zip(rows, row_scores))
                total = len(step_features(read_features)(queries[index].video)[0][method.experts[0]])
                if sums[index] is None:
                    sums[index], counts[index] = np.zeros(total), np.zeros(total)
                sums[index][item.start : item.start + item.steps] += row_saliency[: item.steps]
                counts[index][item.start : item.start + item.steps] += 1
                steps[queries[index].qid] = item.step
            pending.clear()

        for pair in _windows(method, queries, read_features):
            pending.append(pair)
            if len(pending) >= batch_size:
                flush()
        if pending:
            flush()
    finally:
        method.train(was_training)
    cfg = method.config
    saliency = {q.qid: sums[i] / np.maximum(counts[i], 1) for i, q in enumerate(queries)}
    if cfg.decode not in ("spans", "saliency"):
        raise VideoTextError(f"decode {cfg.decode!r}: a moment method's spans are decoded as spans or saliency")
    if cfg.decode == "saliency":
        settings = span_settings(cfg.saliency_spans, "model.saliency_spans")
        predictions = {q.qid: saliency_spans(saliency[q.qid], steps[q.qid], settings, cfg.max_predictions)
                       for q in queries}
    else:
        predictions = {q.qid: temporal_nms(raw[i], cfg.nms_iou, cfg.max_predictions) for i, q in enumerate(queries)}
    return predictions, saliency, steps


def saliency_spans(saliency: np.ndarray, step: float, settings: SpanSettings, k: int) -> list[tuple[float, float, float]]:
    """The k best spans (start, end, score) of one video's step saliency [steps], its steps `step` s apart."""
    scores = np.asarray(saliency, np.float32)
    starts = np.arange(len(scores), dtype=np.float32) * np.float32(step)
    return [(s.start, s.end, s.score) for s in find_spans(scores, starts, starts + np.float32(step), k=k, settings=settings)]


def highlight_truth(query: MomentQuery, steps: int, step: float) -> tuple[np.ndarray, str]:
    """[steps, annotators] annotated scores of each step, and where they come from ("annotated" / "spans")."""
    moment = query.moment
    if moment.clip_ids and moment.clip_length and abs(moment.clip_length - step) < 1e-6:
        return clip_saliency_table(steps * step, moment.clip_ids, moment.saliency, step), "annotated"
    return spans_in_clips(query.spans, steps, step)[:, None] * HIGHLIGHT_MIN_SCORE, "spans"


def evaluate_moments(method: Any, dataset: VideoTextDataset, read_features: Any, device: Any = "cpu",
                     batch_size: int = 64) -> dict[str, Any]:
    """The moment and highlight metrics of one split (see the module docstring)."""
    if getattr(method, "task", "retrieval") != "moments":
        raise VideoTextError(f"method {getattr(method, 'name', '?')!r} ranks videos; the moments protocol needs a "
                             "moment method (moment_detr)")
    queries = dataset.moment_queries()
    if not queries:
        raise VideoTextError(f"{dataset.name}: no moment query with a ground-truth span to evaluate")
    predictions, saliency, steps = predict_moments(method, dataset, read_features, device, batch_size, queries)
    metrics = moment_metrics(predictions, {q.qid: q.spans for q in queries})
    tables, sources = {}, set()
    for q in queries:
        tables[q.qid], source = highlight_truth(q, len(saliency[q.qid]), steps[q.qid])
        sources.add(source)
    highlight = highlight_metrics(saliency, tables)
    return {"moments": {k: v for k, v in metrics.items() if k != "n_queries"},
            "highlight": {k: v for k, v in highlight.items() if k != "n_queries"},
            "highlight_truth": "+".join(sorted(sources)), "decode": method.config.decode, "n_queries": len(queries),
            "n_videos": len({q.video.id for q in queries})}


def predictions_records(dataset: VideoTextDataset, predictions: dict[str, list[tuple[float, float, float]]],
                        saliency: dict[str, np.ndarray] | None = None, digits: int = 4) -> list[dict[str, Any]]:
    """One QVHighlights submission line per query: {"qid", "query", "vid", "pred_relevant_windows",
    "pred_saliency_scores"}, the format the official evaluation reads."""
    out = []
    for query in dataset.moment_queries():
        if query.qid not in predictions:
            continue
        record = {"qid": query.qid, "query": query.query, "vid": query.video.id,
                  "pred_relevant_windows": [[round(s, digits), round(e, digits), round(c, digits)]
                                            for s, e, c in predictions[query.qid]]}
        if saliency is not None:
            record["pred_saliency_scores"] = [round(float(x), digits) for x in saliency[query.qid]]
        out.append(record)
    return out
