"""The HTML run report: tables, plots, examples, escaping, atomic writes."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
from PIL import Image

from videotext.eval.report import write_report


def _metrics(r1: float, r5: float, r10: float, r50: float, mdr: float, mnr: float, n: int = 100) -> dict:
    gm = (r1 * r5 * r10) ** (1 / 3)
    return {"R1": r1, "R5": r5, "R10": r10, "R50": r50, "MdR": mdr, "MnR": mnr,
            "geometric_mean": gm, "n_queries": n}


def _metrics_log() -> list[dict]:
    rng = np.random.default_rng(0)
    lines = []
    for step in range(0, 400, 10):
        loss = 4.0 * np.exp(-step / 150) + 0.3 + 0.2 * rng.standard_normal()
        lines.append({
            "kind": "train", "step": step, "epoch": step / 100, "loss": float(loss),
            "lr": 1e-4 * min(1.0, (step + 10) / 50) * 0.5 * (1 + np.cos(np.pi * step / 400)),
            "nce": float(loss * 0.7), "cycle": float(loss * 0.3), "grad_norm": 1.0,
        })
    for epoch in range(1, 5):
        r1 = 10.0 * epoch - (15 if epoch == 4 else 0)
        lines.append({
            "kind": "val", "step": epoch * 100, "epoch": float(epoch),
            "t2v": _metrics(r1, r1 + 20, r1 + 30, r1 + 50, 10.0 / epoch, 50.0 / epoch),
            "v2t": _metrics(r1 + 2, r1 + 22, r1 + 33, r1 + 55, 9.0 / epoch, 45.0 / epoch),
            **({"selected": True} if epoch == 3 else {}),
        })
    return lines


TEST = {
    "t2v": _metrics(42.14, 70.06, 80.0, 95.25, 2.0, 14.33, n=1000),
    "v2t": _metrics(40.96, 69.0, 79.5, 94.0, 2.5, 15.06, n=1000),
}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("report")
    rng = np.random.default_rng(1)
    thumb_file = tmp_path / "frame.png"
    Image.fromarray(rng.integers(0, 255, (90, 160, 3), dtype=np.uint8)).save(thumb_file)

    def array_thumb(value: int) -> np.ndarray:
        image = np.zeros((72, 128, 3), dtype=np.uint8)
        image[..., value % 3] = 200
        return image

    examples = [
        {
            "query": "a red circle moves left <script>alert(1)</script>",
            "correct_ids": ["video7"],
            "results": [
                {"id": f"video{i}", "score": 0.9 - 0.1 * position, "start": 1.0 * i, "end": 1.0 * i + 2.5,
                 "thumbnail": thumb_file if i == 0 else array_thumb(i)}
                for position, i in enumerate((0, 7, 3, 4, 5))
            ],
        },
        {
            "query": "then a blue square & a green star appear",
            "correct_ids": ["video9"],
            "correct_rank": 12,
            "results": [
                {"id": f"video{i}", "score": 0.5, "start": None, "end": None, "thumbnail": array_thumb(i)}
                for i in range(5)
            ],
        },
    ]
    ranks = {
        "t2v": rng.geometric(0.3, size=1000).astype(np.int64),
        "v2t": rng.geometric(0.25, size=1000).astype(np.float64),
        "n_targets": 1000,
    }
    tables = {
        "mean ± std over 3 seeds": {
            "t2v": {"R1": "41.2 ± 0.8", "R5": "70.0 ± 1.1", "R10": 80.3, "MdR": 2.0, "MnR": 14.0},
            "v2t": {"R1": {"mean": 40.04, "std": 0.55, "n": 3}, "R5": 69.0},
        },
        "order-dependent captions <only>": {"t2v": _metrics(30.0, 55.56, 66.6, 90.0, 4.0, 20.0, n=200)},
    }
    run_dir = tmp_path / "run"
    path = write_report(
        run_dir, title="MMT on <synthetic>", metrics_log=_metrics_log(), test_metrics=TEST,
        ranks=ranks, examples=examples, tables=tables,
        notes=["train 640 videos, test 1000 captions", "chance R@1 = 0.1 %"],
    )
    return path, path.read_text(encoding="utf-8")


def test_report_is_written_where_expected(report):
    path, page = report
    assert path.parts[-3:] == ("run", "report", "index.html")
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page.lower()  # no JavaScript, and the query's tag is escaped
    assert "http://" not in page and "https://" not in page  # no CDN
    assert not list(path.parent.glob("*.tmp")) and not list(path.parent.glob(".*.tmp"))


def test_tables_in_paper_format(report):
    _, page = report
    headers = re.findall(r'<th scope="col">(.*?)</th>', page)
    assert headers[:6] == ["R@1", "R@5", "R@10", "R@50", "MdR", "MnR"]
    cells = re.findall(r'<td class="num">(.*?)</td>', page)
    # test table: text→video then video→text, one decimal everywhere
    assert cells[:12] == ["42.1", "70.1", "80.0", "95.2", "2.0", "14.3",
                          "41.0", "69.0", "79.5", "94.0", "2.5", "15.1"]
    assert "text → video" in page and "video → text" in page
    assert "1000 queries" in page
    # extra tables: strings kept, aggregate entries as mean ± std, missing as a dash
    assert "mean ± std over 3 seeds" in page
    assert "41.2 ± 0.8" in page and "40.0 ± 0.6" in page and "–" in page
    assert "order-dependent captions &lt;only&gt;" in page and "55.6" in page


def test_plots_exist_and_are_images(report):
    path, page = report
    for name in ("train_loss.png", "learning_rate.png", "validation.png", "recall_at_k.png", "rank_histogram.png"):
        assert f'src="{name}"' in page
        file = path.parent / name
        assert file.stat().st_size > 5_000
        with Image.open(file) as image:
            image.verify()
        with Image.open(file) as image:
            width, height = image.size
            assert 500 <= width <= 1400 and 300 <= height <= 600
            # not blank: a plot has many distinct colours
            assert len(image.convert("RGB").getcolors(1 << 20)) > 20


def test_examples_mark_correct_and_escape(report):
    path, page = report
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&amp; a green star" in page
    assert "MMT on &lt;synthetic&gt;" in page
    cards = re.findall(r'<div class="card (hit|miss)"><img src="([^"]+)" alt="([^"]+)"', page)
    assert len(cards) == 10
    hits = [(src, alt) for cls, src, alt in cards if cls == "hit"]
    assert [alt for _, alt in hits] == ["video7"]
    for _, src, _ in cards:
        assert not src.startswith("/") and (path.parent / src).is_file()
        with Image.open(path.parent / src) as image:
            assert image.size in ((128, 72), (160, 90))
    assert "Correct video not in the top 5 (at rank 12)" in page
    assert "7.0–9.5 s" in page and "#2 · score 0.800" in page
    assert ".card.hit{border-color:#2e9d3a" in page


def test_notes_and_selected_epoch(report):
    _, page = report
    assert "<li>chance R@1 = 0.1 %</li>" in page
    assert "Selected checkpoint: epoch 3, step 300" in page
    assert "R@1 30.0" in page


def test_minimal_report_from_jsonl_path_and_test_line(tmp_path):
    """Only a metrics.jsonl path (with a torn last line): the test line becomes the table."""
    log = tmp_path / "metrics.jsonl"
    lines = [
        {"kind": "train", "step": 1, "epoch": 0.1, "loss": 2.0, "lr": 1e-3},
        {"kind": "val", "step": 1, "epoch": 1.0, "t2v": TEST["t2v"], "v2t": TEST["v2t"]},
        {"kind": "test", "step": 1, "best_step": 1, "t2v": TEST["t2v"], "v2t": TEST["v2t"]},
    ]
    log.write_text("".join(json.dumps(l) + "\n" for l in lines) + '{"kind": "tra', encoding="utf-8")
    with pytest.warns(UserWarning, match="torn line skipped"):
        path = write_report(tmp_path, title="tiny", metrics_log=log, test_metrics=None)
    page = path.read_text(encoding="utf-8")
    assert '<td class="num">42.1</td>' in page
    assert "Selected checkpoint: epoch 1, step 1" in page
    assert (path.parent / "train_loss.png").is_file()
    assert "Examples" not in page and "Ranks" not in page


def test_empty_report_and_bad_thumbnail(tmp_path):
    examples = [{"query": "q", "correct_ids": ["a"],
                 "results": [{"id": "a", "score": 1.0, "thumbnail": tmp_path / "missing.png"}]}]
    with pytest.warns(UserWarning, match="placeholder"):
        path = write_report(tmp_path, title="t", metrics_log=[], test_metrics=None, examples=examples)
    page = path.read_text(encoding="utf-8")
    assert 'class="card hit"><div class="noimg">' in page
    with pytest.raises(ValueError, match="ranks start at 1"):
        write_report(tmp_path, title="t", metrics_log=[], test_metrics=TEST, ranks={"t2v": [0, 1]})


def test_rewrite_drops_stale_thumbnails(tmp_path):
    thumb = np.full((36, 64, 3), 128, dtype=np.uint8)
    many = [{"query": f"q{i}", "correct_ids": ["a"], "results": [{"id": "a", "score": 1.0, "thumbnail": thumb}]}
            for i in range(3)]
    write_report(tmp_path, title="t", metrics_log=[], test_metrics=TEST, examples=many)
    path = write_report(tmp_path, title="t", metrics_log=[], test_metrics=TEST, examples=many[:1])
    assert sorted(p.name for p in (path.parent / "thumbs").iterdir()) == ["q000_r1.png"]
    assert (path.stat().st_mode & 0o777) == 0o644


def test_method_figures_are_shown_only_when_written(tmp_path):
    (tmp_path / "report").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "report" / "attention.png")
    page = write_report(tmp_path, title="t", metrics_log=[], test_metrics=None,
                        method_figures=[("attention.png", "Support-set attention"), ("missing.png", "never")])
    html = page.read_text()
    assert 'src="attention.png"' in html and "Support-set attention" in html
    assert "missing.png" not in html and "never" not in html
