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
