"""One self-contained HTML page per run: `run_dir/report/index.html`.

The page shows what a reader of a paper's results section wants to check at a glance:
the test table in the papers' format (R@1 R@5 R@10 R@50 MdR MnR, text→video and
video→text), the training curves (loss and its named parts, learning rate), the
validation curves with the selected epoch marked, the distribution of ranks (recall@K
against chance, log-binned rank histogram) and qualitative examples (top-5 thumbnails
per query, the correct video outlined).

Decisions:
- Plots are PNG files beside `index.html` and referenced relatively, so the folder can
  be copied or zipped as a whole; no JavaScript, no CDN, one small CSS block.
- Plots use matplotlib's object API (`Figure` + Agg canvas), never `pyplot`, so making
  a report is headless, thread-safe and does not switch the backend of a user's
  interactive session.
- Thumbnails (files or arrays) are copied/saved into `report/thumbs/` (downscaled), so
  the page never points outside its folder. A thumbnail that cannot be read becomes a
  placeholder and a warning; it never stops the report.
- Every file is written atomically (`videotext.io`), `index.html` last, so a reader
  never sees a page that refers to images not yet written.
- All text from the caller is HTML-escaped.
"""
from __future__ import annotations

import datetime as _dt
import html
import math
import numbers
import os
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from videotext.eval.retrieval import TABLE_COLUMNS
from videotext.io import atomic_open, atomic_path, read_json_lines

__all__ = ["write_report"]

#: Columns shown only when some row has them (order twins: synthetic order-dependent captions).
OPTIONAL_COLUMNS: tuple[tuple[str, str], ...] = (("twin_accuracy", "twin acc. (%)"),)
#: Row labels of the two retrieval directions; other direction keys are shown as is.
DIRECTION_LABELS: dict[str, str] = {"t2v": "text → video", "v2t": "video → text"}

#: Numeric keys of a training line that are bookkeeping, not loss parts.
_NON_LOSS_KEYS = {
    "kind", "step", "epoch", "lr", "loss", "time", "elapsed", "wall", "wall_time",
    "grad_norm", "grad_scale", "loss_scale", "batch_size", "samples", "tokens",
    "throughput", "memory", "mem", "max_memory", "gpu_mem", "temperature", "logit_scale",
    "scale", "seed", "rank", "world_size",
}
_NON_LOSS_SUFFIXES = ("_time", "_per_s", "_per_sec", "_s", "_mb", "_gb", "_norm", "_lr")

_TOP_K_EXAMPLES = 5
_THUMB_MAX_SIDE = 320
_DPI = 120
_COLORS = {"t2v": "#1f77b4", "v2t": "#d62728"}
_K_COLORS = {"R1": "#1f77b4", "R5": "#ff7f0e", "R10": "#2ca02c"}


