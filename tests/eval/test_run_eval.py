"""`evaluate_run` (`videotext eval RUN`): a loaded run evaluated on one split."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import tiny_config_overrides
from videotext.errors import VideoTextError
from videotext.eval.run_eval import evaluate_run


@pytest.fixture(scope="module")
def trained(tiny_synth, tmp_path_factory) -> Path:
    from videotext.config import load_config
    from videotext.train.trainer import Trainer

    run = tmp_path_factory.mktemp("run_eval") / "run"
    Trainer(load_config("dual/synthetic", tiny_config_overrides(tiny_synth) + ["train.epochs=1"]), run,
            progress=False).fit()
    return run


@pytest.mark.heavy
def test_evaluate_run_equals_evaluate_split_and_writes_the_file(trained):
    from videotext.data.run_data import RunData
    from videotext.eval.protocols import evaluate_split
    from videotext.inference import load_model

    model = load_model(trained)
    result, page = evaluate_run(model, "val", report=False)
    assert page is None
    data = RunData(model.config)
    with model.autocast():
        direct = evaluate_split(model.method, data.split("val"), data.read_features, device=model.device)
    assert result == direct
    assert json.loads((trained / "eval_val_best.json").read_text()) == json.loads(json.dumps(direct))


@pytest.mark.heavy
def test_evaluate_run_report_and_checkpoint_name(trained):
    from videotext.inference import load_model

    model = load_model(trained, "last")
    result, page = evaluate_run(model, "test", "last")
    assert (trained / "eval_test_last.json").is_file()
    assert page is not None and Path(page).is_file()
    assert "t2v" in result and "v2t" in result


def test_evaluate_run_names_a_missing_split(trained):
    from videotext.inference import load_model

    with pytest.raises(VideoTextError, match=r"no split 'nope' \(have \['test', 'train', 'val'\]\)"):
        evaluate_run(load_model(trained), "nope")


@pytest.mark.heavy
def test_evaluate_run_rescored_figures_sit_beside_the_unchanged_plain_ones(trained):
    from typer.testing import CliRunner

    from videotext.cli import app
    from videotext.data.run_data import RunData
    from videotext.eval.evaluate import caption_texts
    from videotext.inference import load_model

    model = load_model(trained)
    plain, _ = evaluate_run(model, "test", "plain", report=False)
    result, _ = evaluate_run(model, "test", "rescored", report=False, rescore=["dsl,qbnorm"])
    assert {k: v for k, v in result.items() if k != "rescored"} == plain  # the plain figures are unchanged
    dsl, qb = result["rescored"]["dsl"], result["rescored"]["qbnorm"]
    n = plain["n_captions"]
    assert dsl["labels"]["t2v"] == f"dual softmax over all {n} test queries" and dsl["t2v"]["n_queries"] == n
    assert dsl["v2t"]["n_queries"] == plain["n_videos"]
    assert f"uses all {n} test queries" in dsl["uses"] and "single-query search does not have" in dsl["uses"]
    bank = len(caption_texts(RunData(model.config).split("train")))
    assert qb["settings"]["bank_size"] == bank > 0 and "v2t" not in qb
    assert 0 <= qb["t2v"]["rescored_queries"] <= n
    assert json.loads((trained / "eval_test_rescored.json").read_text())["rescored"]["qbnorm"]["settings"]["beta"] == 20.0

    out = CliRunner().invoke(app, ["eval", str(trained), "--no-report", "--rescore", "dsl", "--rescore", "qbnorm"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0].startswith("t2v: R@1 ") and lines[1].startswith("v2t: R@1 ")
    assert f"t2v (dual softmax over all {n} test queries): R@1 {dsl['t2v']['R1']:.1f}" in out.output
    assert f"t2v (QB-Norm (dynamic inverted softmax), bank of {bank} training captions; " in out.output
    bad = CliRunner().invoke(app, ["eval", str(trained), "--no-report", "--rescore", "csls"])
    assert bad.exit_code != 0 and "--rescore csls: unknown (known: dsl, qbnorm)" in bad.output
