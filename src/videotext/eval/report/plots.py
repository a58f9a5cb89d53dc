"""The report's figures: matplotlib's object API (`Figure` + Agg canvas), never `pyplot`.

Making a figure is headless and thread-safe and never switches the backend of a user's
interactive session. `new_figure` and `save_figure` are the shared look (grid, no top and
right spines, white background, one DPI) for every figure of a report, also the ones a
method or a comparison adds; PNGs are written atomically and made world-readable.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from videotext.eval.report.log import (
    DIRECTION_LABELS, format_number, is_number, loss_part_keys, ranks_by_direction, selected_val,
    series, smooth, target_count,
)
from videotext.io import atomic_path

DPI = 120
_COLORS = {"t2v": "#1f77b4", "v2t": "#d62728"}
_K_COLORS = {"R1": "#1f77b4", "R5": "#ff7f0e", "R10": "#2ca02c"}


def new_figure(width: float, height: float, ncols: int = 1, sharey: bool = False):
    """A `Figure` of `width` x `height` inches with `ncols` axes in one row, in the report's look;
    returns (figure, [axes])."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    axes = fig.subplots(1, ncols, sharey=sharey, squeeze=False)[0]
    for ax in axes:
        ax.grid(True, color="#e5e5e5", linewidth=0.8)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    return fig, list(axes)


