"""`videotext.eval.moments` against the official QVHighlights evaluation, run from outside the tree.

The official code (jayleicn/moment_detr `standalone_eval/`, with its sample validation predictions and
`data/highlight_val_release.jsonl`) is never committed: `scripts/fetch_official_moment_detr.sh` copies
it from a clone into $VIDEOTEXT_OFFICIAL_MOMENT_DETR (default ~/.cache/videotext/official/moment_detr),
and these tests skip where it is absent. The official functions round their figures to 0.01; the
unrounded comparison averages their per-query values (an AP, or a 0 / 100 hit, exact), which is how
they aggregate.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from videotext.eval.moments import (
    MAP_IOUS, clip_saliency_table, detection_ap, highlight_metrics, moment_metrics, ranking_ap,
)

REPO = Path(__file__).resolve().parents[2]
ROOT = Path(os.environ.get("VIDEOTEXT_OFFICIAL_MOMENT_DETR") or Path.home() / ".cache/videotext/official/moment_detr")
TOLERANCE = 1e-6


@pytest.fixture(scope="module")
def official():
    """The official `standalone_eval.eval` module, imported from ROOT (outside the tree)."""
    if not (ROOT / "standalone_eval" / "eval.py").is_file():
        pytest.skip(f"official QVHighlights evaluation not found at {ROOT} (scripts/fetch_official_moment_detr.sh)")
    assert not ROOT.resolve().is_relative_to(REPO), "the official code must live outside the tree"
    pytest.importorskip("sklearn")
    sys.path.insert(0, str(ROOT))
    try:
        module = importlib.import_module("standalone_eval.eval")
        assert Path(module.__file__).resolve().is_relative_to(ROOT.resolve())
        module.get_ap = remembered(module.get_ap)  # the rounded and unrounded passes share its ~3 ms calls
        yield module
    finally:
        sys.path.remove(str(ROOT))
        for name in [n for n in sys.modules if n == "standalone_eval" or n.startswith("standalone_eval.")]:
            del sys.modules[name]


def remembered(get_ap):
    """`get_ap` answering a repeated (labels, scores) pair from memory."""
    seen: dict[bytes, float] = {}

    def cached(y_true, y_predict, *args, **kwargs):
        key = np.asarray(y_true, dtype=np.float64).tobytes() + b"|" + np.asarray(y_predict, dtype=np.float64).tobytes()
        if args or kwargs:
            return get_ap(y_true, y_predict, *args, **kwargs)
        if key not in seen:
            seen[key] = get_ap(y_true, y_predict)
        return seen[key]

    return cached


def official_rounded(official, submission, truth, thresholds=(0.5, 0.7)) -> dict[str, float]:
    """The official figures of the full range (`eval_moment_retrieval`'s "full", without its worker pool)."""
    mr_ap = official.compute_mr_ap(submission, truth, num_workers=1)
    mr_r1 = official.compute_mr_r1(submission, truth, iou_thds=thresholds)
    out = {f"R1@{t}": mr_r1[str(t)] for t in thresholds}
    out.update({"mAP": mr_ap["average"], "mAP@0.5": mr_ap["0.5"], "mAP@0.75": mr_ap["0.75"]})
    qid2preds = {d["qid"]: d for d in submission}
    tables = {d["qid"]: official.mk_gt_scores(d) for d in truth}
    for bar, name in ((2, "Fair"), (3, "Good"), (4, "VeryGood")):
        binary = {q: (t >= bar).astype(float) for q, t in tables.items()}
        out[f"HL-{name}-HIT@1"] = official.compute_hl_hit1(qid2preds, binary)
        out[f"HL-{name}-mAP"] = official.compute_hl_ap(qid2preds, binary, num_workers=1)
    return out


def official_unrounded(official, submission, truth, thresholds=(0.5, 0.7)) -> dict[str, float]:
    """The same figures without the rounding: the mean of the official per-query values."""
    utils = sys.modules["standalone_eval.utils"]
    by_qid = {d["qid"]: d for d in truth}
    aps, hits = [], {t: [] for t in thresholds}
    for d in submission:
        gt = by_qid[d["qid"]]
        preds = [{"video-id": d["qid"], "t-start": w[0], "t-end": w[1], "score": w[2]}
                 for w in d["pred_relevant_windows"][:10]]
        gts = [{"video-id": d["qid"], "t-start": w[0], "t-end": w[1]} for w in gt["relevant_windows"]]
        aps.append(utils.compute_average_precision_detection(gts, preds, np.array(MAP_IOUS)))
        one = official.compute_mr_r1([d], [gt], iou_thds=thresholds)  # 0.0 or 100.0 each: exact
        for t in thresholds:
            hits[t].append(one[str(t)])
    ap = np.mean(aps, axis=0)
    out = {f"R1@{t}": float(np.mean(hits[t])) for t in thresholds}
    out.update({"mAP": 100 * float(ap.mean()), "mAP@0.5": 100 * float(ap[0]), "mAP@0.75": 100 * float(ap[5])})
    tables = {d["qid"]: official.mk_gt_scores(d) for d in truth}
    for bar, name in ((2, "Fair"), (3, "Good"), (4, "VeryGood")):
        hit1, hl_ap = [], []
        for d in submission:
            binary = (tables[d["qid"]] >= bar).astype(float)
            hit1.append(official.compute_hl_hit1({d["qid"]: d}, {d["qid"]: binary}))  # 0.0 or 100.0
            for annotator in range(binary.shape[1]):
                hl_ap.append(official.compute_ap_from_tuple((0, annotator, binary[:, annotator],
                                                              np.array(d["pred_saliency_scores"])))[2])
        out[f"HL-{name}-HIT@1"] = float(np.mean(hit1))
        out[f"HL-{name}-mAP"] = 100 * float(np.mean(hl_ap))
    return out


def ours(submission, truth, thresholds=(0.5, 0.7)) -> dict[str, float]:
    metrics = moment_metrics({d["qid"]: d["pred_relevant_windows"] for d in submission},
                             {d["qid"]: d["relevant_windows"] for d in truth}, recall_ious=thresholds)
    out = {k: metrics[k] for k in (*(f"R1@{t}" for t in thresholds), "mAP", "mAP@0.5", "mAP@0.75")}
    tables = {d["qid"]: clip_saliency_table(d["duration"], d["relevant_clip_ids"], d["saliency_scores"]) for d in truth}
    saliency = {d["qid"]: d["pred_saliency_scores"] for d in submission}
    for bar, name in ((2, "Fair"), (3, "Good"), (4, "VeryGood")):
        highlight = highlight_metrics(saliency, tables, min_score=bar)
        out[f"HL-{name}-HIT@1"], out[f"HL-{name}-mAP"] = highlight["HIT@1"], highlight["mAP"]
    return out


def assert_equal_to_official(official, submission, truth, thresholds=(0.5, 0.7)) -> dict[str, float]:
    mine = ours(submission, truth, thresholds)
    unrounded = official_unrounded(official, submission, truth, thresholds)
    rounded = official_rounded(official, submission, truth, thresholds)
    assert mine.keys() == unrounded.keys() == rounded.keys()
    for key in mine:
        assert abs(mine[key] - unrounded[key]) < TOLERANCE, (key, mine[key], unrounded[key])
        assert abs(round(mine[key], 2) - rounded[key]) < TOLERANCE, (key, mine[key], rounded[key])
    return mine


def load_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_official_sample_validation_predictions(official):
    submission = load_jsonl(ROOT / "standalone_eval" / "sample_val_preds.jsonl")
    truth = load_jsonl(ROOT / "data" / "highlight_val_release.jsonl")
    mine = assert_equal_to_official(official, submission, truth)
    # and the official code gives here the figures it publishes beside the samples
    published = json.loads((ROOT / "standalone_eval" / "sample_val_preds_metrics_raw.json").read_text())["brief"]
    assert round(mine["R1@0.5"], 2) == published["MR-full-R1@0.5"] == 53.94
    assert round(mine["R1@0.7"], 2) == published["MR-full-R1@0.7"]
    assert round(mine["mAP"], 2) == published["MR-full-mAP"] == 32.2
    assert round(mine["mAP@0.75"], 2) == published["MR-full-mAP@0.75"]
    assert round(mine["HL-VeryGood-HIT@1"], 2) == published["HL-min-VeryGood-Hit1"]
    assert round(mine["HL-VeryGood-mAP"], 2) == published["HL-min-VeryGood-mAP"]


def generated(seed: int, queries: int = 200) -> tuple[list[dict], list[dict]]:
    """QVHighlights-shaped ground truth and predictions with the hard cases: spans on the 2-s grid (IoU
    exactly at a threshold), several ground-truth spans, tied span and clip scores, score lists longer
    and shorter than the video's clips, spans past the video's end."""
    rng = np.random.default_rng(seed)
    truth, submission = [], []
    for qid in range(queries):
        duration = int(rng.choice([126, 130, 148, 150]))
        clips = duration // 2
        windows, taken = [], set()
        for _ in range(int(rng.integers(1, 4))):
            start = int(rng.integers(0, clips - 1))
            end = int(min(clips, start + rng.integers(1, 15)))
            if not taken & set(range(start, end)):
                taken |= set(range(start, end))
                windows.append([2 * start, 2 * end])
        ids = sorted(taken)
        truth.append({"qid": qid, "query": f"query {qid}", "duration": duration, "vid": f"v{qid}",
                      "relevant_windows": windows, "relevant_clip_ids": ids,
                      "saliency_scores": rng.integers(0, 5, size=(len(ids), 3)).tolist()})
        predicted = []
        for _ in range(int(rng.integers(1, 13))):
            if rng.random() < 0.5:  # on the grid, near a ground-truth span
                base = windows[int(rng.integers(len(windows)))]
                start = max(0, base[0] + 2 * int(rng.integers(-3, 4)))
                end = max(start + 2, base[1] + 2 * int(rng.integers(-3, 4)))
            else:
                start = float(rng.uniform(0, duration - 1))
                end = float(start + rng.uniform(0.5, 40))
            predicted.append([start, end, round(float(rng.random()), 1)])  # ties in score
        predicted.sort(key=lambda w: -w[2])
        length = clips + int(rng.integers(-3, 4))
        saliency = np.round(rng.normal(size=length), 1).tolist()  # ties in clip scores
        submission.append({"qid": qid, "vid": f"v{qid}", "pred_relevant_windows": predicted,
                           "pred_saliency_scores": saliency})
    return submission, truth


@pytest.mark.parametrize("seed", [0, 1])
def test_generated_predictions(official, seed):
    submission, truth = generated(seed)
    assert_equal_to_official(official, submission, truth, thresholds=(0.3, 0.5, 0.7))


def test_per_query_ap_equals_the_official_helpers(official):
    """The per-query pieces, unrounded, to 1e-12: detection AP at each threshold and the clip-ranking AP."""
    utils = sys.modules["standalone_eval.utils"]
    submission, truth = generated(2, queries=100)
    for d, gt in zip(submission, truth):
        windows = np.array(d["pred_relevant_windows"][:10])
        preds = [{"video-id": 0, "t-start": s, "t-end": e, "score": c} for s, e, c in windows]
        gts = [{"video-id": 0, "t-start": s, "t-end": e} for s, e in gt["relevant_windows"]]
        expected = utils.compute_average_precision_detection(gts, preds, np.array(MAP_IOUS))
        got = detection_ap(windows[:, :2], windows[:, 2], gt["relevant_windows"])
        assert np.abs(got - expected).max() < 1e-12
        table = clip_saliency_table(gt["duration"], gt["relevant_clip_ids"], gt["saliency_scores"])
        for annotator in range(3):
            labels = (table[:, annotator] >= 3).astype(float)
            scores = np.zeros(len(labels))
            scores[: min(len(labels), len(d["pred_saliency_scores"]))] = d["pred_saliency_scores"][: len(labels)]
            assert abs(ranking_ap(labels, scores) - utils.get_ap(labels, scores)) < 1e-12
