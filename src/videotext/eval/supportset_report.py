"""Support-set's section of the run report (Patrick et al. 2021): captioning and attention.

When the model has a caption decoder: the captioning scores of the report's split (BLEU-4,
METEOR, ROUGE-L, CIDEr; one METEOR call for the whole split, captions and scores written to
`captioning.json`) and the support-set attention W of one batch of the split (paper Fig. 3:
rows are captions i, columns the support videos j they are reconstructed from).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from videotext.eval.captioning import evaluate_captioning
from videotext.io import atomic_path, write_json
from videotext.runtime import to_device


def captioning_report(method: Any, dataset: Any, read_features: Any, report_dir: Any,
                      device: Any = "cpu") -> dict[str, Any]:
    """{"tables", "notes", "figures"} of a Support-set model on `dataset`; {} without a decoder."""
    if method.decoder is None:
        return {}
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    beam = method.config.report_beam_size
    result = evaluate_captioning(method, dataset, read_features, beam_size=beam, meteor=True, device=device)
    write_json(report_dir / "captioning.json", result)
    table = {k: result["metrics"][k] for k in ("bleu4", "meteor", "rouge_l", "cider") if k in result["metrics"]}
    extras: dict[str, Any] = {"tables": {f"captioning (beam {beam}, {result['n_videos']} videos)":
                                         {"captioning": table}},
                              "notes": [f"Captions and scores: {report_dir / 'captioning.json'}."]}
    size = min(32, sum(1 for v in dataset if v.captions))
    if size >= 2:
        batch = method.train_batches(dataset, read_features, size, 0).batch(0, 0)
        weights = support_attention(method, batch, device)
        png = save_attention_map(weights, report_dir / "support_attention.png", attention_title(method.config))
        extras["figures"] = [(png, f"Support-set attention W of {size} caption/video pairs "
                                   "(rows: captions i, columns: support videos j; paper Fig. 3).")]
    return extras


def support_attention(method: Any, batch: dict[str, Any], device: Any = "cpu") -> np.ndarray:
    """The support-set attention W [B, B] of a training batch, in eval mode (the mode is restored)."""
    was_training = method.training
    method.eval()
    try:
        with torch.no_grad():
            return method.support_attention(to_device(batch, device)).cpu().numpy()
    finally:
        method.train(was_training)


def attention_stats(weights: np.ndarray, shares: np.ndarray | None = None) -> dict[str, float]:
    """Summary of a support-set attention W [B, B] (rows: captions, columns: support videos),
    means over rows: `effective_size` exp(entropy) of a row, `max_weight` its largest weight,
    `own_weight` W_ii. With `shares` [B, B] (bool, video i shares an event with video j):
    `weight_on_sharing`, the weight a caption puts on videos sharing an event with its own,
    against `sharing_uniform`, what attention spread evenly over the other videos would put."""
    w = np.asarray(weights, dtype=np.float64)
    p = np.clip(w, 1e-12, None)
    entropy = -(w * np.log(p)).sum(axis=1)
    out = {"effective_size": float(np.exp(entropy).mean()), "max_weight": float(w.max(axis=1).mean()),
           "own_weight": float(np.diag(w).mean())}
    if shares is not None:
        shares = np.asarray(shares, dtype=bool)
        others = ~np.eye(len(w), dtype=bool)
        out["weight_on_sharing"] = float((w * shares).sum(axis=1).mean())
        out["sharing_uniform"] = float((shares.sum(axis=1) / others.sum(axis=1)).mean())
    return out


def attention_title(config: Any) -> str:
    return f"support-set attention ({config.captioning}, T={config.temperature})"


def save_attention_map(weights: np.ndarray, out: Any, title: str) -> Path:
    """Write an attention matrix [captions, videos] as a heat map PNG; returns the path.

    matplotlib's object API (no `pyplot`): the backend of a user's session is left alone."""
    from matplotlib.figure import Figure

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(5.5, 5))
    ax = fig.subplots()
    image = ax.imshow(weights, cmap="viridis", vmin=0.0, vmax=float(weights.max()) or 1.0)
    ax.set_xlabel("support video j")
    ax.set_ylabel("caption i")
    ax.set_title(title)
    fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    return out
