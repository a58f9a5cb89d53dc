"""`videotext compare`: a table and a bar chart of finished runs."""
from __future__ import annotations

import json

import pytest
from PIL import Image

from videotext.errors import VideoTextError
from videotext.eval.compare import compare_runs, run_metrics, t_interval


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


def make_seeds(root, name, r1_by_seed):
    """A `--seeds` folder whose seeds were trained as separate jobs: seed_N/test_metrics.json only."""
    for seed, r1 in r1_by_seed.items():
        (root / name / f"seed_{seed}").mkdir(parents=True)
        (root / name / f"seed_{seed}" / "test_metrics.json").write_text(json.dumps({"t2v": {"R1": r1, "MdR": 2.0}}))
    return root / name


def test_compare_pairs_seeded_rows_with_a_baseline_seed_by_seed(tmp_path):
    base = make_seeds(tmp_path, "none", {0: 60.0, 1: 62.0, 2: 58.0})
    cross = make_seeds(tmp_path, "cross", {0: 58.0, 1: 61.0, 2: 55.0, 3: 70.0})  # seed 3 has no partner
    single = make_run(tmp_path, "single", 50.0)
    assert run_metrics(base)["R1"] == {"mean": 60.0, "std": 2.0, "n": 3}
    page = compare_runs([base, cross, single], tmp_path / "cmp", labels=["none", "cross", "one"], baseline="none")
    saved = json.loads((tmp_path / "cmp/comparison.json").read_text())
    paired = saved["paired"]["cross"]
    assert paired["per_seed"] == {"0": -2.0, "1": -1.0, "2": -3.0}
    assert paired["mean"] == pytest.approx(-2.0) and paired["std"] == pytest.approx(1.0) and paired["n"] == 3
    # t(2, 0.975) = 4.3027: -2 ± 4.3027 · 1 / √3
    assert paired["ci95"] == pytest.approx([-2.0 - 2.48414, -2.0 + 2.48414], abs=1e-4)
    assert saved["paired"]["one"] is None  # a single run has no seeds to pair
    html = page.read_text()
    assert "cross − none, t2v R1 paired by seed: -2.0 ± 1.0 (-2.0, -1.0, -3.0)" in html
    assert "one − none, t2v R1 paired by seed: –" in html
    with pytest.raises(VideoTextError, match="--baseline 'dual' is not a row label"):
        compare_runs([base], tmp_path / "out", baseline="dual")


def test_t_interval_is_students_at_n_minus_one_degrees():
    assert t_interval(1.0, 2.0, 2) == pytest.approx([1.0 - 12.7062 * 2.0 / 2 ** 0.5, 1.0 + 12.7062 * 2.0 / 2 ** 0.5], abs=1e-3)
    assert t_interval(0.0, 3.0, 10) == pytest.approx([-2.2622 * 3.0 / 10 ** 0.5, 2.2622 * 3.0 / 10 ** 0.5], abs=1e-3)
    assert t_interval(5.0, 0.0, 3) == [5.0, 5.0]
    assert t_interval(5.0, 0.0, 1) is None  # one seed: no spread to go by
