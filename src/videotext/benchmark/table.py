"""The benchmark page: one Markdown table per definition table, from finished runs only.

Every figure is read from a run's record (``RESULTS/<row>/seed_<n>.json``, written when the
run finished);
a (row, seed) without one is *not run* (or *in progress*, with its last logged epoch),
never estimated. Cells are mean ± std over the finished seeds, the seed count beside
them; differences against the table's baseline are paired seed by seed
(`videotext.eval.compare.paired_difference`). A PNG plots test t2v R@1 against training
CPU-seconds.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from videotext.benchmark.definition import BenchmarkDef, RowDef
from videotext.benchmark.runner import LOCK, plan, read_record, record_path, run_dir
from videotext.config import load_config
from videotext.eval.compare import interval_text, paired_difference
from videotext.eval.rescore import RESCORERS
from videotext.eval.report.html import cell
from videotext.eval.report.plots import new_figure, save_figure
from videotext.eval.retrieval import aggregate_seeds
from videotext.io import atomic_open, process_alive
from videotext.train.stopping import still_rising
from videotext.train.trainer import read_metrics_log

METRICS = (("t2v", "R1"), ("t2v", "R5"), ("t2v", "MdR"), ("v2t", "R1"), ("v2t", "R5"), ("v2t", "MdR"))


def load_records(bench: BenchmarkDef, results: Path) -> dict[str, dict[int, dict[str, Any]]]:
    """{row name: {seed: record}} of the finished runs recorded under `results`."""
    found: dict[str, dict[int, dict[str, Any]]] = {}
    for row in bench.rows:
        for seed in bench.seeds:
            path = record_path(results, row, seed)
            if path.exists():
                found.setdefault(row.name, {})[seed] = read_record(path)
    return found


def trained_epochs(record: dict[str, Any]) -> float:
    """Epochs the run trained: its budget, or the last validation's epoch where early stopping
    (`train.early_stop_patience`) ended it sooner."""
    curve = record["val_curve"]
    return min(float(record["epochs"]), curve[-1][0]) if curve else float(record["epochs"])


def training_cpu_s(record: dict[str, Any]) -> float:
    """Training CPU-seconds of a run: its steps (`train_cpu_s`) and, in records that keep it apart,
    filling its frozen text caches before the first step (`text_cache_cpu_s`), which earlier runs
    did inside their steps."""
    return float(record["train_cpu_s"]) + float(record.get("text_cache_cpu_s", 0.0))


def rule_curve(bench: BenchmarkDef, record: dict[str, Any]) -> list[list[float]]:
    """The validation curve the training-length rule reads (`bench.training.metric`): `val_curve`
    (t2v R@1, in every record), or the selection curve where that is the rule's metric."""
    metric = bench.training.metric
    if metric == "t2v.R1":
        return record["val_curve"]
    if record.get("select_metric") == metric and "val_select_curve" in record:
        return record["val_select_curve"]
    raise ValueError(f"training.metric {metric!r}: the record of {record.get('row')} seed {record.get('seed')} "
                     "has no such validation curve (t2v.R1, or its selection metric)")


def _steps_per_epoch(bench: BenchmarkDef, row: RowDef, record: dict[str, Any]) -> int:
    """Optimizer steps per epoch: the record's, or (records made before it was kept) its row's
    batch size and accumulation over the training videos the record counts."""
    if record.get("steps_per_epoch"):
        return int(record["steps_per_epoch"])
    train = load_config(row.config, [*row.set, *bench.set]).train
    batches = math.ceil(record["data"]["splits"]["train"] / train.batch_size)
    return math.ceil(batches / train.accumulate)


def best_epoch(bench: BenchmarkDef, row: RowDef, record: dict[str, Any]) -> float | None:
    """The validation epoch of the selected checkpoint (`best_step` on the record's curve); None
    where that step is no validation of the curve."""
    if record.get("best_epoch") is not None:
        return float(record["best_epoch"])
    if record.get("best_step") is None:
        return None
    epoch = record["best_step"] / _steps_per_epoch(bench, row, record)
    return float(epoch) if any(abs(e - epoch) < 1e-9 for e, _ in record["val_curve"]) else None