# --------------------------------------------------------------------------- public API
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
    lines = _load_log(metrics_log)
    train = _dedupe_by_step([l for l in lines if l.get("kind") == "train"])
    val = _dedupe_by_step([l for l in lines if l.get("kind") == "val"])
    test_lines = [l for l in lines if l.get("kind") == "test"]
    if test_metrics is None and test_lines:
        test_metrics = {k: v for k, v in test_lines[-1].items() if isinstance(v, Mapping)}
    if best_step is None:
        for line in test_lines:
            for key in ("best_step", "selected_step"):
                if isinstance(line.get(key), numbers.Real):
                    best_step = int(line[key])

    body: list[str] = [f"<h1>{_esc(title)}</h1>"]
    body.append(_notes_html(notes))

    # Results tables first: they are what the reader came for.
    table_parts = []
    if test_metrics:
        table_parts.append(_table_html(test_metrics, "Test set"))
    for caption, metrics in (tables or {}).items():
        table_parts.append(_table_html(metrics, str(caption)))
    if table_parts:
        body.append(_section("Results", "".join(table_parts)))

    figures: list[str] = []
    if train:
        name = _plot_train_loss(train, report_dir / "train_loss.png")
        if name:
            wide = bool(_loss_part_keys(train))
            caption = "Training loss (faint: raw, solid: smoothed)" + _non_finite_note(train)
            figures.append(_figure_html(name, caption, wide))
        name = _plot_lr(train, report_dir / "learning_rate.png")
        if name:
            figures.append(_figure_html(name, "Learning rate"))
    if figures:
        body.append(_section("Training", _grid(figures)))

    if val:
        name, selected = _plot_validation(val, best_step, report_dir / "validation.png")
        if name:
            caption = "Validation recall (%) of the checkpoints evaluated during training"
            text = ""
            if selected is not None:
                text = _selected_html(selected)
            wide = sum(any(isinstance(l.get(d), Mapping) for l in val) for d in ("t2v", "v2t")) > 1
            body.append(_section("Validation", text + _grid([_figure_html(name, caption, wide)])))

    if ranks:
        figures = []
        name = _plot_recall_curve(ranks, report_dir / "recall_at_k.png")
        if name:
            figures.append(_figure_html(name, "Recall@K (dotted: chance)"))
        name = _plot_rank_histogram(ranks, report_dir / "rank_histogram.png")
        if name:
            figures.append(_figure_html(name, "Rank distribution (log bins, % of queries per rank; dashed: median rank)"))
        if figures:
            body.append(_section("Ranks", _grid(figures)))

    if examples:
        body.append(_section("Examples", _examples_html(examples, report_dir)))

    extra = [_figure_html(name, caption) for name, caption in (method_figures or []) if (report_dir / name).exists()]
    if extra:
        body.append(_section("Method", _grid(extra)))

    from videotext import __version__

    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    body.append(f'<footer>videotext {_esc(__version__)} · {_esc(stamp)}</footer>')
    page = _PAGE.format(title=_esc(title), css=_CSS, body="\n".join(p for p in body if p))
    out = report_dir / "index.html"
    with atomic_open(out, "w", encoding="utf-8") as handle:
        handle.write(page)
    _readable(out)
    _remove_stale_thumbnails(report_dir / "thumbs", page)
    return out


def _remove_stale_thumbnails(thumbs: Path, page: str) -> None:
    """Drop thumbnails of an earlier report in the same folder that this page does not use."""
    if not thumbs.is_dir():
        return
    for file in thumbs.glob("q*_r*.png"):
        if f'src="thumbs/{file.name}"' not in page:
            file.unlink(missing_ok=True)


# --------------------------------------------------------------------------- log input
def _load_log(metrics_log: Any) -> list[dict]:
    """Lines as dicts; a path is read as JSON lines (a torn last line is ignored)."""
    if metrics_log is None:
        return []
    if isinstance(metrics_log, (str, os.PathLike)):
        return read_json_lines(metrics_log)
    out = []
    for index, line in enumerate(metrics_log):
        if not isinstance(line, Mapping):
            raise TypeError(f"metrics_log[{index}]: expected a dict, got {type(line).__name__}")
        out.append(dict(line))
    return out


def _dedupe_by_step(lines: list[dict]) -> list[dict]:
    """Sorted by step; a step logged twice (a resumed run) keeps its last line."""
    by_step: dict[Any, dict] = {}
    no_step = []
    for line in lines:
        step = line.get("step")
        if isinstance(step, numbers.Real):
            by_step[step] = line
        else:
            no_step.append(line)
    return [by_step[s] for s in sorted(by_step)] + no_step


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _loss_part_keys(train: list[dict]) -> list[str]:
    keys: dict[str, None] = {}
    for line in train:
        for key, value in line.items():
            if not _is_number(value) or key in _NON_LOSS_KEYS:
                continue
            if key.endswith(_NON_LOSS_SUFFIXES) and "loss" not in key:
                continue
            keys[key] = None
    return list(keys)


