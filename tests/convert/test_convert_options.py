"""`videotext convert` options: every converter validates its `--option` keys
against its table (one line naming the key and the valid ones, exit status 2), `--help`
lists each table with defaults and their source, and a conversion prints the architecture
it inferred and where each option value came from."""
from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from tests.convert.test_coot_convert import HEADS, official_state
from videotext.cli import app
from videotext.convert import available, convert, converter
from videotext.errors import VideoTextError

MISSPELT = {"coot": ("num_head", "num_heads"), "frozen": ("head", "heads"), "mmt": ("keep_missing", "keep_missing_modalities"),
            "openclip": ("max_frame", "max_frames"), "conse": ("top_class", "top_classes")}
PAGES = {"openclip": "clip4clip"}  # the zero-shot CLIP converter is documented on the CLIP4Clip page


def test_every_converter_is_covered():
    assert sorted(MISSPELT) == available()


@pytest.mark.parametrize("method", sorted(MISSPELT))
def test_misspelt_option_is_an_error_naming_the_valid_ones(method, tmp_path):
    typo, meant = MISSPELT[method]
    valid = ", ".join(sorted(converter(method).OPTIONS.options))
    expected = f"convert {method}: unknown option {typo!r} (did you mean {meant!r}?); valid options: {valid}"
    absent = tmp_path / "absent.pth"  # options are checked before the file is read
    with pytest.raises(VideoTextError) as caught:
        convert(method, absent, tmp_path / "run", **{typo: 4})
    assert str(caught.value) == expected
    with pytest.raises(VideoTextError) as direct:  # the converter module checks too
        converter(method).convert(absent, tmp_path / "run", **{typo: 4})
    assert str(direct.value) == expected
    result = CliRunner().invoke(app, ["convert", method, str(absent), "-o", str(tmp_path / "run"),
                                      "--option", f"{typo}=4"])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {expected}"
    assert not (tmp_path / "run").exists()


def test_option_values_are_typed():
    table = converter("coot").OPTIONS
    assert table.resolve({"cmc_weight": 1})["cmc_weight"] == 1.0  # int from the CLI → float
    with pytest.raises(VideoTextError, match=r"^convert coot: option num_heads=4.5 must be a int$"):
        table.resolve({"num_heads": 4.5})
    with pytest.raises(VideoTextError, match="must be a str \\(one of \\['zeros', 'nearest', 'bilinear'\\]\\)"):
        converter("frozen").OPTIONS.resolve({"temporal_expansion": "cubic"})
    with pytest.raises(VideoTextError, match="keep_missing_modalities=3 must be a bool"):
        converter("mmt").OPTIONS.resolve({"keep_missing_modalities": 3})
    opts = converter("mmt").OPTIONS.resolve({"heads": 2})
    assert opts.from_config("heads", 8, "arch.args.heads") == 2  # the option beats the file
    assert opts.from_config("keep_missing_modalities", False, "arch.args.k") is False
    assert opts.fill("keep_missing_modalities", True, "tensors") is False  # the first value read wins
    assert opts.origin == {"text_model": "default: " + converter("mmt").OPTIONS.option("text_model").source,
                           "heads": "option", "keep_missing_modalities": "checkpoint config arch.args.k"}
    assert opts.read == {"arch.args.heads": 8, "arch.args.k": False}
    with pytest.raises(VideoTextError, match=r"^convert frozen: the checkpoint config arch.args.load_temporal_fix "
                                             r"gives temporal_expansion='cubic', which is not a valid str; "
                                             r"set it with --option temporal_expansion=...$"):
        converter("frozen").OPTIONS.resolve({}).from_config("temporal_expansion", "cubic",
                                                            "arch.args.load_temporal_fix")


def test_help_lists_each_converters_options_with_defaults_and_sources():
    runner = CliRunner()
    one = runner.invoke(app, ["convert", "coot", "--help"])
    assert one.exit_code == 0
    assert "coot options (--option KEY=VALUE):" in one.output and "frozen options" not in one.output
    assert "num_heads (int, default 8)" in one.output and "Table 7: 8 heads" in one.output
    assert "cmc_weight (float, default 0.01)" in one.output and "YouCook2 uses 0.001" in one.output
    every = runner.invoke(app, ["convert", "--help"])
    for method in available():
        table = converter(method).OPTIONS
        assert table.help_text() in every.output
        for option in table.options.values():
            assert f"  {option.name} (" in every.output


def test_docs_pages_list_every_option():
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs" / "methods"
    for method in available():
        page = (docs / f"{PAGES.get(method, method)}.md").read_text(encoding="utf-8")
        for name in converter(method).OPTIONS.options:
            assert f"| `{name}` |" in page, (method, name)


def test_conversion_prints_architecture_and_option_origins(tmp_path):
    ckpt = tmp_path / "model_10.pth"
    torch.save(official_state(), ckpt)
    result = CliRunner().invoke(app, ["convert", "coot", str(ckpt), "-o", str(tmp_path / "run"),
                                      "--option", f"num_heads={HEADS}", "--option", "expert=appearance"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1] == ("architecture: hidden_dim=8, ff_dim=8, num_heads=2, af_heads=2, af_dim=16, use_context=True, "
                        "text_feature_dim=5, experts={'appearance': 6}")
    assert lines[2] == "read from the checkpoint's config: nothing (the file has no readable config)"
    assert lines[3].startswith("options: num_heads=2 (option); cmc_weight=0.01 (default: the ActivityNet config")
    assert "expert=appearance (option)" in lines[3]
    meta = json.loads((tmp_path / "run" / "checkpoints" / "best" / "meta.json").read_text())
    assert meta["conversion"]["options"]["num_heads"] == {"value": 2, "from": "option"}
    assert meta["conversion"]["architecture"]["num_heads"] == 2
