"""`train_seeds` (`videotext train --seeds`): one run per seed and their mean ± std in seeds_summary.json."""
from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import tiny_config_overrides
from videotext.errors import VideoTextError
from videotext.eval.compare import SEEDS_SUMMARY, run_metrics
from videotext.train.seeds import train_seeds

pytestmark = pytest.mark.heavy  # trains, builds indexes or starts processes and servers: `make test-quick` leaves it out

CONFIG = "dual/synthetic"


@pytest.fixture(scope="module")
def seeded(tiny_synth, tmp_path_factory) -> tuple[Path, dict, list]:
    run = tmp_path_factory.mktemp("seeds") / "run"
    seen = []
    summary = train_seeds(CONFIG, tiny_config_overrides(tiny_synth) + ["train.epochs=1"], [0, 1], run,
                          progress=False, on_result=lambda seed, result: seen.append((seed, result)))
    return run, summary, seen


def test_summary_is_the_mean_and_std_of_the_seed_runs(seeded):
    run, summary, seen = seeded
    assert SEEDS_SUMMARY == "seeds_summary.json"
    saved = json.loads((run / SEEDS_SUMMARY).read_text())
    assert saved == json.loads(json.dumps(summary))  # what is returned is what is written
    assert saved["seeds"] == ["0", "1"]
    assert [seed for seed, _ in seen] == [0, 1]
    tests = [json.loads((run / f"seed_{s}" / "test_metrics.json").read_text()) for s in (0, 1)]
    assert tests[0]["t2v"] != tests[1]["t2v"]  # two different runs
    for direction in ("t2v", "v2t"):
        for metric in ("R1", "R5", "R10", "MdR", "MnR"):
            values = [t[direction][metric] for t in tests]
            entry = saved[direction][metric]
            assert entry["n"] == 2
            assert entry["mean"] == pytest.approx(statistics.mean(values))
            assert entry["std"] == pytest.approx(statistics.stdev(values))
    for (_, result), test in zip(seen, tests):
        assert result["t2v"]["R1"] == pytest.approx(test["t2v"]["R1"])
    assert run_metrics(run, "t2v") == saved["t2v"]  # compare reads the summary back


def test_resume_goes_to_each_seed_as_it_is(seeded, tiny_synth, tmp_path):
    run, summary, _ = seeded
    overrides = tiny_config_overrides(tiny_synth) + ["train.epochs=1"]
    with pytest.raises(VideoTextError, match="already has checkpoints"):
        train_seeds(CONFIG, overrides, [0], run, progress=False)
    with pytest.raises(VideoTextError, match="at least one seed"):
        train_seeds(CONFIG, overrides, [], run, progress=False)
    shutil.copytree(run / "seed_0", tmp_path / "seed_0")
    weights = tmp_path / "seed_0" / "checkpoints" / "last" / "model.safetensors"
    before = weights.read_bytes()
    resumed = train_seeds(CONFIG, overrides, [0], tmp_path, resume=True, progress=False)  # finished: tested again
    assert weights.read_bytes() == before
    first = json.loads((run / "seed_0" / "test_metrics.json").read_text())
    assert resumed["t2v"]["R1"] == {"mean": pytest.approx(first["t2v"]["R1"]), "std": 0.0, "n": 1}


def test_cli_prints_each_seed_and_the_mean_std(monkeypatch, tmp_path):
    """The command only parses and prints: train_seeds is stood in for here."""
    import videotext.apps.runs as runs_module
    from videotext.cli import app

    metrics = {"R1": 10.0, "R5": 30.0, "R10": 50.0, "MdR": 4.0, "MnR": 6.0}
    calls = {}

    def fake(config, overrides, seeds, run_dir, resume=False, progress=True, on_result=None):
        calls.update(config=config, overrides=overrides, seeds=seeds, run_dir=run_dir, resume=resume)
        for seed in seeds:
            on_result(int(seed), {"t2v": metrics, "split": "test"})
        entry = {k: {"mean": v, "std": 1.0, "n": 2} for k, v in metrics.items()}
        return {"seeds": list(seeds), "t2v": entry}

    monkeypatch.setattr(runs_module, "train_seeds", fake)
    result = CliRunner().invoke(app, ["train", CONFIG, "--seeds", "3, 4", "--out", str(tmp_path / "r"),
                                      "--set", "train.epochs=1", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert calls["seeds"] == ["3", "4"] and calls["overrides"] == ["train.epochs=1"] and not calls["resume"]
    assert result.output.splitlines() == [
        "seed 3: t2v: R@1 10.0  R@5 30.0  R@10 50.0  MdR 4.0  MnR 6.0",
        "seed 4: t2v: R@1 10.0  R@5 30.0  R@10 50.0  MdR 4.0  MnR 6.0",
        "t2v  R1 10.0 ± 1.0  R5 30.0 ± 1.0  R10 50.0 ± 1.0  MdR 4.0 ± 1.0",
        f"mean ± std over 2 seeds: {tmp_path / 'r' / 'seeds_summary.json'}",
    ]
