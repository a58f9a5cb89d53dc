"""Pre-training → fine-tuning: init_from reports every tensor, freeze keeps weights fixed, zero-shot checks experts."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from tests.conftest import tiny_config_overrides
from videotext.config import PACKAGED, ConfigError, TrainConfig, load_config
from videotext.errors import VideoTextError
from videotext.train.checkpoint import save_checkpoint
from videotext.train.init_from import apply_init, checkpoint_folder, freeze, load_matching, zero_shot_config
from videotext.train.trainer import Trainer

pytestmark = pytest.mark.heavy  # trains, builds indexes or starts processes and servers: `make test-quick` leaves it out

CONFIG = PACKAGED / "dual" / "synthetic.yaml"


class Tiny(nn.Module):
    def __init__(self, out: int = 2, extra: bool = False):
        super().__init__()
        self.a = nn.Linear(3, 4)
        self.b = nn.Linear(4, out)
        if extra:
            self.c = nn.Linear(1, 1)


def test_load_matching_reports_loaded_skipped_and_new(tmp_path):
    torch.manual_seed(0)
    source = Tiny(out=5, extra=True)  # b has another shape, c does not exist in the target
    save_checkpoint(tmp_path / "ckpt", source, {"method": "tiny"})
    target = Tiny(out=2)
    b_before = target.b.weight.detach().clone()
    report = load_matching(target, tmp_path / "ckpt")
    assert report["loaded"] == ["a.weight", "a.bias"]
    assert report["new"] == ["b.weight", "b.bias"]
    assert report["skipped_shape"] == [{"name": "b.weight", "checkpoint": [5, 4], "model": [2, 4]},
                                       {"name": "b.bias", "checkpoint": [5], "model": [2]}]
    assert report["skipped_absent"] == ["c.bias", "c.weight"]
    torch.testing.assert_close(target.a.weight, source.a.weight, rtol=0, atol=0)
    torch.testing.assert_close(target.b.weight, b_before, rtol=0, atol=0)  # kept its own initial values


def test_load_matching_into_a_submodule(tmp_path):
    torch.manual_seed(0)
    source = Tiny()
    save_checkpoint(tmp_path / "ckpt", source, {"method": "tiny"})
    holder = nn.Module()
    holder.own = nn.Linear(4, 4)
    holder.guide = Tiny()
    own_before = holder.own.weight.detach().clone()
    report = load_matching(holder, tmp_path / "ckpt", into="guide")
    assert report["loaded"] == ["guide.a.weight", "guide.a.bias", "guide.b.weight", "guide.b.bias"]
    assert report["new"] == ["own.weight", "own.bias"] and report["skipped_absent"] == []
    torch.testing.assert_close(holder.guide.b.weight, source.b.weight, rtol=0, atol=0)
    torch.testing.assert_close(holder.own.weight, own_before, rtol=0, atol=0)
    with pytest.raises(ConfigError, match="train.init_into: 'guid' is no submodule"):
        load_matching(holder, tmp_path / "ckpt", into="guid")
    holder.guide = Tiny(out=5)  # another shape: the run does not fit the submodule
    with pytest.raises(ConfigError, match="does not fit 'guide': 2 of its tensors"):
        load_matching(holder, tmp_path / "ckpt", into="guide")


def test_apply_init_writes_report_and_freezes(tmp_path, capsys):
    save_checkpoint(tmp_path / "pre" / "checkpoints" / "best", Tiny(out=5), {"method": "tiny"})
    target = Tiny()
    train = TrainConfig(init_from=str(tmp_path / "pre"), freeze=["a"])
    report = apply_init(target, train, tmp_path / "run", method_name="tiny")
    assert report["counts"] == {"loaded": 2, "new": 2, "skipped_shape": 2, "skipped_absent": 0, "frozen": 2}
    assert json.loads((tmp_path / "run" / "init_report.json").read_text())["frozen"] == ["a.weight", "a.bias"]
    assert [p.requires_grad for p in target.parameters()] == [False, False, True, True]
    line = capsys.readouterr().out.strip()
    assert "loaded 2 tensors" in line and "2 newly initialised" in line and "frozen 2" in line
    with pytest.raises(ConfigError, match="'encoder' matches no parameter"):
        freeze(Tiny(), ["encoder"])
    with pytest.raises(VideoTextError, match="no checkpoint 'best'"):
        checkpoint_folder(tmp_path / "run")


def test_multi_seed_source_pairs_seeds(tmp_path):
    for seed in (0, 1):
        save_checkpoint(tmp_path / "pre" / f"seed_{seed}" / "checkpoints" / "best", Tiny(), {"method": "tiny"})
    assert checkpoint_folder(tmp_path / "pre", "best", 1) == tmp_path / "pre" / "seed_1" / "checkpoints" / "best"


@pytest.fixture(scope="module")
def pretrained(tiny_synth, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("pre") / "run"
    config = load_config(CONFIG, tiny_config_overrides(tiny_synth) + ["train.epochs=1"])
    Trainer(config, run, progress=False).fit()
    return run


def test_fine_tune_starts_from_weights_and_frozen_parts_stay(tiny_synth, pretrained, tmp_path):
    best = load_file(str(pretrained / "checkpoints" / "best" / "model.safetensors"))
    config = load_config(CONFIG, tiny_config_overrides(tiny_synth) + [
        f"train.init_from={pretrained}", "train.freeze=[video_proj, expert_norms.audio]", "train.epochs=1"])
    seen = {}
    trainer = Trainer(config, tmp_path / "ft", progress=False,
                      on_step=lambda step, parts: seen.setdefault("step1", {
                          k: v.detach().clone() for k, v in trainer.method.state_dict().items()}))
    trainer.fit()
    report = json.loads((tmp_path / "ft" / "init_report.json").read_text())
    assert report["counts"]["loaded"] == len(best) and report["counts"]["new"] == 0
    assert report["source_method"] == "dual" and report["frozen"] == [
        "video_proj.1.weight", "video_proj.1.bias", "expert_norms.audio.weight", "expert_norms.audio.bias"]
    after = load_file(str(tmp_path / "ft" / "checkpoints" / "last" / "model.safetensors"))
    for name in report["frozen"]:
        torch.testing.assert_close(after[name], best[name], rtol=0, atol=0)  # frozen: never moved
    assert not torch.equal(after["text_proj.1.weight"], best["text_proj.1.weight"])  # trained
    # the run started from the pre-trained weights: after one step the trainable part moved a little
    step1 = seen["step1"]["text_proj.1.weight"]
    assert float((step1 - best["text_proj.1.weight"]).abs().max()) < 0.01
    frozen = {id(p) for n, p in trainer.method.named_parameters() if n in report["frozen"]}
    in_optimizer = {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
    assert not frozen & in_optimizer


def test_zero_shot_config_checks_expert_dims(tiny_synth, pretrained, tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text(f"data:\n  manifest: {tiny_synth / 'manifest.json'}\n  features: {tiny_synth / 'features'}\n"
                     f"  experts: [appearance]\n  test_split: val\n")
    run_config = load_config(pretrained / "config.yaml")
    model = SimpleNamespace(config=run_config, run_dir=pretrained)
    config = zero_shot_config(model, other)
    assert config.data.experts == ["appearance", "motion", "audio"]  # the model's experts, the other data
    assert config.data.test_split == "val" and config.method == "dual"
    meta_path = pretrained / "checkpoints" / "best" / "meta.json"
    meta = json.loads(meta_path.read_text())
    wrong = tmp_path / "wrong"
    (wrong / "checkpoints" / "best").mkdir(parents=True)
    meta["expert_dims"]["motion"] = 999
    (wrong / "checkpoints" / "best" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(VideoTextError, match="motion: model 999-d, data 80-d"):
        zero_shot_config(SimpleNamespace(config=run_config, run_dir=wrong), other)


def test_cli_eval_zero_shot_on_another_config(tiny_synth, pretrained, tmp_path):
    from typer.testing import CliRunner

    from videotext.cli import app

    other = tmp_path / "other.yaml"
    other.write_text(f"data:\n  manifest: {tiny_synth / 'manifest.json'}\n  features: {tiny_synth / 'features'}\n")
    result = CliRunner().invoke(app, ["eval", str(pretrained), "--data", str(other), "--split", "val"])
    assert result.exit_code == 0, result.output
    saved = json.loads((pretrained / "eval_val_best_on_other.json").read_text())
    own = json.loads((pretrained / "checkpoints" / "best" / "meta.json").read_text())["val"]
    assert saved["t2v"]["R1"] == pytest.approx(own["t2v"]["R1"])  # same data: the validation metrics again
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"data:\n  manifest: {tiny_synth / 'manifest.json'}\n  features: {tmp_path}\n")
    result = CliRunner().invoke(app, ["eval", str(pretrained), "--data", str(bad)])
    assert result.exit_code == 2 and "do not fit run" in result.output