def _series(lines: list[dict], key: str, x_key: str = "step") -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for line in lines:
        x, y = line.get(x_key), line.get(key)
        if _is_number(x) and _is_number(y) and math.isfinite(y):
            xs.append(float(x))
            ys.append(float(y))
    return np.asarray(xs), np.asarray(ys)


def _non_finite_note(train: list[dict]) -> str:
    """A diverged run logs NaN/inf losses, which plots silently drop: say so."""
    bad = [l for l in train if _is_number(l.get("loss")) and not math.isfinite(l["loss"])]
    if not bad:
        return ""
    first = bad[0].get("step")
    where = f", first at step {first}" if _is_number(first) else ""
    return f". {len(bad)} non-finite loss value(s) (NaN/inf) not drawn{where}"


def _smooth(values: np.ndarray) -> np.ndarray:
    """Debiased exponential moving average (TensorBoard's), window ≈ n/25 points."""
    n = len(values)
    if n < 5:
        return values.copy()
    window = max(2.0, n / 25.0)
    weight = 1.0 - 1.0 / window
    out = np.empty(n)
    acc, norm = 0.0, 0.0
    for i, v in enumerate(values):
        acc = weight * acc + (1.0 - weight) * v
        norm = weight * norm + (1.0 - weight)
        out[i] = acc / norm
    return out


# --------------------------------------------------------------------------- plotting
def _new_figure(width: float, height: float, ncols: int = 1, sharey: bool = False):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=_DPI, layout="constrained")
    axes = fig.subplots(1, ncols, sharey=sharey, squeeze=False)[0]
    for ax in axes:
        ax.grid(True, color="#e5e5e5", linewidth=0.8)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    return fig, list(axes)


