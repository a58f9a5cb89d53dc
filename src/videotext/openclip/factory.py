"""open_clip models by name: the architecture and weights a name means, and the model built from
them (open_clip's `factory`).

A model is named by an open_clip architecture and a weights source:

- architecture: a built-in name (`ViT-B-32`, `ViT-L-14`, …), a model-config JSON file
  (registered under its file stem, e.g. a tiny test config), or an open_clip schema
  (`hf-hub:org/repo`, `local-dir:/path`);
- weights (`pretrained`): an open_clip tag (`openai`, `laion2b_s34b_b79k`; downloaded into
  the hub cache on first use), a local checkpoint file, an HF transformers `CLIPModel` folder
  (its weights mapped to open_clip names, `convert.hf_clip_state`), or "" for random weights. Random
  weights are drawn from a fixed seed, so the text tower of a run and the image tower of
  its `clip` expert are the same network in every process.

A tag's own activation is applied, not only warned about (`quick_gelu: True` in
`open_clip.get_pretrained_cfg(arch, tag)`, e.g. OpenAI's weights, builds QuickGELU as the
`ARCH-quickgelu` architecture does; open_clip's `create_model(arch, pretrained=tag)` would build
GELU and warn); its preprocessing is `transform.image_preprocess`'s.

Everything that may reach the Hugging Face Hub (a tag's weights, an `hf-hub:` architecture, an
HF text tower's config such as `xlm-roberta-base`) loads through `videotext.hub.from_hub`: from
the hub cache with no request once fetched, else downloaded by open_clip / transformers; an
unreachable hub is one `HubError` line naming the weight.

Text encoders take the spec string `openclip:ARCH@PRETRAINED` (`PRETRAINED` optional).
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, TypeVar

import torch

from videotext.errors import VideoTextError, closest
from videotext.hub import from_hub
from videotext.openclip.convert import hf_clip_state, hf_quick_gelu, shape_errors
from videotext.runtime import weights_loaded_after

T = TypeVar("T")

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


def _closest_text(name: str, choices: list[str]) -> str:
    near = closest(name, choices)
    return f"closest: {', '.join(near)}" if near else "no close name"


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
        raise VideoTextError(f"open_clip model {name!r}: unknown architecture ({_closest_text(name, open_clip.list_models())}; "
                             f"open_clip.list_models() lists all); or a model-config .json file, hf-hub:ORG/REPO, local-dir:PATH")
    return name


def pretrained_config(arch: str, pretrained: str) -> dict[str, Any]:
    """open_clip's config of tag `pretrained` of `arch` (its `hf_hub`/`url`, `quick_gelu`, mean, std, …);
    {} for random weights, a local file or folder, or a schema architecture (`hf-hub:`, `local-dir:`).
    A name that is none of these is a misspelt tag: one error listing the closest tags."""
    pretrained = str(pretrained or "")
    if not pretrained or ":" in arch or Path(pretrained).exists():
        return {}
    open_clip = _open_clip()
    config = open_clip.get_pretrained_cfg(arch, pretrained)
    if not config:
        tags = open_clip.list_pretrained_tags_by_model(arch)
        near = _closest_text(pretrained, tags) if tags else f"{arch} has no open_clip tags"
        raise VideoTextError(f"open_clip {arch}: pretrained {pretrained!r} is neither a checkpoint file, an HF CLIPModel "
                             f"folder nor one of its tags ({near}; open_clip.list_pretrained_tags_by_model({arch!r}) lists all)")
    return dict(config)


def needs_quick_gelu(arch: str, pretrained: str) -> bool:
    """Whether the weights `pretrained` were trained with QuickGELU (OpenAI's CLIP and others): the
    tag's config says so, or an HF CLIPModel folder's `hidden_act`."""
    if pretrained and Path(pretrained).is_dir():
        return hf_quick_gelu(pretrained)
    return bool(pretrained_config(arch, pretrained).get("quick_gelu", False))


def _build_options(arch: str, pretrained: str) -> dict[str, Any]:
    """`create_model` keyword arguments that apply the tag's activation: `force_quick_gelu` where the
    weights need QuickGELU. A tag that does not say keeps the architecture's own activation (e.g.
    `roberta-ViT-B-32`, QuickGELU by its config); no tag of open_clip says `quick_gelu: False`."""
    return {"force_quick_gelu": True} if needs_quick_gelu(arch, pretrained) else {}


def _text_cfg(arch: str, key: str) -> str:
    config = _open_clip().get_model_config(arch) if ":" not in arch else None
    return str(((config or {}).get("text_cfg") or {}).get(key, "") or "")


def hf_text_name(arch: str) -> str:
    """The HF transformers model an architecture's text tower is built from (`xlm-roberta-base`), or ""."""
    return _text_cfg(arch, "hf_model_name")


