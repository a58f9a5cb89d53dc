"""The report's HTML: the page template, one small CSS block, tables, figures, examples.

All text from the caller is HTML-escaped. No JavaScript, no CDN: the page and its PNGs
form a folder that can be copied or zipped as a whole.
"""
from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from videotext.eval.report.log import DIRECTION_LABELS, format_number, is_number
from videotext.eval.report.thumbnails import save_thumbnail
from videotext.eval.retrieval import TABLE_COLUMNS

#: Columns shown only when some row has them (order twins: synthetic order-dependent captions).
OPTIONAL_COLUMNS: tuple[tuple[str, str], ...] = (("twin_accuracy", "twin acc. (%)"),)
TOP_K_EXAMPLES = 5


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def cell(value: Any, digits: int = 1) -> str:
    """A table cell: numbers with `digits` decimals, mean ± std entries, strings as is."""
    if value is None:
        return "–"
    if isinstance(value, Mapping) and "mean" in value:
        mean = float(value["mean"])
        std = value.get("std")
        if std is None or value.get("n", 2) <= 1 or not math.isfinite(float(std)):
            return f"{mean:.{digits}f}"
        return f"{mean:.{digits}f} ± {float(std):.{digits}f}"
    if is_number(value):
        return f"{float(value):.{digits}f}" if math.isfinite(value) else "–"
    return str(value)


def table_html(metrics: Mapping[str, Any], caption: str) -> str:
    if "R1" in metrics:  # a single direction given without its key
        metrics = {"t2v": metrics}
    ordered = [d for d in DIRECTION_LABELS if d in metrics] + [d for d in metrics if d not in DIRECTION_LABELS]
    columns = TABLE_COLUMNS + tuple(c for c in OPTIONAL_COLUMNS
                                    if any(isinstance(r, Mapping) and c[0] in r for r in metrics.values()))
    head = "".join(f'<th scope="col">{esc(label)}</th>' for _, label in columns)
    rows = []
    counts = []
    for direction in ordered:
        row = metrics[direction]
        if not isinstance(row, Mapping):
            continue
        cells = "".join(f'<td class="num">{esc(cell(row.get(key)))}</td>' for key, _ in columns)
        label = DIRECTION_LABELS.get(direction, direction)
        rows.append(f'<tr><th scope="row">{esc(label)}</th>{cells}</tr>')
        n = row.get("n_queries")
        if is_number(n):
            counts.append(f"{label}: {int(n)} queries")
        elif isinstance(n, Mapping) and is_number(n.get("mean")):
            counts.append(f"{label}: {int(n['mean'])} queries")
    twin = ("; twin acc.: how often an order-dependent caption scores its video above the video with the "
            "same events in another order (chance 50 %)") if len(columns) > len(TABLE_COLUMNS) else ""
    legend = "; ".join(counts) + ". R@K in %, MdR/MnR: median/mean rank" + twin
    foot = f'<p class="small">{esc(legend)}.</p>' if counts else ""
    return (
        f'<table class="metrics"><caption>{esc(caption)}</caption>'
        f'<thead><tr><th></th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>{foot}'
    )


def notes_html(notes: Any) -> str:
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
    return '<ul class="notes">' + "".join(f"<li>{esc(item)}</li>" for item in items) + "</ul>"


def section(heading: str, content: str) -> str:
    anchor = heading.lower().replace(" ", "-")
    return f'<section id="{esc(anchor)}"><h2>{esc(heading)}</h2>{content}</section>'


def grid(figures: list[str]) -> str:
    return '<div class="plots">' + "".join(figures) + "</div>"


def figure_html(name: str, caption: str, wide: bool = False) -> str:
    """A plot with its caption; `wide` (multi-panel) plots take the grid's full width."""
    css = ' class="wide"' if wide else ""
    return (
        f'<figure{css}><img src="{esc(name)}" alt="{esc(caption)}">'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


def selected_html(line: Mapping[str, Any]) -> str:
    bits = []
    if is_number(line.get("epoch")):
        bits.append(f"epoch {format_number(line['epoch'], 2)}")
    if is_number(line.get("step")):
        bits.append(f"step {int(line['step'])}")
    scores = []
    for direction in ("t2v", "v2t"):
        metrics = line.get(direction)
        if isinstance(metrics, Mapping) and is_number(metrics.get("R1")):
            scores.append(f"{DIRECTION_LABELS[direction]} R@1 {float(metrics['R1']):.1f}")
    text = "Selected checkpoint: " + ", ".join(bits)
    if scores:
        text += " — validation " + ", ".join(scores)
    return f"<p>{esc(text)}</p>"


def _time_range(start: Any, end: Any) -> str:
    if is_number(start) and is_number(end):
        return f"{float(start):.1f}–{float(end):.1f} s"
    if is_number(start):
        return f"from {float(start):.1f} s"
    if is_number(end):
        return f"until {float(end):.1f} s"
    return ""


def examples_html(examples: Sequence[Mapping[str, Any]], report_dir: Path) -> str:
    thumbs = report_dir / "thumbs"
    rows = []
    for qi, example in enumerate(examples):
        query = example.get("query", "")
        correct = {str(c) for c in (example.get("correct_ids") or [])}
        results = list(example.get("results") or [])[:TOP_K_EXAMPLES]
        cards = []
        found = False
        for ri, result in enumerate(results):
            rid = str(result.get("id", ""))
            hit = rid in correct
            found = found or hit
            name = save_thumbnail(result.get("thumbnail"), thumbs / f"q{qi:03d}_r{ri + 1}.png")
            image = (
                f'<img src="{esc(name)}" alt="{esc(rid)}">' if name
                else '<div class="noimg">no thumbnail</div>'
            )
            score = result.get("score")
            meta = [f"#{ri + 1}"]
            if is_number(score):
                meta.append(f"score {float(score):.3f}")
            span = _time_range(result.get("start"), result.get("end"))
            badge = '<span class="badge">✓ correct</span>' if hit else ""
            cards.append(
                f'<div class="card {"hit" if hit else "miss"}">{image}'
                f'<div class="rid" title="{esc(rid)}">{esc(rid)}</div>'
                f'<div class="small">{esc(" · ".join(meta))}</div>'
                + (f'<div class="small">{esc(span)}</div>' if span else "")
                + f"{badge}</div>"
            )
        note = ""
        if not found and correct:
            rank = example.get("correct_rank")
            where = f"at rank {format_number(rank)}" if is_number(rank) else "rank not given"
            note = (
                f'<p class="missnote">Correct video not in the top {TOP_K_EXAMPLES} '
                f"({esc(where)}).</p>"
            )
        correct_text = ", ".join(sorted(correct)) or "–"
        rows.append(
            f'<div class="example"><p class="query"><span class="qnum">Q{qi + 1}</span> '
            f"{esc(query)}</p>"
            f'<p class="small">correct: {esc(correct_text)}</p>'
            f'<div class="cards">{"".join(cards)}</div>{note}</div>'
        )
    legend = '<p class="small">Top-5 results per query; the correct video is outlined green.</p>'
    return legend + "".join(rows)


CSS = """
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


PAGE = """<!DOCTYPE html>
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
