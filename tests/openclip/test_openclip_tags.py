"""open_clip tags named by the packaged configs and the docs: their own settings are applied.

For each (architecture, tag) a config or a doc page names, the model we build uses the tag's
activation (QuickGELU where `open_clip.get_pretrained_cfg` says `quick_gelu`, e.g. OpenAI's
weights; open_clip 3.3's `create_model(arch, pretrained=tag)` only warns) and our preprocessing
is the tag's (size, mean, std, interpolation, resize mode). Built with random weights and the tag
unresolved (`load_clip(..., weights=False)`): no download.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

pytest.importorskip("open_clip")
import open_clip  # noqa: E402
from open_clip.transformer import QuickGELU  # noqa: E402

from videotext import openclip  # noqa: E402
from videotext.errors import VideoTextError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "src" / "videotext" / "configs"
PAIR_PATTERNS = [
    re.compile(r"openclip:([\w.-]+)@([\w.-]+)"),  # text_model / vit_checkpoint specs
    re.compile(r"convert openclip ([\w.-]+) --option pretrained=([\w.-]+)"),
    re.compile(r"clip\.model=([\w.-]+) --option clip\.pretrained=([\w.-]+)"),
]


def _yaml_pairs(path: Path) -> set[tuple[str, str]]:
    """(clip_model, pretrained) of a packaged config's model section."""
    import yaml

    model = (yaml.safe_load(path.read_text()) or {}).get("model") or {}
    arch, tag = str(model.get("clip_model", "") or ""), str(model.get("pretrained", "") or "")
    return {(arch, tag)} if arch and tag else set()


def named_pairs() -> list[tuple[str, str]]:
    """Every open_clip (architecture, tag) a packaged config, README.md or docs/ names."""
    pairs: set[tuple[str, str]] = set()
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted(CONFIGS.rglob("*.yaml"))]
    for path in texts:
        text = path.read_text(errors="replace")
        for pattern in PAIR_PATTERNS:
            pairs.update(pattern.findall(text))
        if path.suffix == ".yaml":
            pairs |= _yaml_pairs(path)
    known = set(open_clip.list_models())
    return sorted((arch, tag) for arch, tag in pairs if arch in known)  # drops placeholders (ARCH@PRETRAINED)


PAIRS = named_pairs()


def test_the_configs_and_docs_name_openais_vit_b_32():
    assert ("ViT-B-32", "openai") in PAIRS, PAIRS


def _activations(model: torch.nn.Module) -> set[type]:
    return {type(block.mlp.gelu) for tower in (model.transformer, model.visual.transformer)
            for block in tower.resblocks}


@pytest.mark.parametrize("arch,tag", PAIRS)
def test_a_named_tags_activation_and_preprocessing_are_its_own(arch, tag):
    tag_cfg = open_clip.get_pretrained_cfg(arch, tag)
    assert tag_cfg, f"{arch}@{tag} is not an open_clip tag"
    quick = bool(tag_cfg.get("quick_gelu", open_clip.get_model_config(arch).get("quick_gelu", False)))
    assert openclip.needs_quick_gelu(arch, tag) == quick
    image_size = open_clip.get_model_config(arch)["vision_cfg"].get("image_size", 224)
    if not openclip.hf_text_name(arch):  # an HF text tower's config comes from the hub: built end to end
        model = openclip.load_clip(arch, tag, weights=False)  # in tests/integration/test_hub_openclip.py
        assert _activations(model) == ({QuickGELU} if quick else {torch.nn.GELU})
        image_size = model.visual.image_size

    ours = openclip.image_preprocess(arch, tag)
    size = tag_cfg.get("size", image_size)
    assert ours["size"] == (size[0] if isinstance(size, (tuple, list)) and size[0] == size[1] else size)
    assert ours["mean"] == pytest.approx(tuple(tag_cfg["mean"]))
    assert ours["std"] == pytest.approx(tuple(tag_cfg["std"]))
    assert ours["interpolation"] == tag_cfg["interpolation"]
    assert ours["resize_mode"] == tag_cfg["resize_mode"]


@pytest.mark.heavy
def test_quick_gelu_tag_gives_open_clips_quickgelu_text_embeddings(tmp_path, monkeypatch):
    """ViT-B-32@openai loaded from a weights file (open_clip's download replaced by that file) gives
    the text embeddings of open_clip's `ViT-B-32-quickgelu` built from the same file; the load goes
    through `videotext.hub.from_hub` under the weight's name."""
    torch.manual_seed(3)
    path = tmp_path / "vit_b_32.pt"
    torch.save(open_clip.create_model("ViT-B-32", pretrained=None).state_dict(), path)
    names = []

    def from_hub(what, load):
        names.append(what)
        return load()

    monkeypatch.setattr(openclip.factory, "from_hub", from_hub)  # the module that loads through the hub
    monkeypatch.setattr(open_clip.factory, "download_pretrained", lambda cfg, cache_dir=None: str(path))
    ours = openclip.load_clip("ViT-B-32", "openai")
    assert names == ["open_clip ViT-B-32@openai"]
    reference = open_clip.create_model("ViT-B-32-quickgelu", pretrained=str(path)).eval()
    tokens = open_clip.get_tokenizer("ViT-B-32")(["a red circle", "un cercle rouge", "a man walks his dog"])
    with torch.no_grad():
        torch.testing.assert_close(ours.encode_text(tokens, normalize=True),
                                   reference.encode_text(tokens, normalize=True), atol=1e-6, rtol=0)


@pytest.mark.parametrize("tag,closest", [("opnai", "openai"), ("laion2b_s34b_b97k", "laion2b_s34b_b79k")])
def test_a_misspelt_tag_is_one_line_with_the_closest_tags(tag, closest):
    for load in (lambda: openclip.load_clip("ViT-B-32", tag), lambda: openclip.image_preprocess("ViT-B-32", tag)):
        with pytest.raises(VideoTextError) as error:
            load()
        message = str(error.value)
        assert "\n" not in message
        assert f"closest: {closest}" in message and "ViT-B-32" in message and repr(tag) in message


def test_a_misspelt_architecture_is_one_line_with_the_closest_names():
    with pytest.raises(VideoTextError) as error:
        openclip.load_clip("ViT-B-23", "openai")
    message = str(error.value)
    assert "\n" not in message and "unknown architecture" in message
    assert "ViT-B-32" in message.split("closest:")[1].split(";")[0]
