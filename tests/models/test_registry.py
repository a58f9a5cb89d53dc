"""The method registry refuses surprises, `videotext methods` lists it, and a run pins its whole
model config so that a changed default cannot reload an old run as another model."""
from __future__ import annotations

import dataclasses
import warnings

import pytest
import yaml
from typer.testing import CliRunner

from videotext.cli import app
from videotext.models import METHODS, Method, register
from videotext.models.registry import list_methods


def test_a_second_class_under_a_taken_name_is_refused_and_the_same_class_again_is_not():
    with pytest.raises(ValueError, match=r"method name 'dual' is already registered by videotext\.models\.dual\.DualEncoder"):
        @register
        class Impostor(Method):
            name = "dual"
    assert METHODS["dual"].__module__ == "videotext.models.dual"
    assert register(METHODS["dual"]) is METHODS["dual"]


def test_methods_command_lists_every_registered_method_in_one_line_each():
    out = CliRunner().invoke(app, ["methods"]).output.splitlines()
    assert [line.split()[0] for line in out] == sorted(METHODS) == list(list_methods())
    assert len(out) >= 7
    line = {l.split()[0]: l for l in out}
    assert "Multi-modal Transformer for video retrieval (Gabeur et al., ECCV 2020)" in line["mmt"]
    assert all(len(l.split(None, 1)) == 2 for l in out)  # every method says what it is


@pytest.mark.heavy
def test_a_run_pins_its_full_model_config_and_reloads_as_the_same_model(tiny_synth, tmp_path, monkeypatch):
    from tests.conftest import tiny_config_overrides
    from videotext.config import load_config
    from videotext.inference import load_model
    from videotext.models.dual import DualConfig
    from videotext.train.checkpoint import load_meta
    from videotext.train.trainer import Trainer

    config = load_config(None, tiny_config_overrides(tiny_synth) + ["train.epochs=1", f"out_dir={tmp_path / 'run'}"])
    Trainer(config, progress=False).fit()
    run = tmp_path / "run"
    saved = yaml.safe_load((run / "config.yaml").read_text())["model"]
    fields = {f.name for f in dataclasses.fields(DualConfig)}
    assert set(saved) == fields  # every field, defaults included
    assert saved["embed_dim"] == 32 and saved["temporal_pooling"] == DualConfig().temporal_pooling
    assert load_meta(run / "checkpoints" / "best")["model"] == saved

    # a default changes after the run was trained: the run still loads as the model it was
    default = DualConfig().temporal_pooling
    other = next(p for p in ("mean", "max") if p != default)
    monkeypatch.setattr(DualConfig, "temporal_pooling", other)
    monkeypatch.setattr(DualConfig, "__init__", _with_default(DualConfig.__init__, "temporal_pooling", other))
    assert DualConfig().temporal_pooling == other
    assert load_model(run, precision="fp32").method.config.temporal_pooling == default


def _with_default(init, name, value):
    def patched(self, *args, **kwargs):
        kwargs.setdefault(name, value)
        init(self, *args, **kwargs)
    return patched


def test_a_retired_key_of_an_old_run_is_dropped_with_one_warning(tmp_path):
    from videotext.config import load_config

    path = tmp_path / "config.yaml"
    path.write_text("method: dual\ndata:\n  max_text_tokens: 30\n  text: captions\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = load_config(path)
    assert config.data.text == "captions" and not hasattr(config.data, "max_text_tokens")
    assert [str(w.message) for w in caught] == [
        f"{path}: data.max_text_tokens is no longer read (the caption length is each method's "
        f"model.max_text_tokens); ignored"]