def save_figure(fig: Any, path: Path) -> str:
    """Write `fig` as a PNG at `path` (atomically, readable by all); returns the file name."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, facecolor="white")
    make_readable(path)
    return path.name


def make_readable(path: Path) -> None:
    """Temp files are created 0600; a report is meant to be shared or served: 0644."""
    try:
        os.chmod(path, 0o644)
    except OSError:
        pass


def cycle_colors(n: int) -> list:
    """`n` distinct line colours, repeating after ten."""
    palette = ["#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#1f77b4", "#d62728"]
    return [palette[i % len(palette)] for i in range(n)]


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


def _log_ticks(ax: Any, k_max: float) -> None:
    """Plain-number ticks (1, 5, 10, 50, 100, …) on a log axis: K is read as a number."""
    from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

    ticks = [t for m in (1, 10, 100, 1000, 10_000, 100_000, 1_000_000) for t in (m, 5 * m) if t <= k_max]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())


def plot_train_loss(train: list[dict], path: Path) -> str | None:
    steps, loss = series(train, "loss")
    parts = [k for k in loss_part_keys(train) if len(series(train, k)[0])]
    if not len(steps) and not parts:
        return None
    fig, axes = new_figure(10.0 if parts else 6.4, 3.6, ncols=2 if parts else 1)
    ax = axes[0]
    if len(steps):
        ax.plot(steps, loss, color="#1f77b4", alpha=0.25, linewidth=0.9)
        ax.plot(steps, smooth(loss), color="#1f77b4", linewidth=1.8, label="loss")
        if len(steps) == 1:
            ax.plot(steps, loss, "o", color="#1f77b4")
    _pad_single_x(ax, steps)
    ax.set_title("total loss", fontsize=10)
    _step_axis(ax)
    ax.set_ylabel("loss")
    if parts:
        ax = axes[1]
        colors = cycle_colors(len(parts))
        lows, highs = [], []
        for key, color in zip(parts, colors):
            xs, ys = series(train, key)
            ax.plot(xs, ys, color=color, alpha=0.25, linewidth=0.9)
            ax.plot(xs, smooth(ys), color=color, linewidth=1.6, label=key)
            lows.append(ys.min())
            highs.append(ys.max())
        if min(lows) > 0 and max(highs) / min(lows) > 100:
            ax.set_yscale("log")
        ax.set_title("named parts", fontsize=10)
        _step_axis(ax)
        # Beside the axes: with several parts (often on a log scale) any inside spot hides a curve.
        ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  ncols=1 if len(parts) <= 12 else 2)
    return save_figure(fig, path)


def plot_lr(train: list[dict], path: Path) -> str | None:
    steps, lr = series(train, "lr")
    if not len(steps):
        return None
    fig, (ax,) = new_figure(6.4, 3.6)
    ax.plot(steps, lr, color="#2ca02c", linewidth=1.6, marker="o" if len(steps) == 1 else None)
    _pad_single_x(ax, steps)
    _step_axis(ax)
    ax.set_ylabel("learning rate")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    ax.set_ylim(bottom=0)
    return save_figure(fig, path)


def plot_validation(val: list[dict], best_step: int | None, path: Path) -> tuple[str | None, dict | None]:
    x_key = "epoch" if all(is_number(l.get("epoch")) for l in val) else "step"
    directions = [d for d in ("t2v", "v2t") if any(isinstance(l.get(d), Mapping) for l in val)]
    if not directions:
        return None, None
    selected = selected_val(val, best_step)
    fig, axes = new_figure(10.0 if len(directions) == 2 else 6.4, 3.8, ncols=len(directions), sharey=True)
    top = 0.0
    for ax, direction in zip(axes, directions):
        for key, label in (("R1", "R@1"), ("R5", "R@5"), ("R10", "R@10")):
            xs, ys = [], []
            for line in val:
                metrics = line.get(direction)
                if isinstance(metrics, Mapping) and is_number(metrics.get(key)) and is_number(line.get(x_key)):
                    xs.append(line[x_key])
                    ys.append(metrics[key])
            if xs:
                ax.plot(xs, ys, color=_K_COLORS[key], marker="o", markersize=3.5, linewidth=1.6, label=label)
                top = max(top, max(ys))
        if selected is not None and is_number(selected.get(x_key)):
            where = selected[x_key]
            ax.axvline(where, color="#444444", linestyle="--", linewidth=1.0,
                       label=f"selected ({x_key} {format_number(where)})")
        ax.set_title(DIRECTION_LABELS[direction], fontsize=10)
        _pad_single_x(ax, [l[x_key] for l in val if is_number(l.get(x_key))])
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
    return save_figure(fig, path), selected


def plot_recall_curve(ranks: Mapping[str, Any], path: Path) -> str | None:
    by_direction = ranks_by_direction(ranks)
    if not by_direction:
        return None
    fig, (ax,) = new_figure(6.4, 3.6)
    chances: dict[int, Any] = {}
    overall_max = 2
    for index, (direction, values) in enumerate(by_direction.items()):
        n_targets = target_count(ranks, direction)
        k_max = max(int(math.ceil(values.max())), n_targets or 1, 2)
        overall_max = max(overall_max, k_max)
        ks = np.unique(np.round(np.geomspace(1, k_max, 400)).astype(np.int64))
        ordered = np.sort(values)
        recall = 100.0 * np.searchsorted(ordered, ks, side="right") / len(ordered)
        color = _COLORS.get(direction, cycle_colors(index + 1)[-1])
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
    return save_figure(fig, path)


def plot_rank_histogram(ranks: Mapping[str, Any], path: Path) -> str | None:
    """Log-binned rank distribution; bar height = % of queries per rank value in the bin
    (counts divided by the bin's width), so unequal bins do not make false peaks and the
    first bar equals R@1."""
    by_direction = ranks_by_direction(ranks)
    if not by_direction:
        return None
    top = max(values.max() for values in by_direction.values())
    top = max(top, *(n for d in by_direction if (n := target_count(ranks, d))), 2)
    # Integer edges so that small ranks get one bin each: [1, 2), [2, 3), … then wider.
    edges = np.unique(np.floor(np.geomspace(1, top + 1, 30)))
    if edges[-1] <= top:
        edges = np.append(edges, top + 1)
    widths = np.diff(edges)
    fig, (ax,) = new_figure(6.4, 3.6)
    lowest, highest = 100.0, 0.0
    for index, (direction, values) in enumerate(by_direction.items()):
        color = _COLORS.get(direction, cycle_colors(index + 1)[-1])
        counts, _ = np.histogram(values, bins=edges)
        per_rank = 100.0 * counts / len(values) / widths
        if (per_rank > 0).any():
            lowest = min(lowest, per_rank[per_rank > 0].min())
            highest = max(highest, per_rank.max())
        median = float(np.median(values))
        label = f"{DIRECTION_LABELS.get(direction, direction)} (MdR {format_number(median)})"
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
    return save_figure(fig, path)
