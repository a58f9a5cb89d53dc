"""MMT's section of the run report: what each expert contributes (Gabeur et al. 2020, Fig. 4).

On the report's split: t2v R@1 with each expert removed at test time (read as a missing
expert: no tokens, its weight renormalised away unless `keep_missing_experts`), R@1 of each
expert's own similarity ⟨φ^i, ψ^i⟩ alone (near chance = a dead expert) and the mean mixture
weight w_i(c) the captions give each expert (eq. 7), as tables, a note and one figure.
The paper's Fig. 4 *retrains* without each expert: `videotext compare` over such runs
gives that plot.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from videotext.data.mmt_features import MMTFeatures
from videotext.encode import encode_videos
from videotext.eval.evaluate import Encoded, encode_split, evaluate_encoded
from videotext.eval.report.plots import new_figure, save_figure


def expert_report(method: Any, dataset: Any, read_features: Any, report_dir: Any,
                  device: Any = "cpu") -> dict[str, Any]:
    """{"tables", "notes", "figures"} of an MMT model on `dataset`; `mmt_experts.png` is
    written into `report_dir`. {} when the split has no captions or fewer than two videos."""
    reader = method.feature_reader(read_features)
    encoded = encode_split(method, dataset, reader, device=device)
    if not encoded.refs or len(encoded.video_ids) < 2:
        return {}
    rows = {"t2v, all experts": evaluate_encoded(method, encoded)["t2v"]}
    mean_weights = encoded.text["weights"].mean(0)  # [M]
    was_training = method.training
    method.eval()
    try:
        for expert in method.experts:  # read as missing: no tokens, then as missing_agg / keep_missing_experts say
            drop = MMTFeatures(reader.store, reader.experts, reader.max_steps, reader.shuffle, missing=[expert])
            video = encode_videos(method, dataset, drop, device=device)
            rows[f"t2v without {expert}"] = evaluate_encoded(method, Encoded(encoded.text, video, encoded.refs,
                                                                             encoded.video_ids))["t2v"]
    finally:
        method.train(was_training)
    alone = {f"t2v, {expert} alone": evaluate_encoded(  # ⟨φ^i, ψ^i⟩ only: a dead expert is near chance
        method, encoded, sims=method.expert_similarity(encoded.text, encoded.video, i))["t2v"]
        for i, expert in enumerate(method.experts)}
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    png = report_dir / "mmt_experts.png"
    plot_experts(rows, alone, method.experts, mean_weights.tolist(), len(encoded.refs), png)
    weights = ", ".join(f"{e} {w:.3f}" for e, w in zip(method.experts, mean_weights.tolist()))
    return {"tables": {"each expert removed at test time (no retraining)": rows,
                       "each expert's own similarity ⟨φ^i, ψ^i⟩ alone (same model)": alone},
            "notes": [f"Mean mixture weight per expert over {len(encoded.refs)} test captions: {weights}."],
            "figures": [(png.name, "Left: t2v R@1 with each expert removed at test time. Middle: t2v R@1 of "
                              "each expert's own similarity (near chance = a dead expert). Right: the mean "
                              "mixture weight the captions give each expert. Leave-one-out *training* (paper Fig. 4 "
                              "middle) is `videotext compare` over runs trained without each expert.")]}


def plot_experts(removed: dict[str, dict[str, Any]], alone: dict[str, dict[str, Any]], experts: list[str],
                 mean_weights: list[float], n_captions: int, path: Path) -> str:
    """Three bar charts side by side: R@1 with each expert removed, R@1 of each expert alone,
    the mean mixture weight per expert; returns the PNG's file name."""
    fig, (left, middle, right) = new_figure(13.0, 3.2, ncols=3)
    labels = list(removed)
    left.bar(range(len(labels)), [r["R1"] for r in removed.values()], color="#1f77b4")
    left.set_xticks(range(len(labels)), [label.removeprefix("t2v ") for label in labels], rotation=20, ha="right")
    left.set_ylabel("t2v R@1 (%)")
    left.set_title("expert removed at test time")
    middle.bar(range(len(experts)), [r["R1"] for r in alone.values()], color="#2ca02c")
    middle.set_xticks(range(len(experts)), experts, rotation=20, ha="right")
    middle.set_ylabel("t2v R@1 (%)")
    middle.set_title("one expert's similarity alone")
    right.bar(range(len(experts)), mean_weights, color="#ff7f0e")
    right.set_xticks(range(len(experts)), experts, rotation=20, ha="right")
    right.set_ylabel("mean mixture weight w_i(c)")
    right.set_title(f"{n_captions} test captions (eq. 7)")
    return save_figure(fig, path)
