"""A benchmark definition: the data set, the extraction settings, the rows, the tables.

One YAML file names everything a table depends on, so two runs of the benchmark compare
the same things: the synthetic set (size, seed, splits, the shared-event share), the
extraction settings (one for all rows), the seeds, and one row per method or variant
(a packaged run config, its epoch budget, overrides). A row may add *evaluations* of its
own checkpoint under another setting (ToCo's cheap scorer alone: `model.rerank_top_k=0`) or
re-scored at inference (`rescore: dsl` / `qbnorm`, `videotext.eval.rescore`), each its own
labelled table line beside the plain row.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from videotext.config import PACKAGED, ConfigError, apply_overrides, from_dict
from videotext.eval.rescore import RESCORERS


@dataclass
class DataDef:
    """The synthetic set of `videotext synth` (and of `videotext demo` at its defaults)."""

    videos: int = 2000
    seed: int = 0
    splits: list[float] = field(default_factory=lambda: [0.64, 0.10, 0.26])
    shared_events: float = 0.0  # share of videos whose events recur in others (`synthesize`)
    extraction: dict[str, Any] = field(default_factory=dict)  # extract_features keywords (rate, options, ...)

    def folder_name(self) -> str:
        """The folder under the data root: the demo's name for the default set."""
        name = f"synthetic-{self.videos}-seed{self.seed}"
        return name + (f"-shared{self.shared_events:g}" if self.shared_events > 0 else "")


@dataclass
class EvalDef:
    """Another test evaluation of a row's selected checkpoint, with model settings changed and/or
    its test similarities re-scored (`rescore`: a name in `videotext.eval.rescore.RESCORERS`)."""

    name: str
    label: str
    set: list[str] = field(default_factory=list)  # model.KEY=VALUE only
    rescore: str = ""  # "dsl" (dual softmax over all test queries) | "qbnorm" (querybank of training captions)
    tables: list[str] | None = None  # the tables showing this line (default: its row's)


@dataclass
class RowDef:
    name: str
    label: str
    config: str  # a packaged run config (`videotext configs`) or a path
    epochs: int
    set: list[str] = field(default_factory=list)  # run-config overrides (--set)
    data: dict[str, Any] = field(default_factory=dict)  # DataDef fields that differ for this row
    evals: list[EvalDef] = field(default_factory=list)
    tables: list[str] = field(default_factory=lambda: ["main"])
    phase: int = 1  # runs go phase by phase, seed by seed inside a phase
    threads: int | None = None  # torch threads for this row's runs where not the benchmark's `threads`


@dataclass
class TableDef:
    id: str
    title: str
    baseline: str  # the row or eval name each other one is paired with, seed by seed
    notes: str = ""
    extra_metrics: list[str] = field(default_factory=list)  # e.g. par2vid.R1 (COOT's protocol)
    baselines: dict[str, str] = field(default_factory=dict)  # line -> its own baseline, where not `baseline`


@dataclass
class TrainingRule:
    """How long every row trains (`videotext.train.stopping`): a row's `epochs` is its cap, and its
    run has *settled* once `patience_epochs` epochs of validation passed without an improvement of
    `metric` by more than `min_delta` points. A run that reached its cap with an improvement in its
    last `patience_epochs` epochs is *still rising at the cap*: the table marks it.

    Early stopping by this rule is armed (`train.early_stop_*`) on rows whose lr schedule does not
    depend on the budget and whose config sets no patience of its own (COOT keeps §4's); a row whose
    lr decays to 0 over its cap (cosine, linear) trains to the cap, as stopping it sooner would end
    it before the decay, and a new run with a larger cap is the cure for one still rising."""

    patience_epochs: int = 5
    min_delta: float = 1.0  # points of `metric`
    metric: str = "t2v.R1"  # the curve every record holds (`val_curve`)


