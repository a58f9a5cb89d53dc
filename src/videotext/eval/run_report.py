"""The report of a trained run: its training curves, the split's metrics, rank plots and
whatever the method adds (`Method.report_extras`: captioning scores, attention maps …).

`videotext train` writes it after the test evaluation and `videotext eval` after
evaluating a split; both land in run_dir/report/index.html.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from videotext.eval.evaluate import encode_split, evaluate_encoded, metric_directions
from videotext.eval.report import write_report


def write_run_report(run_dir: str | Path, method: Any, dataset: Any, read_features: Any, *,
                     split: str, metrics: dict[str, Any], device: Any = "cpu",
                     title: str | None = None) -> Path:
    """Write run_dir/report/index.html for `metrics` (an `evaluate_split` result on `split`)."""
    run_dir = Path(run_dir)
    report_dir = run_dir / "report"
    report_dir.mkdir(parents=True, exist_ok=True)
    directions = metric_directions(metrics)
    main = {k: directions[k] for k in ("t2v", "v2t") if k in directions}
    tables = {f"{split} split: {k}": {k: v} for k, v in directions.items() if k not in main}
    test_metrics = main if split == "test" else {}
    if main and split != "test":
        tables = {f"{split} split": main, **tables}
    ranks = None
    if main:  # the multi-caption protocol: per-query ranks for the recall curve and histogram
        full = evaluate_encoded(method, encode_split(method, dataset, read_features, device=device),
                                return_ranks=True)
        ranks = {**full["ranks"], "n_targets": full["n_videos"]}
    extras = method.report_extras(dataset, read_features, report_dir, device=device) or {}
    tables.update(extras.get("tables", {}))
    notes = [f"Method: {getattr(method, 'name', type(method).__name__)}; split {split!r}: "
             f"{metrics.get('n_videos', '?')} videos, {metrics.get('n_captions', '?')} captions."]
    notes += list(extras.get("notes", []))
    return write_report(run_dir, title=title or f"videotext run — {run_dir.name}",
                        metrics_log=run_dir / "metrics.jsonl", test_metrics=test_metrics, ranks=ranks,
                        tables=tables, notes=notes, method_figures=extras.get("figures"))
