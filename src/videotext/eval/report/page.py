"""`write_report`: assemble `run_dir/report/index.html` from the log, plots, tables and examples."""
from __future__ import annotations

import datetime as _dt
import numbers
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from videotext import __version__
from videotext.eval.report.html import (
    CSS, PAGE, esc, examples_html, figure_html, grid, notes_html, section, selected_html, table_html,
)
from videotext.eval.report.log import dedupe_by_step, load_log, loss_part_keys, non_finite_note
from videotext.eval.report.plots import (
    make_readable, plot_lr, plot_rank_histogram, plot_recall_curve, plot_train_loss, plot_validation,
)
from videotext.eval.report.thumbnails import remove_stale_thumbnails
from videotext.io import atomic_open

__all__ = ["write_report"]


def write_report(
    run_dir: str | os.PathLike,
    *,
    title: str,
    metrics_log: Sequence[Mapping[str, Any]] | str | os.PathLike | None,
    test_metrics: Mapping[str, Any] | None,
    ranks: Mapping[str, Any] | None = None,
    examples: Sequence[Mapping[str, Any]] | None = None,
    tables: Mapping[str, Mapping[str, Any]] | None = None,
    notes: str | Iterable[str] | Mapping[str, Any] | None = None,
    best_step: int | None = None,
    method_figures: Sequence[tuple[str, str]] | None = None,
) -> Path:
    """Write `run_dir/report/index.html` (plus its PNGs) and return the page's path.

    metrics_log: the run's `metrics.jsonl` lines (or the path of that file): ``kind``
        "train" (step, epoch, loss, lr, named loss parts), "val" (step, epoch, t2v, v2t
        metric dicts, optionally ``"selected": true``) and at most one "test".
    test_metrics: ``{"t2v": metrics, "v2t": metrics}`` as returned by
        `retrieval_metrics_both`; if None, the "test" line of `metrics_log` is used.
    ranks: ``{"t2v": per-query ranks, "v2t": ..., "n_targets": int | {"t2v": n, ...}}``
        (1 = correct first) for the recall@K curve and the rank histogram.
    examples: ``[{"query", "correct_ids", "results": [{"id", "score", "thumbnail",
        "start", "end"}], "correct_rank"?}]``; thumbnails are image paths or uint8
        ``[H, W, 3]`` arrays.
    tables: more tables, ``{caption: {"t2v": ..., "v2t": ...}}``; cells may be numbers,
        strings (``"41.2 ± 0.8"``) or ``{"mean", "std"}`` entries (`aggregate_seeds`).
    notes: a line, a list of lines or a ``{label: value}`` mapping shown at the top.
    best_step: the step of the selected checkpoint, if the log does not mark it.
    method_figures: more figures, ``[(png file name inside run_dir/report, caption)]`` (a
        method's own plots, e.g. the support-set attention map).
    """
    report_dir = Path(run_dir) / "report"
    report_dir.mkdir(parents=True, exist_ok=True)
    lines = load_log(metrics_log)
    train = dedupe_by_step([l for l in lines if l.get("kind") == "train"])
    val = dedupe_by_step([l for l in lines if l.get("kind") == "val"])
    test_lines = [l for l in lines if l.get("kind") == "test"]
    if test_metrics is None and test_lines:
        test_metrics = {k: v for k, v in test_lines[-1].items() if isinstance(v, Mapping)}
    if best_step is None:
        for line in test_lines:
            for key in ("best_step", "selected_step"):
                if isinstance(line.get(key), numbers.Real):
                    best_step = int(line[key])

    body: list[str] = [f"<h1>{esc(title)}</h1>"]
    body.append(notes_html(notes))

    # Results tables first: they are what the reader came for.
    table_parts = []
    if test_metrics:
        table_parts.append(table_html(test_metrics, "Test set"))
    for caption, metrics in (tables or {}).items():
        table_parts.append(table_html(metrics, str(caption)))
    if table_parts:
        body.append(section("Results", "".join(table_parts)))

    figures: list[str] = []
    if train:
        name = plot_train_loss(train, report_dir / "train_loss.png")
        if name:
            wide = bool(loss_part_keys(train))
            caption = "Training loss (faint: raw, solid: smoothed)" + non_finite_note(train)
            figures.append(figure_html(name, caption, wide))
        name = plot_lr(train, report_dir / "learning_rate.png")
        if name:
            figures.append(figure_html(name, "Learning rate"))
    if figures:
        body.append(section("Training", grid(figures)))

    if val:
        name, selected = plot_validation(val, best_step, report_dir / "validation.png")
        if name:
            caption = "Validation recall (%) of the checkpoints evaluated during training"
            text = ""
            if selected is not None:
                text = selected_html(selected)
            wide = sum(any(isinstance(l.get(d), Mapping) for l in val) for d in ("t2v", "v2t")) > 1
            body.append(section("Validation", text + grid([figure_html(name, caption, wide)])))

    if ranks:
        figures = []
        name = plot_recall_curve(ranks, report_dir / "recall_at_k.png")
        if name:
            figures.append(figure_html(name, "Recall@K (dotted: chance)"))
        name = plot_rank_histogram(ranks, report_dir / "rank_histogram.png")
        if name:
            figures.append(figure_html(name, "Rank distribution (log bins, % of queries per rank; dashed: median rank)"))
        if figures:
            body.append(section("Ranks", grid(figures)))

    if examples:
        body.append(section("Examples", examples_html(examples, report_dir)))

    extra = [figure_html(name, caption) for name, caption in (method_figures or []) if (report_dir / name).exists()]
    if extra:
        body.append(section("Method", grid(extra)))

    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    body.append(f'<footer>videotext {esc(__version__)} · {esc(stamp)}</footer>')
    page = PAGE.format(title=esc(title), css=CSS, body="\n".join(p for p in body if p))
    out = report_dir / "index.html"
    with atomic_open(out, "w", encoding="utf-8") as handle:
        handle.write(page)
    make_readable(out)
    remove_stale_thumbnails(report_dir / "thumbs", page)
    return out
