"""Run config: YAML loading, overrides, and errors that name the key."""
import pytest

from videotext.config import ConfigError, RunConfig, apply_overrides, load_config


def test_overrides_parse_yaml_scalars_and_nested_keys(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("method: dual\ndata:\n  manifest: data/m.json\ntrain:\n  epochs: 3\n")
    config = load_config(path, ["train.epochs=7", "optim.lr=5e-5", "model.freeze_text=true",
                                "data.experts=[appearance,audio]", "optim.betas=[0.8,0.9]"])
    assert isinstance(config, RunConfig)
    assert config.train.epochs == 7
    assert config.optim.lr == pytest.approx(5e-5)
    assert config.model == {"freeze_text": True}
    assert config.data.experts == ["appearance", "audio"]
    assert config.optim.betas == (0.8, 0.9)
    # relative data paths resolve against the config file's folder
    assert config.data.manifest == str((tmp_path / "data/m.json").resolve())


def test_paths_given_on_the_command_line_resolve_against_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "configs").mkdir()
    path = tmp_path / "configs" / "run.yaml"
    path.write_text("method: dual\ndata:\n  features: feats\nmodel:\n  image_manifest: imgs/m.json\n")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    config = load_config(path, ["data.manifest=data/synth/manifest.json", "model.vit_checkpoint=vit.pth"])
    assert config.data.manifest == str(work / "data/synth/manifest.json")  # typed by the user: cwd
    assert config.model["vit_checkpoint"] == str(work / "vit.pth")
    assert config.data.features == str(tmp_path / "configs/feats")  # written in the file: its folder
    assert config.model["image_manifest"] == str(tmp_path / "configs/imgs/m.json")


def test_unknown_key_names_the_key_and_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("train:\n  epoch: 3\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "bad.yaml.train" in str(info.value) and "'epoch'" in str(info.value)


def test_wrong_type_names_the_key():
    with pytest.raises(ConfigError, match=r"config\.train\.epochs: expected an integer"):
        load_config(None, ["train.epochs=ten"])
    with pytest.raises(ConfigError, match="expected key=value"):
        apply_overrides({}, ["train.epochs"])


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_a_config_can_start_from_a_base_file(tmp_path):
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "base.yaml").write_text(
        "method: toco\nmodel:\n  token_weight: 0.5\n  hidden_dim: 64\ndata:\n  manifest: m.json\n"
        "train:\n  epochs: 4\n")
    row = tmp_path / "row.yaml"
    row.write_text("base: presets/base.yaml\nmodel:\n  token_weight: 0\n")
    config = load_config(row, ["train.epochs=2"])
    assert config.method == "toco" and config.model == {"token_weight": 0, "hidden_dim": 64}
    assert config.train.epochs == 2  # overrides still win
    assert config.data.manifest == str((tmp_path / "presets" / "m.json").resolve())  # the base's folder
    loop = tmp_path / "loop.yaml"
    loop.write_text("base: loop.yaml\n")
    with pytest.raises(ConfigError, match="loops back"):
        load_config(loop)
    (tmp_path / "orphan.yaml").write_text("base: missing.yaml\n")
    with pytest.raises(ConfigError, match="missing.yaml: config file not found"):
        load_config(tmp_path / "orphan.yaml")


def test_shipped_configs_load():
    from pathlib import Path

    configs = sorted(Path(__file__).resolve().parents[2].glob("configs/*/*.yaml"))
    assert configs, "no configs shipped"
    for path in configs:
        config = load_config(path)
        assert config.method
        assert config.train.epochs > 0
