"""`videotext compare`: a table and a bar chart of finished runs."""
from __future__ import annotations

import json

import pytest
from PIL import Image

from videotext.errors import VideoTextError
from videotext.eval.compare import compare_runs, run_metrics


def make_run(root, name, r1, seeds=None):
    run = root / name
    run.mkdir()
    if seeds:
        summary = {"t2v": {"R1": {"mean": sum(seeds) / len(seeds), "std": 1.5, "n": len(seeds)}, "MdR": {"mean": 2, "std": 0, "n": 3}}}
        (run / "seeds_summary.json").write_text(json.dumps(summary))
    else:
        (run / "test_metrics.json").write_text(json.dumps({"split": "test", "t2v": {"R1": r1, "MdR": 3.0}}))
    return run


def test_compare_reads_single_and_seeded_runs_and_draws_the_chart(tmp_path):
    a = make_run(tmp_path, "all", 40.0)
    b = make_run(tmp_path, "no_audio", None, seeds=[30.0, 33.0, 36.0])
    assert run_metrics(b)["R1"]["mean"] == pytest.approx(33.0)
    page = compare_runs([a, b], tmp_path / "cmp", labels=["all experts", "− audio"], title="Leave one out")
    html = page.read_text()
    assert "all experts" in html and "− audio" in html and "40.0" in html and "33.0 ± 1.5" in html
    assert Image.open(tmp_path / "cmp/report/comparison.png").size[0] > 100
    saved = json.loads((tmp_path / "cmp/comparison.json").read_text())
    assert saved["metrics"]["all experts"]["R1"] == 40.0


def test_compare_errors_name_the_problem(tmp_path):
    a = make_run(tmp_path, "a", 10.0)
    with pytest.raises(VideoTextError, match="no test_metrics.json"):
        compare_runs([a, tmp_path], tmp_path / "out")
    with pytest.raises(VideoTextError, match="2 labels for 1 runs"):
        compare_runs([a], tmp_path / "out", labels=["x", "y"])
    with pytest.raises(VideoTextError, match="metric 'R7'"):
        compare_runs([a], tmp_path / "out", metric="R7")
