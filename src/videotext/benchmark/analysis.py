"""Why a trained method scores what it does: which videos it confuses, and how far it fits.

`event_confusions` / `run_event_confusions` — text→video errors against the events videos share.

On the synthetic sets every video records its events (colour, shape, action). Of the test
captions whose top-ranked video is wrong, `event_confusions` counts those whose wrong video
shares an event with the right one, against the share of all other videos that do (what
errors falling at random would give). Errors that concentrate on event-sharing videos mean
the method has pulled such videos together: the effect Support-set's cross-captioning aims at
(§3.1.2), measured where the test asks to tell those very videos apart.

`run_fit_gap` — the same checkpoint tested on its test split and on as many of its own training
videos, under several model settings (ToCo's re-ranker on and off): a scorer below another on
the training videos too is under-trained, not over-fitted.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from videotext.benchmark.runner import model_settings
from videotext.data.run_data import RunData
from videotext.data.synthetic.sharing import sharing_matrix
from videotext.errors import VideoTextError
from videotext.eval.evaluate import encode_split, metric_directions, score
from videotext.eval.protocols import evaluate_split
from videotext.eval.relevance import multi_caption_relevance
from videotext.inference import load_model


def event_confusions(sims: np.ndarray, right: np.ndarray, shares: np.ndarray) -> dict[str, float]:
    """`sims` [captions, videos], `right` [captions] the index of each caption's video (the
    multi-caption relevance), `shares` [videos, videos] bool. Returns the t2v R@1 (%), the number of wrong top-1 videos,
    the % of them that share an event with the right video, and the % expected at random
    (mean over the wrong queries of the share of other videos sharing an event with the right one)."""
    sims, right, shares = np.asarray(sims), np.asarray(right, dtype=np.int64), np.asarray(shares, dtype=bool)
    top = sims.argmax(axis=1)
    wrong = top != right
    n_videos = shares.shape[0]
    errors = int(wrong.sum())
    out = {"t2v_R1": 100.0 * (1 - errors / max(len(top), 1)), "errors": float(errors)}
    if errors:
        out["errors_sharing_pct"] = 100.0 * float(shares[right[wrong], top[wrong]].mean())
        out["random_sharing_pct"] = 100.0 * float((shares[right[wrong]].sum(axis=1) / (n_videos - 1)).mean())
    return out


def run_event_confusions(run_dir: str | Path, split: str = "test", checkpoint: str = "best") -> dict[str, float]:
    """`event_confusions` of a trained run on one split of its own (synthetic) data set."""
    model = load_model(run_dir, checkpoint=checkpoint, device="cpu")
    data = RunData(model.config)
    dataset = data.split(split)
    encoded = encode_split(model.method, dataset, data.read_features, device=model.device)
    sims = score(model.method, encoded).cpu().numpy()
    right = multi_caption_relevance([r.video_id for r in encoded.refs], encoded.video_ids)
    by_id = {v.id: v for v in dataset}
    return event_confusions(sims, right, sharing_matrix([by_id[i] for i in encoded.video_ids]))


def run_fit_gap(run_dir: str | Path, settings: dict[str, Sequence[str]] | None = None, checkpoint: str = "best",
                seed: int = 0) -> dict[str, dict[str, Any]]:
    """Metrics of a run's checkpoint on its test split and on a random sample of as many of its
    training videos (`seed`), under each named list of `model.KEY=VALUE` settings (default: the
    run as trained). Returns {setting name: {"test": metrics, "train": metrics, "videos": n}};
    equal candidate counts make the two splits' R@K comparable."""
    model = load_model(run_dir, checkpoint=checkpoint, device="cpu", precision="fp32")
    data = RunData(model.config)
    test = data.split(model.config.data.test_split)
    train = data.split(model.config.data.train_split)
    if len(train.videos) < len(test.videos):
        raise VideoTextError(f"{run_dir}: {len(train.videos)} training videos, fewer than the {len(test.videos)} test videos")
    sample = train.subset(random.Random(seed).sample(sorted(train.videos), len(test.videos)))
    out: dict[str, dict[str, Any]] = {}
    for name, overrides in (settings or {"as trained": []}).items():
        with model_settings(model.method, list(overrides)):
            out[name] = {split: metric_directions(evaluate_split(model.method, videos, data.read_features, device=model.device))
                         for split, videos in (("test", test), ("train", sample))}
        out[name]["videos"] = len(test.videos)
    return out
