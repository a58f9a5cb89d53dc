"""Compare finished runs side by side: one table and one bar chart (ablations, baselines).

A run is a directory made by `videotext train`: its `test_metrics.json`, or, for a
`--seeds` run, its `seeds_summary.json` (mean ± std over seeds). Used for the papers'
ablation figures (MMT Fig. 4 leave-one-expert-out, Support-set Table 2, ToCo Table 1).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

from videotext.errors import DataFormatError, VideoTextError
from videotext.eval.report import write_report
from videotext.eval.report.html import cell
from videotext.eval.report.plots import new_figure, save_figure
from videotext.eval.retrieval import aggregate_seeds
from videotext.io import write_json

SEEDS_SUMMARY = "seeds_summary.json"  # mean ± std of a `--seeds` folder (written by videotext.train.seeds)


def _direction(path: Path, data: dict[str, Any], direction: str) -> dict[str, Any]:
    if direction not in data:
        raise DataFormatError(path, direction, f"no such direction (have {sorted(k for k, v in data.items() if isinstance(v, dict))})")
    return data[direction]


def seed_metrics(run_dir: str | Path, direction: str = "t2v") -> dict[int, dict[str, Any]]:
    """{seed: metrics} of a `--seeds` folder's finished `seed_N/` runs (empty for a single run)."""
    found = {}
    for child in sorted(Path(run_dir).glob("seed_*")):
        path = child / "test_metrics.json"
        if child.name[5:].isdigit() and path.exists():
            found[int(child.name[5:])] = _direction(path, json.loads(path.read_text(encoding="utf-8")), direction)
    return found


def run_metrics(run_dir: str | Path, direction: str = "t2v") -> dict[str, Any]:
    """One direction's metrics of a run; values are numbers or {"mean", "std", "n"}.

    A `--seeds` folder gives its seeds_summary.json, or, while that is not written (seeds
    trained as separate jobs into `seed_N/`), the mean ± std of its finished seeds."""
    run_dir = Path(run_dir)
    for name in (SEEDS_SUMMARY, "test_metrics.json"):
        path = run_dir / name
        if path.exists():
            return _direction(path, json.loads(path.read_text(encoding="utf-8")), direction)
    seeds = seed_metrics(run_dir, direction)
    if seeds:
        return aggregate_seeds(list(seeds.values()))
    raise VideoTextError(f"{run_dir}: no test_metrics.json, {SEEDS_SUMMARY} or seed_N/test_metrics.json "
                         "(is the run finished?)")


def paired_difference(row: dict[int, dict[str, Any]], baseline: dict[int, dict[str, Any]],
                      metric: str) -> dict[str, Any] | None:
    """`metric` of row − baseline, seed by seed over the seeds both have: {"mean", "std", "n",
    "ci95", "per_seed": {seed: difference}}; None when they share no seed. Pairing removes what a
    seed does to both (its split-independent initialisation and batch order), so the spread of the
    difference is what tells two methods apart, not the two rows' own spreads. ``ci95`` is the
    95 % interval of the mean difference (`t_interval`; None with one seed)."""
    seeds = sorted(set(row) & set(baseline))
    if not seeds:
        return None
    per_seed = {seed: float(_mean_std(row[seed][metric])[0]) - float(_mean_std(baseline[seed][metric])[0])
                for seed in seeds}
    summary = aggregate_seeds([{"d": d} for d in per_seed.values()])["d"]
    return {**summary, "ci95": t_interval(summary["mean"], summary["std"], summary["n"]), "per_seed": per_seed}


def t_interval(mean: float, std: float, n: int, level: float = 0.95) -> list[float] | None:
    """The Student-t interval of a mean of n paired differences: mean ± t(n − 1) · std / √n (for
    n = 3 seeds t = 4.30 at 95 %); None when n < 2 (no spread to go by)."""
    if n < 2:
        return None
    from scipy.stats import t  # only where an interval is asked for

    half = float(t.ppf(0.5 + level / 2, n - 1)) * std / math.sqrt(n)
    return [mean - half, mean + half]


def _paired_cell(paired: dict[str, Any] | None) -> str:
    if paired is None:
        return "–"
    signs = ", ".join(f"{d:+.1f}" for d in paired["per_seed"].values())
    return f"{cell(paired)} ({signs})"


def _mean_std(value: Any) -> tuple[float, float]:
    if isinstance(value, dict):
        std = float(value.get("std", 0.0)) if value.get("n", 2) > 1 else 0.0
        return float(value["mean"]), std if math.isfinite(std) else 0.0
    return float(value), 0.0


def compare_runs(run_dirs: Sequence[str | Path], out: str | Path, labels: Sequence[str] | None = None,
                 direction: str = "t2v", metric: str = "R1", title: str = "Run comparison",
                 baseline: str | None = None) -> Path:
    """Write out/report/index.html (table + bar chart of `metric`) and out/comparison.json.

    With `baseline` (a row label), each seeded row also gets its paired difference in `metric`
    to that row: mean ± std over the shared seeds and each seed's sign."""
    if not run_dirs:
        raise VideoTextError("compare: give at least one run directory")
    labels = list(labels) if labels else [Path(r).name for r in run_dirs]
    if len(labels) != len(run_dirs):
        raise VideoTextError(f"compare: {len(labels)} labels for {len(run_dirs)} runs")
    rows = {label: run_metrics(run, direction) for label, run in zip(labels, run_dirs)}
    if any(metric not in row for row in rows.values()):
        raise VideoTextError(f"compare: metric {metric!r} is not in every run's {direction} metrics")
    paired: dict[str, Any] = {}
    if baseline is not None:
        if baseline not in rows:
            raise VideoTextError(f"compare: --baseline {baseline!r} is not a row label (rows: {', '.join(rows)})")
        seeds = {label: seed_metrics(run, direction) for label, run in zip(labels, run_dirs)}
        paired = {label: paired_difference(seeds[label], seeds[baseline], metric)
                  for label in labels if label != baseline}
    out = Path(out)
    report_dir = out / "report"
    report_dir.mkdir(parents=True, exist_ok=True)
    write_json(out / "comparison.json", {"direction": direction, "runs": dict(zip(labels, map(str, run_dirs))),
                                         "metrics": rows, "baseline": baseline, "paired": paired})
    means, stds = zip(*(_mean_std(row[metric]) for row in rows.values()))
    fig, (ax,) = new_figure(max(4.0, 0.9 * len(rows) + 1.5), 3.2)
    ax.bar(range(len(rows)), means, yerr=stds if any(stds) else None, capsize=4, color="#1f77b4")
    ax.set_xticks(range(len(rows)), labels, rotation=20 if len(rows) > 4 else 0, ha="right" if len(rows) > 4 else "center")
    ax.set_ylabel(f"{direction} {metric}" + (" (%)" if metric.startswith("R") and metric[1:].isdigit() else ""))
    for x, (m, s) in enumerate(zip(means, stds)):
        ax.annotate(f"{m:.1f}", (x, m + s), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8)
    name = save_figure(fig, report_dir / "comparison.png")
    notes = [f"{label} − {baseline}, {direction} {metric} paired by seed: {_paired_cell(d)}"
             for label, d in paired.items()] + [f"{label}: {run}" for label, run in zip(labels, run_dirs)]
    return write_report(out, title=title, metrics_log=[], test_metrics={}, tables={f"{title} ({direction})": rows},
                        notes=notes, method_figures=[(name, f"{direction} {metric} per run (error bars: std over seeds)")])