def _step_axis(ax: Any, label: str = "step") -> None:
    """Few, short tick labels on a step axis (2.5k, 10k, 1.2M) so they never collide."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    def short(value: float, _pos: Any) -> str:
        for scale, suffix in ((1e6, "M"), (1e3, "k")):
            if abs(value) >= scale:
                return f"{value / scale:g}{suffix}"
        return f"{value:g}"

    ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))
    ax.xaxis.set_major_formatter(FuncFormatter(short))
    ax.set_xlabel(label)


def _pad_single_x(ax: Any, xs: Iterable[float]) -> None:
    """One x value (a single logged step or epoch): centre it in a range of ±1."""
    distinct = {float(x) for x in xs}
    if len(distinct) == 1:
        (x,) = distinct
        ax.set_xlim(x - 1, x + 1)


def _readable(path: Path) -> None:
    """Temp files are created 0600; a report is meant to be shared or served: 0644."""
    try:
        os.chmod(path, 0o644)
    except OSError:
        pass


def _save(fig: Any, path: Path) -> str:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=_DPI, facecolor="white")
    _readable(path)
    return path.name


def _plot_train_loss(train: list[dict], path: Path) -> str | None:
    steps, loss = _series(train, "loss")
    parts = [k for k in _loss_part_keys(train) if len(_series(train, k)[0])]
    if not len(steps) and not parts:
        return None
    fig, axes = _new_figure(10.0 if parts else 6.4, 3.6, ncols=2 if parts else 1)
    ax = axes[0]
    if len(steps):
        ax.plot(steps, loss, color="#1f77b4", alpha=0.25, linewidth=0.9)
        ax.plot(steps, _smooth(loss), color="#1f77b4", linewidth=1.8, label="loss")
        if len(steps) == 1:
            ax.plot(steps, loss, "o", color="#1f77b4")
    _pad_single_x(ax, steps)
    ax.set_title("total loss", fontsize=10)
    _step_axis(ax)
    ax.set_ylabel("loss")
    if parts:
        ax = axes[1]
        colors = _cycle_colors(len(parts))
        lows, highs = [], []
        for key, color in zip(parts, colors):
            xs, ys = _series(train, key)
            ax.plot(xs, ys, color=color, alpha=0.25, linewidth=0.9)
            ax.plot(xs, _smooth(ys), color=color, linewidth=1.6, label=key)
            lows.append(ys.min())
            highs.append(ys.max())
        if min(lows) > 0 and max(highs) / min(lows) > 100:
            ax.set_yscale("log")
        ax.set_title("named parts", fontsize=10)
        _step_axis(ax)
        # Beside the axes: with several parts (often on a log scale) any inside spot hides a curve.
        ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  ncols=1 if len(parts) <= 12 else 2)
    return _save(fig, path)


def _cycle_colors(n: int) -> list:
    palette = ["#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#1f77b4", "#d62728"]
    return [palette[i % len(palette)] for i in range(n)]


def _plot_lr(train: list[dict], path: Path) -> str | None:
    steps, lr = _series(train, "lr")
    if not len(steps):
        return None
    fig, (ax,) = _new_figure(6.4, 3.6)
    ax.plot(steps, lr, color="#2ca02c", linewidth=1.6, marker="o" if len(steps) == 1 else None)
    _pad_single_x(ax, steps)
    _step_axis(ax)
    ax.set_ylabel("learning rate")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    ax.set_ylim(bottom=0)
    return _save(fig, path)


def _selected_val(val: list[dict], best_step: int | None) -> dict | None:
    if best_step is not None:
        stepped = [l for l in val if _is_number(l.get("step"))]
        if stepped:
            return min(stepped, key=lambda l: abs(l["step"] - best_step))
    marked = [l for l in val if l.get("selected") is True]
    return marked[-1] if marked else None


def _plot_validation(val: list[dict], best_step: int | None, path: Path) -> tuple[str | None, dict | None]:
    x_key = "epoch" if all(_is_number(l.get("epoch")) for l in val) else "step"
    directions = [d for d in ("t2v", "v2t") if any(isinstance(l.get(d), Mapping) for l in val)]
    if not directions:
        return None, None
    selected = _selected_val(val, best_step)
    fig, axes = _new_figure(10.0 if len(directions) == 2 else 6.4, 3.8, ncols=len(directions), sharey=True)
    top = 0.0
    for ax, direction in zip(axes, directions):
        for key, label in (("R1", "R@1"), ("R5", "R@5"), ("R10", "R@10")):
            xs, ys = [], []
            for line in val:
                metrics = line.get(direction)
                if isinstance(metrics, Mapping) and _is_number(metrics.get(key)) and _is_number(line.get(x_key)):
                    xs.append(line[x_key])
                    ys.append(metrics[key])
            if xs:
                ax.plot(xs, ys, color=_K_COLORS[key], marker="o", markersize=3.5, linewidth=1.6, label=label)
                top = max(top, max(ys))
        if selected is not None and _is_number(selected.get(x_key)):
            where = selected[x_key]
            ax.axvline(where, color="#444444", linestyle="--", linewidth=1.0,
                       label=f"selected ({x_key} {_num(where)})")
        ax.set_title(DIRECTION_LABELS[direction], fontsize=10)
        _pad_single_x(ax, [l[x_key] for l in val if _is_number(l.get(x_key))])
        if x_key == "step":
            _step_axis(ax)
        else:
            ax.set_xlabel(x_key)
        if x_key == "epoch" and all(float(l[x_key]).is_integer() for l in val):
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].set_ylabel("recall (%)")
    axes[0].set_ylim(0, min(100.0, top * 1.08) if top > 0 else 1.0)
    # One legend for both panels, above them, so it never covers a curve.
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncols=len(labels), fontsize=8, frameon=False)
    return _save(fig, path), selected


def _ranks_by_direction(ranks: Mapping[str, Any]) -> dict[str, np.ndarray]:
    out = {}
    for key, value in ranks.items():
        if key == "n_targets" or value is None:
            continue
        array = np.asarray(value, dtype=np.float64).reshape(-1)
        array = array[np.isfinite(array)]
        if array.size:
            if array.min() < 1:
                raise ValueError(f"ranks[{key!r}]: ranks start at 1 (1 = correct first), got {array.min()}")
            out[str(key)] = array
    return out


def _n_targets(ranks: Mapping[str, Any], direction: str) -> int | None:
    n = ranks.get("n_targets")
    if isinstance(n, Mapping):
        n = n.get(direction)
    return int(n) if _is_number(n) and n > 0 else None


def _log_ticks(ax: Any, k_max: float) -> None:
    """Plain-number ticks (1, 5, 10, 50, 100, …) on a log axis: K is read as a number."""
    from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

    ticks = [t for m in (1, 10, 100, 1000, 10_000, 100_000, 1_000_000) for t in (m, 5 * m) if t <= k_max]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())


def _plot_recall_curve(ranks: Mapping[str, Any], path: Path) -> str | None:
    by_direction = _ranks_by_direction(ranks)
    if not by_direction:
        return None
    fig, (ax,) = _new_figure(6.4, 3.6)
    chances: dict[int, Any] = {}
    overall_max = 2
    for index, (direction, values) in enumerate(by_direction.items()):
        n_targets = _n_targets(ranks, direction)
        k_max = max(int(math.ceil(values.max())), n_targets or 1, 2)
        overall_max = max(overall_max, k_max)
        ks = np.unique(np.round(np.geomspace(1, k_max, 400)).astype(np.int64))
        ordered = np.sort(values)
        recall = 100.0 * np.searchsorted(ordered, ks, side="right") / len(ordered)
        color = _COLORS.get(direction, _cycle_colors(index + 1)[-1])
        label = f"{DIRECTION_LABELS.get(direction, direction)} (n={len(values)})"
        ax.plot(ks, recall, color=color, linewidth=1.8, drawstyle="steps-post", label=label)
        if n_targets:
            chances.setdefault(n_targets, (ks, color))
    for n_targets, (ks, color) in chances.items():
        chance = 100.0 * np.minimum(ks / n_targets, 1.0)
        ax.plot(ks, chance, color="#888888" if len(chances) == 1 else color,
                linestyle=":", linewidth=1.3, label=f"chance (K / {n_targets})")
    ax.set_xscale("log")
    ax.set_xlim(1, overall_max)
    _log_ticks(ax, overall_max)
    ax.set_ylim(0, 101)
    ax.set_xlabel("K (log scale)")
    ax.set_ylabel("recall@K (%)")
    ax.legend(fontsize=8, frameon=False, loc="lower right")
    return _save(fig, path)


def _plot_rank_histogram(ranks: Mapping[str, Any], path: Path) -> str | None:
    """Log-binned rank distribution; bar height = % of queries per rank value in the bin
    (counts divided by the bin's width), so unequal bins do not make false peaks and the
    first bar equals R@1."""
    by_direction = _ranks_by_direction(ranks)
    if not by_direction:
        return None
    top = max(values.max() for values in by_direction.values())
    top = max(top, *(n for d in by_direction if (n := _n_targets(ranks, d))), 2)
    # Integer edges so that small ranks get one bin each: [1, 2), [2, 3), … then wider.
    edges = np.unique(np.floor(np.geomspace(1, top + 1, 30)))
    if edges[-1] <= top:
        edges = np.append(edges, top + 1)
    widths = np.diff(edges)
    fig, (ax,) = _new_figure(6.4, 3.6)
    lowest, highest = 100.0, 0.0
    for index, (direction, values) in enumerate(by_direction.items()):
        color = _COLORS.get(direction, _cycle_colors(index + 1)[-1])
        counts, _ = np.histogram(values, bins=edges)
        per_rank = 100.0 * counts / len(values) / widths
        if (per_rank > 0).any():
            lowest = min(lowest, per_rank[per_rank > 0].min())
            highest = max(highest, per_rank.max())
        median = float(np.median(values))
        label = f"{DIRECTION_LABELS.get(direction, direction)} (MdR {_num(median)})"
        ax.stairs(per_rank, edges, fill=True, alpha=0.18, color=color)
        ax.stairs(per_rank, edges, linewidth=1.5, color=color, label=label)
        ax.axvline(median, color=color, linestyle="--", linewidth=1.0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(1, edges[-1])
    ax.set_ylim(lowest / 2, max(highest, lowest) * 2.5)
    _log_ticks(ax, edges[-1])
    ax.set_xlabel("rank of the correct item (log scale)")
    ax.set_ylabel("% of queries per rank")
    ax.legend(fontsize=8, frameon=False, loc="upper right")
    return _save(fig, path)


# --------------------------------------------------------------------------- HTML pieces
def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(value: Any, digits: int = 1) -> str:
    value = float(value)
    return str(int(value)) if value.is_integer() and abs(value) < 1e9 else f"{value:.{digits}f}"


def _cell(value: Any, digits: int = 1) -> str:
    """A table cell: numbers with `digits` decimals, mean ± std entries, strings as is."""
    if value is None:
        return "–"
    if isinstance(value, Mapping) and "mean" in value:
        mean = float(value["mean"])
        std = value.get("std")
        if std is None or value.get("n", 2) <= 1 or not math.isfinite(float(std)):
            return f"{mean:.{digits}f}"
        return f"{mean:.{digits}f} ± {float(std):.{digits}f}"
    if _is_number(value):
        return f"{float(value):.{digits}f}" if math.isfinite(value) else "–"
    return str(value)


def _table_html(metrics: Mapping[str, Any], caption: str) -> str:
    if "R1" in metrics:  # a single direction given without its key
        metrics = {"t2v": metrics}
    ordered = [d for d in DIRECTION_LABELS if d in metrics] + [d for d in metrics if d not in DIRECTION_LABELS]
    columns = TABLE_COLUMNS + tuple(c for c in OPTIONAL_COLUMNS
                                    if any(isinstance(r, Mapping) and c[0] in r for r in metrics.values()))
    head = "".join(f'<th scope="col">{_esc(label)}</th>' for _, label in columns)
    rows = []
    counts = []
    for direction in ordered:
        row = metrics[direction]
        if not isinstance(row, Mapping):
            continue
        cells = "".join(f'<td class="num">{_esc(_cell(row.get(key)))}</td>' for key, _ in columns)
        label = DIRECTION_LABELS.get(direction, direction)
        rows.append(f'<tr><th scope="row">{_esc(label)}</th>{cells}</tr>')
        n = row.get("n_queries")
        if _is_number(n):
            counts.append(f"{label}: {int(n)} queries")
        elif isinstance(n, Mapping) and _is_number(n.get("mean")):
            counts.append(f"{label}: {int(n['mean'])} queries")
    twin = ("; twin acc.: how often an order-dependent caption scores its video above the video with the "
            "same events in another order (chance 50 %)") if len(columns) > len(TABLE_COLUMNS) else ""
    legend = "; ".join(counts) + ". R@K in %, MdR/MnR: median/mean rank" + twin
    foot = f'<p class="small">{_esc(legend)}.</p>' if counts else ""
    return (
        f'<table class="metrics"><caption>{_esc(caption)}</caption>'
        f'<thead><tr><th></th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>{foot}'
    )


def _notes_html(notes: Any) -> str:
    if notes is None:
        return ""
    if isinstance(notes, str):
        items = [line for line in notes.splitlines() if line.strip()] or [notes]
    elif isinstance(notes, Mapping):
        items = [f"{key}: {value}" for key, value in notes.items()]
    else:
        items = [str(line) for line in notes]
    if not items:
        return ""
    return '<ul class="notes">' + "".join(f"<li>{_esc(item)}</li>" for item in items) + "</ul>"


def _section(heading: str, content: str) -> str:
    anchor = heading.lower().replace(" ", "-")
    return f'<section id="{_esc(anchor)}"><h2>{_esc(heading)}</h2>{content}</section>'


def _grid(figures: list[str]) -> str:
    return '<div class="plots">' + "".join(figures) + "</div>"


def _figure_html(name: str, caption: str, wide: bool = False) -> str:
    """A plot with its caption; `wide` (multi-panel) plots take the grid's full width."""
    css = ' class="wide"' if wide else ""
    return (
        f'<figure{css}><img src="{_esc(name)}" alt="{_esc(caption)}">'
        f"<figcaption>{_esc(caption)}</figcaption></figure>"
    )


def _selected_html(line: Mapping[str, Any]) -> str:
    bits = []
    if _is_number(line.get("epoch")):
        bits.append(f"epoch {_num(line['epoch'], 2)}")
    if _is_number(line.get("step")):
        bits.append(f"step {int(line['step'])}")
    scores = []
    for direction in ("t2v", "v2t"):
        metrics = line.get(direction)
        if isinstance(metrics, Mapping) and _is_number(metrics.get("R1")):
            scores.append(f"{DIRECTION_LABELS[direction]} R@1 {float(metrics['R1']):.1f}")
    text = "Selected checkpoint: " + ", ".join(bits)
    if scores:
        text += " — validation " + ", ".join(scores)
    return f"<p>{_esc(text)}</p>"


def _time_range(start: Any, end: Any) -> str:
    if _is_number(start) and _is_number(end):
        return f"{float(start):.1f}–{float(end):.1f} s"
    if _is_number(start):
        return f"from {float(start):.1f} s"
    if _is_number(end):
        return f"until {float(end):.1f} s"
    return ""


def _save_thumbnail(thumbnail: Any, path: Path) -> str | None:
    """Copy or save one thumbnail as a downscaled PNG; the name relative to report/."""
    from PIL import Image

    if thumbnail is None:
        return None
    try:
        if isinstance(thumbnail, (str, os.PathLike)):
            with Image.open(thumbnail) as opened:
                image = opened.convert("RGB")
        else:
            image = Image.fromarray(_as_uint8_image(np.asarray(thumbnail)))
        image.thumbnail((_THUMB_MAX_SIDE, _THUMB_MAX_SIDE))
        with atomic_path(path) as tmp:
            image.save(tmp, format="PNG")
        _readable(path)
    except (OSError, ValueError, TypeError) as error:
        where = thumbnail if isinstance(thumbnail, (str, os.PathLike)) else "array"
        warnings.warn(f"report thumbnail {where}: {error}; shown as a placeholder", stacklevel=4)
        return None
    return f"{path.parent.name}/{path.name}"


def _as_uint8_image(array: np.ndarray) -> np.ndarray:
    if array.ndim == 3 and array.shape[0] in (1, 3) and array.shape[-1] not in (1, 3, 4):
        array = array.transpose(1, 2, 0)  # [C, H, W] -> [H, W, C]
    if array.ndim == 3 and array.shape[-1] == 1:
        array = array[..., 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[-1] not in (3, 4)):
        raise ValueError(f"expected an image array [H, W, 3], got shape {tuple(array.shape)}")
    if array.dtype != np.uint8:
        array = array.astype(np.float64)
        if array.size and np.nanmax(array) <= 1.0:
            array = array * 255.0
        array = np.clip(np.nan_to_num(array), 0, 255).round().astype(np.uint8)
    return np.ascontiguousarray(array)


def _examples_html(examples: Sequence[Mapping[str, Any]], report_dir: Path) -> str:
    thumbs = report_dir / "thumbs"
    rows = []
    for qi, example in enumerate(examples):
        query = example.get("query", "")
        correct = {str(c) for c in (example.get("correct_ids") or [])}
        results = list(example.get("results") or [])[:_TOP_K_EXAMPLES]
        cards = []
        found = False
        for ri, result in enumerate(results):
            rid = str(result.get("id", ""))
            hit = rid in correct
            found = found or hit
            name = _save_thumbnail(result.get("thumbnail"), thumbs / f"q{qi:03d}_r{ri + 1}.png")
            image = (
                f'<img src="{_esc(name)}" alt="{_esc(rid)}">' if name
                else '<div class="noimg">no thumbnail</div>'
            )
            score = result.get("score")
            meta = [f"#{ri + 1}"]
            if _is_number(score):
                meta.append(f"score {float(score):.3f}")
            span = _time_range(result.get("start"), result.get("end"))
            badge = '<span class="badge">✓ correct</span>' if hit else ""
            cards.append(
                f'<div class="card {"hit" if hit else "miss"}">{image}'
                f'<div class="rid" title="{_esc(rid)}">{_esc(rid)}</div>'
                f'<div class="small">{_esc(" · ".join(meta))}</div>'
                + (f'<div class="small">{_esc(span)}</div>' if span else "")
                + f"{badge}</div>"
            )
        note = ""
        if not found and correct:
            rank = example.get("correct_rank")
            where = f"at rank {_num(rank)}" if _is_number(rank) else "rank not given"
            note = (
                f'<p class="missnote">Correct video not in the top {_TOP_K_EXAMPLES} '
                f"({_esc(where)}).</p>"
            )
        correct_text = ", ".join(sorted(correct)) or "–"
        rows.append(
            f'<div class="example"><p class="query"><span class="qnum">Q{qi + 1}</span> '
            f"{_esc(query)}</p>"
            f'<p class="small">correct: {_esc(correct_text)}</p>'
            f'<div class="cards">{"".join(cards)}</div>{note}</div>'
        )
    legend = '<p class="small">Top-5 results per query; the correct video is outlined green.</p>'
    return legend + "".join(rows)


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#222;
max-width:1120px;margin:2rem auto;padding:0 1rem;line-height:1.45}
h1{font-size:1.6rem;margin-bottom:.5rem}
h2{font-size:1.2rem;border-bottom:1px solid #ddd;padding-bottom:.25rem;margin-top:2rem}
ul.notes{background:#f6f8fa;border:1px solid #e1e4e8;border-radius:6px;padding:.6rem 1.6rem}
table.metrics{border-collapse:collapse;margin:.8rem 0 .3rem}
table.metrics caption{text-align:left;font-weight:600;padding-bottom:.3rem}
table.metrics th,table.metrics td{padding:.3rem .8rem;border-bottom:1px solid #e5e5e5}
table.metrics thead th{border-bottom:2px solid #999;text-align:right}
table.metrics tbody th{text-align:left;font-weight:500;white-space:nowrap}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.small{font-size:.85rem;color:#666;margin:.15rem 0}
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(440px,1fr));gap:1rem}
figure{margin:0}
figure.wide{grid-column:1/-1}
figure img{width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.85rem;color:#666;text-align:center}
.example{margin:1rem 0 1.4rem}
.query{font-weight:600;margin:.2rem 0}
.qnum{display:inline-block;background:#444;color:#fff;border-radius:4px;padding:0 .35rem;
font-size:.8rem;margin-right:.3rem}
.cards{display:flex;gap:.6rem;flex-wrap:wrap}
.card{width:172px;border:3px solid #bbbbbb;border-radius:6px;padding:4px;background:#fff}
.card.hit{border-color:#2e9d3a;background:#f1faf2}
.card img,.noimg{width:100%;aspect-ratio:16/9;object-fit:contain;background:#111;display:block}
.noimg{color:#aaa;font-size:.8rem;display:flex;align-items:center;justify-content:center}
.rid{font-family:ui-monospace,monospace;font-size:.8rem;overflow:hidden;text-overflow:ellipsis;
white-space:nowrap;margin-top:.2rem}
.badge{color:#2e9d3a;font-size:.8rem;font-weight:600}
.missnote{color:#b35900;font-size:.9rem;margin:.3rem 0}
footer{margin-top:3rem;font-size:.8rem;color:#999}
""".strip()

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
{css}
</style>
</head>
<body>
{body}
</body>
</html>
"""
