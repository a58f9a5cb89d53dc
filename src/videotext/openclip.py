"""open_clip models by name: the one place that builds CLIP-family towers (`open-clip-torch`).

A model is named by an open_clip architecture and a weights source:

- architecture: a built-in name (`ViT-B-32`, `ViT-L-14`, …), a model-config JSON file
  (registered under its file stem, e.g. a tiny test config), or an open_clip schema
  (`hf-hub:org/repo`, `local-dir:/path`);
- weights (`pretrained`): an open_clip tag (`openai`, `laion2b_s34b_b79k`; downloaded into
  the hub cache on first use), a local checkpoint file, or "" for random weights. Random
  weights are drawn from a fixed seed, so the text tower of a run and the image tower of
  its `clip` expert are the same network in every process.

Text encoders take the spec string `openclip:ARCH@PRETRAINED` (`PRETRAINED` optional).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from videotext.errors import VideoTextError

SPEC_PREFIX = "openclip:"
RANDOM_SEED = 0  # seed of random-weight models ("" pretrained), see module doc


def is_spec(text_model: str) -> bool:
    """True for a `text_model` naming an open_clip text tower (`openclip:ARCH[@PRETRAINED]`)."""
    return str(text_model).startswith(SPEC_PREFIX)


def parse_spec(spec: str) -> tuple[str, str]:
    """`openclip:ViT-B-32@openai` → ("ViT-B-32", "openai"); no `@` means random weights."""
    if not is_spec(spec):
        raise VideoTextError(f"text model {spec!r}: expected openclip:ARCH[@PRETRAINED]")
    arch, _, pretrained = spec[len(SPEC_PREFIX):].partition("@")
    if not arch:
        raise VideoTextError(f"text model {spec!r}: no architecture after 'openclip:' (e.g. openclip:ViT-B-32@openai)")
    return arch, pretrained


def _open_clip():
    try:
        import open_clip
    except ImportError:  # pragma: no cover - a dependency of the package
        raise VideoTextError("CLIP models need the package open-clip-torch (pip install open-clip-torch)") from None
    return open_clip


def architecture(name: str) -> str:
    """The open_clip name of `name`; a `.json` model config file is registered under its stem."""
    open_clip = _open_clip()
    if name.endswith(".json"):
        path = Path(name)
        if not path.is_file():
            raise VideoTextError(f"{name}: open_clip model config not found")
        open_clip.add_model_config(path)
        return path.stem
    if ":" not in name and open_clip.get_model_config(name) is None:
        raise VideoTextError(f"open_clip model {name!r}: unknown architecture; a config .json file, "
                             f"hf-hub:ORG/REPO, local-dir:PATH or one of {', '.join(open_clip.list_models()[:8])}, …")
    return name


def canonical(value: str) -> str:
    """A model name or weights source as recorded in configs and stores: files as absolute paths."""
    value = str(value or "")
    return str(Path(value).resolve()) if value and Path(value).is_file() else value


def load_clip(name: str, pretrained: str = "") -> torch.nn.Module:
    """The open_clip model `name` with weights `pretrained` (see module doc), in eval mode."""
    pretrained = str(pretrained or "")
    open_clip = _open_clip()
    arch = architecture(name)
    if pretrained and ":" not in arch and not Path(pretrained).is_file() \
            and pretrained not in open_clip.list_pretrained_tags_by_model(arch):
        raise VideoTextError(f"open_clip {arch}: pretrained {pretrained!r} is neither a checkpoint file nor one of "
                             f"its tags {open_clip.list_pretrained_tags_by_model(arch)}")
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(RANDOM_SEED)
            model = open_clip.create_model(arch, pretrained=pretrained or None, pretrained_text=False)
    except RuntimeError as exc:  # open_clip reports download / checkpoint problems as RuntimeError
        raise VideoTextError(f"open_clip {arch}@{pretrained or 'random'}: cannot load ({exc})") from None
    return model.eval()


def tokenizer(name: str) -> Any:
    """open_clip's tokenizer of `name` (its BPE vocabulary ships in the wheel)."""
    return _open_clip().get_tokenizer(architecture(name))