@dataclass
class BenchmarkDef:
    name: str
    description: str
    data: DataDef
    rows: list[RowDef]
    tables: list[TableDef]
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    threads: int = 1  # torch threads per run: CPU-seconds comparable across rows
    set: list[str] = field(default_factory=list)  # run-config overrides for every row, after the row's own
    batch_sharing_sizes: list[int] = field(default_factory=lambda: [32, 64])  # measured event sharing
    training: TrainingRule = field(default_factory=TrainingRule)

    def row(self, name: str) -> RowDef:
        for row in self.rows:
            if row.name == name:
                return row
        raise ConfigError(f"benchmark {self.name!r}: no row {name!r} (have {[r.name for r in self.rows]})")

    def row_threads(self, row: RowDef) -> int:
        """Torch threads of the row's runs: its own, else the benchmark's."""
        return self.threads if row.threads is None else row.threads

    def row_data(self, row: RowDef) -> DataDef:
        merged = {**vars(self.data), **row.data}
        return from_dict(DataDef, merged, f"rows.{row.name}.data")

    def result_names(self) -> list[str]:
        """Every table line: each row, then its evaluations."""
        return [n for row in self.rows for n in [row.name, *(e.name for e in row.evals)]]

    def table_lines(self, table_id: str) -> list[str]:
        """The lines of one table, in definition order: each row listing it, and each evaluation
        listing it (an evaluation without its own `tables` is in its row's)."""
        lines = []
        for row in self.rows:
            if table_id in row.tables:
                lines.append(row.name)
            lines += [e.name for e in row.evals if table_id in (row.tables if e.tables is None else e.tables)]
        return lines


def find_benchmark(name_or_path: str | Path) -> Path:
    """A YAML file, or a packaged benchmark by name (`synthetic` → configs/benchmark_synthetic.yaml)."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    packaged = PACKAGED / f"benchmark_{name_or_path}.yaml"
    if packaged.is_file():
        return packaged
    known = sorted(p.stem.removeprefix("benchmark_") for p in PACKAGED.glob("benchmark_*.yaml"))
    raise ConfigError(f"benchmark {str(name_or_path)!r}: no such file and no packaged benchmark of that name "
                      f"(packaged: {known})")


def load_benchmark(name_or_path: str | Path, overrides: list[str] | None = None) -> BenchmarkDef:
    """Read and check a benchmark definition; `overrides` are `key=value` on its top level
    and data (e.g. `data.videos=32`, `seeds=[0]`)."""
    path = find_benchmark(name_or_path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    raw = apply_overrides(raw or {}, list(overrides or []))
    bench = from_dict(BenchmarkDef, raw, str(path))
    names = bench.result_names()
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"{path}: row/eval names must be unique, repeated: {duplicates}")
    table_ids = {t.id for t in bench.tables}
    for row in bench.rows:
        bench.row_data(row)  # checks the keys
        unknown = sorted(set(row.tables) - table_ids)
        if unknown:
            raise ConfigError(f"{path}: rows.{row.name}.tables names unknown table(s) {unknown} (have {sorted(table_ids)})")
        if bench.row_threads(row) < 1:
            raise ConfigError(f"{path}: rows.{row.name}.threads must be ≥ 1, got {bench.row_threads(row)}")
        if row.epochs < 1:
            raise ConfigError(f"{path}: rows.{row.name}.epochs must be ≥ 1, got {row.epochs}")
        for ev in row.evals:
            bad = [s for s in ev.set if not s.startswith("model.")]
            if bad:
                raise ConfigError(f"{path}: rows.{row.name}.evals.{ev.name}.set may change model.* only, got {bad}")
            if ev.rescore and ev.rescore not in RESCORERS:
                raise ConfigError(f"{path}: rows.{row.name}.evals.{ev.name}.rescore {ev.rescore!r}: unknown "
                                  f"(known: {', '.join(RESCORERS)})")
            unknown = sorted(set(ev.tables or []) - table_ids)
            if unknown:
                raise ConfigError(f"{path}: rows.{row.name}.evals.{ev.name}.tables names unknown table(s) {unknown} "
                                  f"(have {sorted(table_ids)})")
    if bench.training.patience_epochs < 1 or bench.training.min_delta < 0:
        raise ConfigError(f"{path}: training.patience_epochs must be ≥ 1 and training.min_delta ≥ 0, got "
                          f"{bench.training.patience_epochs} and {bench.training.min_delta}")
    for table in bench.tables:
        for line, baseline in [("baseline", table.baseline), *table.baselines.items()]:
            if baseline not in names or (line != "baseline" and line not in names):
                raise ConfigError(f"{path}: tables.{table.id}.baselines: {line!r} → {baseline!r} names no row or eval")
    return bench
