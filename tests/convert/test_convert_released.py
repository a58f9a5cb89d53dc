"""Official Frozen and MMT checkpoints as released: the trainers pickle a
`parse_config.ConfigParser` under 'config'. Built here with a stand-in of that class whose
module is removed before converting, they convert without `trust`, to the same weights as
a plain-dict checkpoint, using the config's values; a pickled `__reduce__` payload never
runs; damaged or foreign files get their own one-line errors."""
from __future__ import annotations

import argparse
import collections
import json
import os
import pickle
import sys
import types
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from tests.convert.test_frozen_convert import FRAMES, HEADS as FROZEN_HEADS, official_state_dict, text_folder  # noqa: F401
from tests.models.test_mmt import tiny_bert
from tests.convert.test_mmt_convert import DIMS, HEADS as MMT_HEADS, official_state
from videotext.cli import app
from videotext.config import load_config
from videotext.convert import convert
from videotext.errors import VideoTextError


class Payload:
    """Pickles as a call to os.mkdir(marker): loading it with plain pickle creates the folder."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (str(self.marker),)


def save_released(path: Path, state: dict, config: dict, arch: str, marker: Path) -> None:
    """torch.save a checkpoint laid out as the official trainers write it, with `config` a pickled
    `parse_config.ConfigParser` (a stand-in module, removed again once saved)."""
    module = types.ModuleType("parse_config")

    class ConfigParser:  # the attributes the official class sets in __init__
        def __init__(self, config):
            self._config = collections.OrderedDict(config)
            self.resume, self.cfg_fname = None, Path("configs/train.json")
            self._save_dir = self._log_dir = Path("exps") / "run"
            self._args = argparse.Namespace(config="configs/train.json", device=None, resume=None)
            self.log_levels = {0: 30, 1: 20, 2: 10}
            self.on_load = Payload(marker)  # a pickled object with a side effect, inside the config

        @property
        def config(self):
            return self._config

    ConfigParser.__module__ = module.__name__
    ConfigParser.__qualname__ = "ConfigParser"
    module.ConfigParser = ConfigParser
    sys.modules["parse_config"] = module
    try:
        torch.save({"arch": arch, "epoch": 3, "state_dict": state, "monitor_best": 0.5,
                    "config": ConfigParser(config), "extra": Payload(marker)}, path)
    finally:
        del sys.modules["parse_config"]


def same_weights(run_a: Path, run_b: Path) -> None:
    a, b = (load_file(str(r / "checkpoints" / "best" / "model.safetensors")) for r in (run_a, run_b))
    assert sorted(a) == sorted(b)
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_payload_runs_under_plain_pickle(tmp_path):
    """The control: the payload used below does have a side effect when unpickled normally."""
    pickle.loads(pickle.dumps(Payload(tmp_path / "control")))
    assert (tmp_path / "control").is_dir()


def test_frozen_released_file(tmp_path, text_folder):  # noqa: F811
    sd = official_state_dict(text_folder)
    marker = tmp_path / "pwned"
    config = {"name": "msrvtt_4f", "arch": {"type": "FrozenInTime", "args": {
        "video_params": {"model": "SpaceTimeTransformer", "arch_config": "base_patch16_224", "num_frames": FRAMES,
                         "pretrained": True, "time_init": "zeros"},
        "text_params": {"model": str(text_folder), "pretrained": True, "input": "text"},
        "projection": "minimal", "load_checkpoint": "", "load_temporal_fix": "interp"}}}
    save_released(tmp_path / "released.pth", sd, config, "FrozenInTime", marker)
    torch.save({"state_dict": sd}, tmp_path / "plain.pth")
    with pytest.raises(pickle.UnpicklingError):  # what a weights-only load makes of the released layout
        torch.load(tmp_path / "released.pth", weights_only=True)

    result = CliRunner().invoke(app, ["convert", "frozen", str(tmp_path / "released.pth"), "-o",
                                      str(tmp_path / "released"), "--option", f"heads={FROZEN_HEADS}"])
    assert result.exit_code == 0, result.output
    assert not marker.exists() and "parse_config" not in sys.modules
    assert (f"read from the checkpoint's config: arch.args.text_params.model={text_folder}, "
            f"arch.args.video_params.num_frames={FRAMES}, arch.args.load_temporal_fix=interp") in result.output
    plain = convert("frozen", tmp_path / "plain.pth", tmp_path / "plain", text_model=str(text_folder),
                    heads=FROZEN_HEADS, temporal_expansion="nearest")
    same_weights(tmp_path / "released", plain)
    model = load_config(tmp_path / "released" / "config.yaml").model
    assert model == load_config(plain / "config.yaml").model
    assert (model["text_model"], model["num_frames"], model["temporal_expansion"]) == (str(text_folder), FRAMES, "nearest")

    run = convert("frozen", tmp_path / "released.pth", tmp_path / "five", heads=FROZEN_HEADS, num_frames=5,
                  temporal_expansion="zeros")  # options override the config
    model = load_config(run / "config.yaml").model
    assert (model["num_frames"], model["temporal_expansion"]) == (5, "zeros")
    assert not marker.exists()


def test_mmt_released_file(tmp_path):
    text_model = tiny_bert(tmp_path / "bert")
    sd = official_state(text_model)
    marker = tmp_path / "pwned"
    config = {"experts": {"modalities": ["vggish", "face", "s3d"], "face_dim": 5},
              "arch": {"type": "CENet", "args": {
                  "keep_missing_modalities": False, "vid_cont": "bert", "txt_pro": "gbn",
                  "vid_bert_params": {"num_attention_heads": MMT_HEADS, "hidden_dropout_prob": 0.1}}}}
    save_released(tmp_path / "released.pth", sd, config, "CENet", marker)
    torch.save({"state_dict": sd}, tmp_path / "plain.pth")

    run = convert("mmt", tmp_path / "released.pth", tmp_path / "released", text_model=text_model)
    assert not marker.exists() and "parse_config" not in sys.modules
    plain = convert("mmt", tmp_path / "plain.pth", tmp_path / "plain", text_model=text_model, heads=MMT_HEADS,
                    keep_missing_modalities=False)
    same_weights(run, plain)
    model = load_config(run / "config.yaml").model
    assert model == load_config(plain / "config.yaml").model
    assert (model["heads"], model["keep_missing_experts"]) == (MMT_HEADS, False)
    meta = json.loads((run / "checkpoints" / "best" / "meta.json").read_text())["conversion"]
    assert meta["checkpoint_config"] == {"experts.modalities": ["vggish", "face", "s3d"],
                                         "arch.args.vid_bert_params.num_attention_heads": MMT_HEADS,
                                         "arch.args.keep_missing_modalities": False}
    assert meta["options"]["heads"] == {"value": MMT_HEADS,
                                        "from": "checkpoint config arch.args.vid_bert_params.num_attention_heads"}

    run = convert("mmt", tmp_path / "released.pth", tmp_path / "kept", text_model=text_model,
                  keep_missing_modalities=True)  # the option overrides the config
    assert load_config(run / "config.yaml").model["keep_missing_experts"] is True

    config["experts"]["modalities"] = ["s3d", "vggish"]
    save_released(tmp_path / "mismatch.pth", sd, config, "CENet", marker)
    with pytest.raises(VideoTextError, match=r"its config lists experts \['s3d', 'vggish'\] but it holds weights "
                                             r"for \['face', 's3d', 'vggish'\]"):
        convert("mmt", tmp_path / "mismatch.pth", tmp_path / "bad", text_model=text_model)
    assert not marker.exists()


def one_line_error(method: str, path: Path, out: Path) -> str:
    with pytest.raises(VideoTextError) as caught:
        convert(method, path, out)
    message = str(caught.value)
    assert "\n" not in message and "trust" not in message and "weights_only" not in message
    return message


def test_distinct_errors(tmp_path):
    sd = official_state(tiny_bert(tmp_path / "bert"))
    marker = tmp_path / "pwned"
    save_released(tmp_path / "mmt.pth", sd, {"arch": {"args": {}}}, "CENet", marker)
    torch.save({"state_dict": sd}, tmp_path / "legacy.pth", _use_new_zipfile_serialization=False)
    (tmp_path / "notes.txt").write_text("not a checkpoint")

    assert one_line_error("frozen", tmp_path / "notes.txt", tmp_path / "r") == (
        f"{tmp_path / 'notes.txt'}: not a PyTorch checkpoint (starts with bytes b'not ', neither a zip nor a pickle)")
    assert one_line_error("frozen", tmp_path / "mmt.pth", tmp_path / "r") == (
        f"{tmp_path / 'mmt.pth'}: this is a mmt checkpoint, not a frozen one: "
        f"run `videotext convert mmt {tmp_path / 'mmt.pth'} ...`")
    assert one_line_error("coot", tmp_path / "legacy.pth", tmp_path / "r").endswith("this is a mmt checkpoint, "
        f"not a coot one: run `videotext convert mmt {tmp_path / 'legacy.pth'} ...`")
    for name in ("mmt.pth", "legacy.pth"):  # zip (torch ≥ 1.6) and legacy pickle layouts
        whole = (tmp_path / name).read_bytes()
        for cut in (len(whole) // 2, len(whole) - 10):
            (tmp_path / "cut.pth").write_bytes(whole[:cut])
            assert one_line_error("mmt", tmp_path / "cut.pth", tmp_path / "r") == (
                f"{tmp_path / 'cut.pth'}: the file is truncated (it ends before the checkpoint does): "
                "download or copy it again")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pth")
    assert one_line_error("mmt", tmp_path / "other.pth", tmp_path / "r") == (
        f"{tmp_path / 'other.pth'}: a PyTorch file, but not a mmt checkpoint (top-level keys: ['weights'])")
    assert not marker.exists() and not (tmp_path / "r").exists()