def seed_rule(bench: BenchmarkDef, row: RowDef, record: dict[str, Any]) -> dict[str, Any]:
    """One run against the training-length rule: epochs trained, best validation epoch, whether
    early stopping ended it before its cap, whether it reached the cap still rising."""
    rule = bench.training
    run = trained_epochs(record)
    return {"run": run, "best": best_epoch(bench, row, record), "stopped": run < float(record["epochs"]),
            "rising": still_rising(rule_curve(bench, record), float(record["epochs"]), rule.patience_epochs,
                                   rule.min_delta)}


def _line_owner(bench: BenchmarkDef, name: str) -> RowDef:
    for row in bench.rows:
        if name == row.name or name in {e.name for e in row.evals}:
            return row
    raise KeyError(name)


def _label(bench: BenchmarkDef, name: str) -> str:
    row = _line_owner(bench, name)
    return row.label if name == row.name else next(e.label for e in row.evals if e.name == name)


def line_stats(bench: BenchmarkDef, records: dict[str, dict[int, dict[str, Any]]], name: str) -> dict[str, Any]:
    """Aggregates of one table line (a row or one of its evaluations) over its finished seeds."""
    row = _line_owner(bench, name)
    runs = records.get(row.name, {})
    if not runs:
        return {"n": 0}
    per_seed = {seed: r["results"][name] for seed, r in runs.items()}
    inference = aggregate_seeds([r["inference"][name] for r in runs.values()])
    return {
        "n": len(runs), "seeds": sorted(runs), "per_seed": per_seed, "metrics": aggregate_seeds(list(per_seed.values())),
        "epochs": sorted({r["epochs"] for r in runs.values()}),
        "rule": {seed: seed_rule(bench, row, r) for seed, r in sorted(runs.items())},
        "parameters": next(iter(runs.values()))["parameters"],
        "trainable": next(iter(runs.values()))["trainable_parameters"],
        "train_cpu_s": aggregate_seeds([{"s": training_cpu_s(r)} for r in runs.values()])["s"],
        "threads": sorted({r.get("threads", bench.threads) for r in runs.values()}),
        "inference": inference,
    }


def _millions(count: int) -> str:
    return f"{count / 1e6:.2f} M" if count >= 1e5 else f"{count / 1e3:.1f} k"


def _metric_cell(stats: dict[str, Any], direction: str, metric: str) -> str:
    value = stats["metrics"].get(direction, {}).get(metric)
    return cell(value, 1 if metric != "MdR" else 1)


def _epochs_cells(stats: dict[str, Any]) -> list[str]:
    """Cap, epochs run, best validation epoch (per seed where they differ) and whether a seed
    reached its cap still rising (`seed_rule`)."""
    rule = stats["rule"]
    runs = [r["run"] for r in rule.values()]
    cap = "/".join(map(str, stats["epochs"]))
    run = cap if all(r == float(e) for r, e in zip(runs, stats["epochs"] * len(runs))) and len(stats["epochs"]) == 1 \
        else " / ".join(f"{r:g}" for r in runs)
    best = " / ".join("?" if r["best"] is None else f"{r['best']:g}" for r in rule.values())
    rising = [seed for seed, r in rule.items() if r["rising"]]
    rising_cell = "no" if not rising else (f"**yes** ({len(rising)} of {len(rule)})" if len(rising) == len(rule)
                                          else f"**yes**: seed{'s' if len(rising) > 1 else ''} {', '.join(map(str, rising))}")
    return [cap, run, best, rising_cell]


def _rising(stats: dict[str, Any]) -> bool:
    return any(r["rising"] for r in stats.get("rule", {}).values())


def _cpu_cell(bench: BenchmarkDef, stats: dict[str, Any]) -> str:
    """Training CPU-seconds, with the torch threads where the runs did not use the benchmark's."""
    threads = stats["threads"]
    return cell(stats["train_cpu_s"], 0) + ("" if threads == [bench.threads] else
                                            f" ({'/'.join(map(str, threads))} threads)")


def _nested(metrics: dict[str, Any], dotted: str) -> Any:
    node: Any = metrics
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _extra_cell(stats: dict[str, Any], key: str) -> str:
    """Mean ± std of a dotted metric over the seeds that have it; – where none has (another line's metric)."""
    values = [{"v": v} for m in stats["per_seed"].values() if (v := _nested(m, key)) is not None]
    return cell(aggregate_seeds(values).get("v")) if values else "–"