def hf_tokenizer_name(arch: str) -> str:
    """The HF tokenizer an architecture uses (`xlm-roberta-base`), or "" for open_clip's own BPE."""
    return _text_cfg(arch, "hf_tokenizer_name")


def weight_name(arch: str, pretrained: str = "") -> str:
    """How messages name a model: "open_clip ViT-B-32@openai" (plus its HF text model, if any)."""
    text = hf_text_name(arch)
    return f"open_clip {arch}" + (f"@{pretrained}" if pretrained else "") + (f" (text model {text!r})" if text else "")


def through_hub(what: str, may_download: bool, load: Callable[[], T]) -> T:
    """`load()` through `videotext.hub.from_hub` where it may reach the hub, else directly."""
    return from_hub(what, load) if may_download else load()


def canonical(value: str) -> str:
    """A model name or weights source as recorded in configs and stores: local paths made absolute."""
    value = str(value or "")
    return str(Path(value).resolve()) if value and Path(value).exists() else value


def load_clip(name: str, pretrained: str = "", weights: bool = True) -> torch.nn.Module:
    """The open_clip model `name` with weights `pretrained` (see module doc), in eval mode.

    The tag's activation is applied (`needs_quick_gelu`). `weights=False` builds the same network
    (the tag's settings) with seeded random weights and leaves the tag unresolved: no download,
    for checking a tag's settings."""
    pretrained = str(pretrained or "")
    open_clip = _open_clip()
    arch = architecture(name)
    options = _build_options(arch, pretrained)
    tagged = bool(pretrained_config(arch, pretrained))
    hf_folder = pretrained if pretrained and Path(pretrained).is_dir() else ""
    source = None if hf_folder or not weights else (pretrained or None)  # an HF folder loads below

    def build() -> torch.nn.Module:
        # weights that are then loaded (a tag, a file, an HF folder) need no random draw first
        skip_draw = weights_loaded_after() if source is not None or hf_folder else contextlib.nullcontext()
        with torch.random.fork_rng(devices=[]), skip_draw:
            torch.manual_seed(RANDOM_SEED)
            return open_clip.create_model(arch, pretrained=source, pretrained_text=False, **options)

    may_download = (tagged and source is not None) or ":" in arch or bool(hf_text_name(arch))
    try:
        model = through_hub(weight_name(arch, pretrained), may_download, build)
    except (RuntimeError, FileNotFoundError, ValueError) as exc:  # open_clip reports load problems so
        raise VideoTextError(f"open_clip {arch}@{pretrained or 'random'}: cannot load ({' '.join(str(exc).split())[:400]})") from None
    if hf_folder:
        state = hf_clip_state(hf_folder)
        result = model.load_state_dict(state, strict=False)
        missing = [k for k in result.missing_keys if k != "attn_mask"]
        if missing or result.unexpected_keys or shape_errors(model, state):
            raise VideoTextError(f"{hf_folder}: this HF CLIPModel does not fit open_clip {arch} (missing "
                                 f"{missing[:3]}, unexpected {result.unexpected_keys[:3]}); pick the matching ARCH")
    return model.eval()


def is_hf_text(model: torch.nn.Module) -> bool:
    """Whether the model's text tower is an HF transformers model (open_clip's `HFTextEncoder`)."""
    return type(getattr(model, "text", None)).__name__ == "HFTextEncoder"


def text_tower(model: torch.nn.Module) -> torch.nn.Module:
    """The module holding the text transformer (`model.text` of CustomTextCLIP, else the model)."""
    tower = getattr(model, "text", model)
    if not hasattr(tower, "token_embedding"):
        raise VideoTextError(f"{type(model).__name__}: only open_clip's own text transformer is supported "
                             "(this model's text tower is an HF model)")
    return tower
