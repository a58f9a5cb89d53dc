"""The report of a trained run: its training curves, the split's metrics, rank plots and
the method's own section (`Method.report_section`, a name in `SECTIONS`: MMT's per-expert
view, Support-set's captioning scores and attention map …).

`videotext train` writes it after the test evaluation and `videotext eval` after
evaluating a split; both land in run_dir/report/index.html.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from videotext.errors import VideoTextError
from videotext.eval.evaluate import encode_split, evaluate_encoded, metric_directions
from videotext.eval.mmt_report import expert_report
from videotext.eval.report import write_report
from videotext.eval.supportset_report import captioning_report

#: report section name → function(method, dataset, read_features, report_dir, device=...) →
#: {"tables": {caption: {direction: metrics}}, "figures": [(png written into report_dir, caption)],
#: "notes": [lines]}
SECTIONS: dict[str, Callable[..., dict[str, Any]]] = {
    "experts": expert_report,
    "captioning": captioning_report,
}


def method_section(method: Any, dataset: Any, read_features: Any, report_dir: Path,
                   device: Any = "cpu") -> dict[str, Any]:
    """The method's own part of the report on `dataset` ({} when it declares none)."""
    name = getattr(method, "report_section", "")
    if not name:
        return {}
    if name not in SECTIONS:
        raise VideoTextError(f"method {getattr(method, 'name', type(method).__name__)!r}: unknown report section "
                             f"{name!r} (known: {sorted(SECTIONS)})")
    return SECTIONS[name](method, dataset, read_features, report_dir, device=device) or {}


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
    extras = method_section(method, dataset, read_features, report_dir, device=device)
    tables.update(extras.get("tables", {}))
    notes = [f"Method: {getattr(method, 'name', type(method).__name__)}; split {split!r}: "
             f"{metrics.get('n_videos', '?')} videos, {metrics.get('n_captions', '?')} captions."]
    notes += list(extras.get("notes", []))
    return write_report(run_dir, title=title or f"videotext run — {run_dir.name}",
                        metrics_log=run_dir / "metrics.jsonl", test_metrics=test_metrics, ranks=ranks,
                        tables=tables, notes=notes, method_figures=extras.get("figures"))
