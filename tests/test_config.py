"""Run config: YAML loading, overrides, and errors that name the key."""
from pathlib import Path

import pytest

from videotext.config import PACKAGED, ConfigError, RunConfig, apply_overrides, find_config, load_config, packaged_configs


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
    configs = sorted(PACKAGED.glob("*/*.yaml"))
    assert len(configs) >= 30, "the packaged configs are missing"
    for path in configs:
        config = load_config(path)
        assert config.method
        assert config.train.epochs > 0


def test_packaged_configs_by_name_and_a_path_wins(tmp_path, monkeypatch):
    packaged = PACKAGED / "mmt" / "msrvtt_1ka.yaml"
    for name in ("mmt/msrvtt_1ka", "mmt/msrvtt_1ka.yaml", "configs/mmt/msrvtt_1ka.yaml"):
        assert find_config(name) == packaged
    assert load_config("mmt/msrvtt_1ka").out_dir == "runs/mmt-msrvtt_1ka"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mmt").mkdir()
    (tmp_path / "mmt" / "msrvtt_1ka.yaml").write_text("method: dual\nout_dir: runs/mine\n")
    assert find_config("mmt/msrvtt_1ka.yaml") == Path("mmt/msrvtt_1ka.yaml")  # the user's file wins
    assert load_config("mmt/msrvtt_1ka.yaml").out_dir == "runs/mine"
    assert find_config("mmt/msrvtt_1ka") == packaged  # no such file: the packaged name
    for bad in ("mmt/nope", "../config.py", "../../pyproject.toml"):
        with pytest.raises(ConfigError, match="no packaged config has that name"):
            find_config(bad)


def test_packaged_configs_resolve_data_paths_against_the_current_directory(tmp_path, monkeypatch):
    """The folder of a packaged config is inside the installed package: `data/msrvtt/...`
    written there means the user's data folder, as the file's comments say; `base:` still
    follows the file's own folder (e.g. an ablation row over its preset beside it)."""
    import yaml

    monkeypatch.chdir(tmp_path)
    config = load_config("frozen/msrvtt")
    assert config.data.manifest == str(tmp_path / "data/msrvtt/manifest_1ka.json")
    assert config.model["vit_checkpoint"] == "timm:vit_base_patch16_224.orig_in21k"  # a weight by name: no path
    rows = [(p, yaml.safe_load(p.read_text())) for p in sorted(PACKAGED.glob("*/*.yaml")) if "\nbase: " in p.read_text()]
    assert rows, "no packaged config starts from a base"
    for path, raw in rows:
        row, preset = load_config(path), load_config(path.parent / raw["base"])
        assert row.out_dir == raw["out_dir"] != preset.out_dir
        assert row.method == preset.method


def test_packaged_config_list_has_one_line_descriptions():
    listed = packaged_configs()
    assert set(listed) == {p.relative_to(PACKAGED).with_suffix("").as_posix() for p in PACKAGED.glob("*/*.yaml")}
    assert listed["dual/synthetic"] == "Baseline dual encoder on the embedded synthetic data (what `make demo` runs)."
    assert all(description and "\n" not in description for description in listed.values())


def test_set_and_option_values_are_typed_by_one_parser():
    from videotext.config import load_config, parse_value
    from videotext.cli import parse_options

    cases = {"5": 5, "0.5": 0.5, "1e-3": 1e-3, "true": True, "False": False, "null": None, "off": "off",
             "yes": "yes", "on": "on", "[1, 2]": [1, 2], "{a: 1}": {"a": 1}, "ViT-B-32": "ViT-B-32",
             "2020-01-01": "2020-01-01", "": "", "[unclosed": "[unclosed"}
    assert {raw: parse_value(raw) for raw in cases} == cases
    assert parse_options([f"k{i}={raw}" for i, raw in enumerate(cases)]) == {
        f"k{i}": value for i, value in enumerate(cases.values())}
    assert load_config(None, ["train.amp=off"]).train.amp == "off"  # not YAML 1.1's False