def image_preprocess(name: str, pretrained: str = "") -> dict[str, Any]:
    """{"size", "mean", "std"} of the image tower (what open_clip's own transform uses), from the
    model config and the tag's pretrained config, without building the model where it can."""
    open_clip = _open_clip()
    arch = architecture(name)
    config = open_clip.get_model_config(arch) if ":" not in arch else None
    if config is None:  # hf-hub: / local-dir: schemas: the built model knows
        cfg = getattr(load_clip(name, pretrained).visual, "preprocess_cfg", {}) or {}
    else:
        tag = open_clip.get_pretrained_cfg(arch, pretrained) if pretrained else {}
        cfg = {"size": config["vision_cfg"].get("image_size", 224), **config.get("preprocess_cfg", {}),
               **{k: v for k, v in (tag or {}).items() if k in ("mean", "std")}}
    size = cfg.get("size", 224)
    size = size[0] if isinstance(size, (tuple, list)) else size
    return {"size": int(size), "mean": tuple(float(v) for v in cfg.get("mean", open_clip.OPENAI_DATASET_MEAN)),
            "std": tuple(float(v) for v in cfg.get("std", open_clip.OPENAI_DATASET_STD))}


def text_tower(model: torch.nn.Module) -> torch.nn.Module:
    """The module holding the text transformer (`model.text` of CustomTextCLIP, else the model)."""
    tower = getattr(model, "text", model)
    if not hasattr(tower, "token_embedding"):
        raise VideoTextError(f"{type(model).__name__}: only open_clip's own text transformer is supported "
                             "(this model's text tower is an HF model)")
    return tower


def vit_timm_state(visual: torch.nn.Module) -> dict[str, torch.Tensor]:
    """An open_clip image tower (VisionTransformer) as a timm ViT state dict.

    conv1 → patch_embed.proj (bias zero: CLIP's has none), class_embedding → cls_token,
    positional_embedding → pos_embed, resblocks.i.{ln_1, attn.in_proj, attn.out_proj, ln_2,
    mlp.c_fc, mlp.c_proj} → blocks.i.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2},
    ln_post → norm. CLIP's `ln_pre` becomes timm's `norm_pre` and `proj` is dropped.
    """
    if not hasattr(visual, "conv1") or not hasattr(visual, "class_embedding"):
        raise VideoTextError(f"{type(visual).__name__}: not an open_clip ViT image tower (a timm or CNN tower?)")
    state = visual.state_dict()
    width = state["class_embedding"].shape[-1]
    out = {
        "patch_embed.proj.weight": state["conv1.weight"],
        "patch_embed.proj.bias": torch.zeros(width),
        "cls_token": state["class_embedding"].reshape(1, 1, width),
        "pos_embed": state["positional_embedding"].unsqueeze(0),
        "norm_pre.weight": state["ln_pre.weight"], "norm_pre.bias": state["ln_pre.bias"],
        "norm.weight": state["ln_post.weight"], "norm.bias": state["ln_post.bias"],
    }
    names = {"ln_1": "norm1", "attn.in_proj_weight": "attn.qkv.weight", "attn.in_proj_bias": "attn.qkv.bias",
             "attn.out_proj": "attn.proj", "ln_2": "norm2", "mlp.c_fc": "mlp.fc1", "mlp.c_proj": "mlp.fc2"}
    for key, value in state.items():
        if not key.startswith("transformer.resblocks."):
            continue
        index, rest = key[len("transformer.resblocks."):].split(".", 1)
        for old, new in names.items():
            if rest.startswith(old):
                out[f"blocks.{index}.{new}{rest[len(old):]}"] = value
                break
    return out