def render_table(bench: BenchmarkDef, records: dict[str, dict[int, dict[str, Any]]], table_id: str) -> list[str]:
    table = next(t for t in bench.tables if t.id == table_id)
    names = bench.table_lines(table_id)
    baseline = line_stats(bench, records, table.baseline)
    head = ["row", "seeds", "cap", "epochs run", "best val epoch", "rising at cap", "t2v R@1", "t2v R@5", "t2v MdR",
            "v2t R@1", "v2t R@5", "v2t MdR", f"t2v R@1 − {table.baseline} (paired, 95 % interval)",
            *table.extra_metrics, "params (trainable)", "train CPU-s", "ms / query", "ms / video"]
    lines = [f"## {table.title}", ""]
    if table.notes:
        lines += [table.notes.strip(), ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        stats = line_stats(bench, records, name)
        row = _line_owner(bench, name)
        label = f"{_label(bench, name)} (`{row.config}`)" if name == row.name else _label(bench, name)
        if stats["n"] == 0:
            lines.append("| " + " | ".join([label, f"0 of {len(bench.seeds)}", str(row.epochs)] + ["not run"] * (len(head) - 3)) + " |")
            continue
        against = table.baselines.get(name, table.baseline)
        reference = baseline if against == table.baseline else line_stats(bench, records, against)
        if name == against or reference["n"] == 0:
            paired = "–"
        else:
            diff = paired_difference({s: m["t2v"] for s, m in stats["per_seed"].items()},
                                     {s: m["t2v"] for s, m in reference["per_seed"].items()}, "R1")
            paired = "–" if diff is None else paired_text(diff)
            if diff is not None and (_rising(stats) or _rising(reference)):
                paired += " †"
            if against != table.baseline:
                paired += f" vs {against}"
        extras = [_extra_cell(stats, key) for key in table.extra_metrics]
        lines.append("| " + " | ".join([
            label, f"{stats['n']} of {len(bench.seeds)}", *_epochs_cells(stats),
            *[_metric_cell(stats, d, m) for d, m in METRICS], paired, *extras,
            f"{_millions(stats['parameters'])} ({_millions(stats['trainable'])})",
            _cpu_cell(bench, stats), cell(stats["inference"]["query_cpu_ms"], 2),
            cell(stats["inference"]["video_cpu_ms"], 2)]) + " |")
    return lines + [""]


def paired_text(diff: dict[str, Any]) -> str:
    """`+6.1 ± 1.0 [+3.6, +8.6] (+7.0, +6.2, +5.1)`: a paired difference, its 95 % interval
    (`confidence_interval`) and each seed's difference."""
    interval = interval_text(diff.get("ci95"))
    return f"{cell(diff)}{' ' + interval if interval else ''} ({', '.join(f'{d:+.1f}' for d in diff['per_seed'].values())})"


def plot_cost(bench: BenchmarkDef, records: dict[str, dict[int, dict[str, Any]]], path: Path) -> bool:
    """Test t2v R@1 (mean, std bars) against training CPU-seconds for the main table's lines."""
    points = []
    for name in bench.table_lines("main"):
        stats = line_stats(bench, records, name)
        if stats["n"]:
            r1 = stats["metrics"]["t2v"]["R1"]
            points.append((name, stats["train_cpu_s"]["mean"], r1["mean"], r1["std"], stats["n"]))  # short names fit
    if not points:
        return False
    fig, (ax,) = new_figure(6.4, 4.2)
    for label, cost, mean, std, n in points:
        ax.errorbar([cost], [mean], yerr=[std] if n > 1 else None, fmt="o", capsize=3)
        ax.annotate(f"{label} (n={n})", (cost, mean), textcoords="offset points", xytext=(5, 4), fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("training CPU-seconds per run (log scale)")
    ax.set_ylabel("test t2v R@1 (%)")
    ax.set_title(f"{bench.name}: R@1 against training cost", fontsize=9)
    save_figure(fig, path)
    return True


def _held(lock: Path) -> bool:
    try:
        return process_alive(int(lock.read_text().strip()))
    except (OSError, ValueError):
        return False


def run_status(bench: BenchmarkDef, out: Path, results: Path) -> list[str]:
    """One line per planned run without a record: not run, or in progress at its last logged epoch."""
    lines = []
    for row, seed in plan(bench):
        folder = run_dir(out, row, seed)
        if record_path(results, row, seed).exists():
            continue
        train = [e for e in read_metrics_log(folder) if e.get("kind") == "train"] if (folder / "metrics.jsonl").exists() else []
        if train:
            last = train[-1]
            state = "running" if _held(folder / LOCK) else "interrupted (resumes from its last checkpoint)"
            lines.append(f"- `{row.name}` seed {seed}: {state}, epoch {last['epoch']:.1f} of {row.epochs} "
                         f"after {last.get('train_cpu_s', 0):.0f} training CPU-s")
        else:
            lines.append(f"- `{row.name}` seed {seed}: not run")
    return lines


def _setup(bench: BenchmarkDef, records: dict[str, dict[int, dict[str, Any]]]) -> list[str]:
    any_record = next((r for runs in records.values() for r in runs.values()), None)
    data, rule = bench.data, bench.training
    own_threads = [r for r in bench.rows if bench.row_threads(r) != bench.threads]
    lines = ["## Set-up (the same for every row unless stated)", "",
             f"- Data: the synthetic set of `videotext synth` ({data.videos} videos, seed {data.seed}, splits "
             f"{' / '.join(f'{f:g}' for f in data.splits)} train / val / test), the one `videotext demo` trains on."]
    if any_record:
        splits = any_record["data"]["splits"]
        lines.append(f"  Split sizes: {', '.join(f'{k} {v}' for k, v in splits.items())} videos.")
    lines += ["- Extraction settings (every expert, every row): `" +
              json.dumps(data.extraction, sort_keys=True) + "` (`extract_features` keywords).",
              f"- Seeds {', '.join(map(str, bench.seeds))}; each run's checkpoint is selected on the validation split by "
              "its config's `train.select_metric`; the test split is evaluated once, with every caption a query "
              "(t2v) and every video a query (v2t, any of its captions relevant).",
              f"- {bench.threads} torch thread{'s' if bench.threads != 1 else ''} per run (`train.threads={bench.threads}`)"
              + (", except " + ", ".join(f"`{r.name}` ({bench.row_threads(r)}; its CPU-seconds and CPU-milliseconds count every thread)"
                                         for r in own_threads) if own_threads else "")
              + ". *train CPU-s*: the trainer's own clock "
              "(`train_cpu_s`: data loading, forward, backward, step; validation excluded), plus, in records "
              "that keep it apart (`text_cache_cpu_s`), filling the frozen text models' caches before the first "
              "step, which earlier runs did inside their steps at fp32 and current ones do at the method's "
              "inference precision (bf16 for MiniLM on this CPU).",
              "- *ms / query*: CPU milliseconds to encode one test caption (frozen text models' caches emptied) and "
              "score it against every test video; *ms / video*: CPU milliseconds to encode one test video from its "
              "stored features (from decoded frames for pixel models); feature extraction is not counted.",
              f"- Training length, one rule for every row (`training` in the definition, `videotext.train.stopping`): "
              f"a row's epoch budget is its *cap*; a run has settled once {rule.patience_epochs} epochs of validation "
              f"passed without an improvement of validation {rule.metric} by more than {rule.min_delta:g} point"
              f"{'s' if rule.min_delta != 1 else ''} on the last validation that improved. Early stopping by the rule "
              "ends a run whose lr schedule does not depend on its budget (where its config sets no patience of its own: "
              "COOT keeps §4's 15 epochs); a run whose lr decays to 0 over its cap (cosine, linear) trains to the cap. "
              "*epochs run*: per seed where it is not the cap; *best val epoch*: the validation that selected each seed's "
              "checkpoint; *rising at cap*: a seed that reached its cap with an improvement in its last "
              f"{rule.patience_epochs} epochs, i.e. still rising: its row is marked, and every paired difference with it "
              "carries †; the cure is a new run with a larger cap.",
              "- *Paired differences*: seed by seed over the seeds both lines have, mean ± std, the 95 % interval "
              "of the mean (mean ± t · std / √n; t = 4.30 for 3 seeds) and each seed's difference. An interval that "
              "holds 0 does not tell the two lines apart.",
              "- *params*: all parameters of the method, frozen text models included; trainable ones in brackets."]
    rescored = sorted({e.rescore for r in bench.rows for e in r.evals if e.rescore})
    if rescored:
        queries = any_record["inference"][any_record["row"]].get("queries") if any_record else None
        lines.append("- *Re-scored* lines (`rescore:`) rank the same checkpoint's test similarities after an inference-time "
                     "normalisation (`videotext.eval.rescore`), beside the plain row, which stays the reference: "
                     + "; ".join(f"*{name}* ({RESCORERS[name].title}; {RESCORERS[name].reference}) "
                                 f"{RESCORERS[name].uses_for(queries)}"
                                 for name in rescored)
                     + ". Their *ms / query* add a query's share of re-scoring the whole test matrix (a querybank is "
                     "encoded and scored once per gallery, like the videos, and not counted); a direction a method "
                     "does not re-score shows –.")
    return lines + [""]


def write_page(bench: BenchmarkDef, out: Path, page: Path, command: str, results: Path | None = None) -> Path:
    """Write the Markdown page (and `<page stem>_r1_cost.png` beside it) from the records in
    `results` (default `out`); runs in `out` without a record are listed as running or not run."""
    results = out if results is None else results
    records = load_records(bench, results)
    page = Path(page)
    plot = page.with_name(page.stem + "_r1_cost.png")
    lines = [f"# Benchmark: {bench.name}", "", bench.description.strip(), "",
             f"Generated by `{command}` from the records of the finished runs (`{results}/<row>/seed_<n>.json`); "
             f"`videotext benchmark run {bench.name}` trains them (it resumes where it stopped and reuses finished "
             "runs). Every figure below comes from a finished run; cells of runs that have not finished say *not run*. "
             "Figures that README.md and the method pages quote from these records cite them, and "
             "`python -m videotext.benchmark.figures` rewrites them from the records.", ""]
    lines += _setup(bench, records)
    for table in bench.tables:
        lines += render_table(bench, records, table.id)
    if plot_cost(bench, records, plot):
        lines += [f"![test t2v R@1 against training CPU-seconds]({plot.name})", ""]
    sharing = {}
    for runs in records.values():
        for r in runs.values():
            sharing[r["data"]["folder"]] = r["data"]["batch_event_sharing"]
    if sharing:
        lines += ["## Event sharing in training batches", "",
                  "% of training videos that share an event (colour, shape, action) with another video of a random "
                  "batch (`videotext.data.synthetic.sharing.batch_event_sharing`, 200 batches):", "",
                  "| data set | " + " | ".join(f"batch {b}" for b in bench.batch_sharing_sizes) + " |",
                  "|---|" + "---|" * len(bench.batch_sharing_sizes)]
        lines += [f"| `{folder}` | " + " | ".join(str(values.get(str(b), "–")) for b in bench.batch_sharing_sizes) + " |"
                  for folder, values in sorted(sharing.items())]
        lines.append("")
    finished = [f"- `{row.name}` seed {seed}: {r['epochs']} epochs, {training_cpu_s(r):.0f} training CPU-s, "
                f"{r['train_s']:.0f} s training wall time, finished {r['finished']}"
                for row, seed in plan(bench) if (r := records.get(row.name, {}).get(seed))]
    status = run_status(bench, out, results)
    lines += ["## Finished runs", ""] + (finished or ["None yet."]) + [""]
    lines += ["## Runs not finished", ""] + (status or ["None: every planned run finished."]) + [""]
    lines += ["## Definition", "", "```yaml", yaml.safe_dump({"rows": [
        {"name": r.name, "config": r.config, "epochs": r.epochs, **({"set": r.set} if r.set else {}),
         **({"data": r.data} if r.data else {}), **({"threads": r.threads} if r.threads is not None else {})}
        for r in bench.rows]}, sort_keys=False, allow_unicode=True).rstrip(),
        "```", ""]
    page.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(page, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines))
    return page

