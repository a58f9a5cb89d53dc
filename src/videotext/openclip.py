"""open_clip models by name: the one place that builds CLIP-family towers (`open-clip-torch`)
and their image preprocessing (`image_preprocess`, `FramePreprocess`: open_clip's own eval
transform over decoded video frames).

A model is named by an open_clip architecture and a weights source:

- architecture: a built-in name (`ViT-B-32`, `ViT-L-14`, …), a model-config JSON file
  (registered under its file stem, e.g. a tiny test config), or an open_clip schema
  (`hf-hub:org/repo`, `local-dir:/path`);
- weights (`pretrained`): an open_clip tag (`openai`, `laion2b_s34b_b79k`; downloaded into
  the hub cache on first use), a local checkpoint file, an HF transformers `CLIPModel` folder
  (its weights mapped to open_clip names, `hf_clip_state`), or "" for random weights. Random
  weights are drawn from a fixed seed, so the text tower of a run and the image tower of
  its `clip` expert are the same network in every process.

A tag's own settings are applied, not only warned about: its activation (`quick_gelu: True` in
`open_clip.get_pretrained_cfg(arch, tag)`, e.g. OpenAI's weights, builds QuickGELU as the
`ARCH-quickgelu` architecture does; open_clip's `create_model(arch, pretrained=tag)` would build
GELU and warn) and its preprocessing (mean, std, interpolation, resize mode: `image_preprocess`).

Everything that may reach the Hugging Face Hub (a tag's weights, an `hf-hub:` architecture, an
HF text tower's config such as `xlm-roberta-base`, an HF tokenizer) loads through
`videotext.hub.from_hub`: from the hub cache with no request once fetched, else downloaded by
open_clip / transformers; an unreachable hub is one `HubError` line naming the weight.

Text encoders take the spec string `openclip:ARCH@PRETRAINED` (`PRETRAINED` optional).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, TypeVar

import torch

from videotext.errors import VideoTextError, closest
from videotext.hub import from_hub, real_tokenizer

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
        return _hf_quick_gelu(pretrained)
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


def _through_hub(what: str, may_download: bool, load: Callable[[], T]) -> T:
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
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(RANDOM_SEED)
            return open_clip.create_model(arch, pretrained=source, pretrained_text=False, **options)

    may_download = (tagged and source is not None) or ":" in arch or bool(hf_text_name(arch))
    try:
        model = _through_hub(weight_name(arch, pretrained), may_download, build)
    except (RuntimeError, FileNotFoundError, ValueError) as exc:  # open_clip reports load problems so
        raise VideoTextError(f"open_clip {arch}@{pretrained or 'random'}: cannot load ({' '.join(str(exc).split())[:400]})") from None
    if hf_folder:
        state = hf_clip_state(hf_folder)
        result = model.load_state_dict(state, strict=False)
        missing = [k for k in result.missing_keys if k != "attn_mask"]
        if missing or result.unexpected_keys or _shape_errors(model, state):
            raise VideoTextError(f"{hf_folder}: this HF CLIPModel does not fit open_clip {arch} (missing "
                                 f"{missing[:3]}, unexpected {result.unexpected_keys[:3]}); pick the matching ARCH")
    return model.eval()


def tokenizer(name: str) -> Any:
    """open_clip's tokenizer of `name`: its BPE vocabulary ships in the wheel; an HF tokenizer
    (`xlm-roberta-base`, an `hf-hub:` model's) comes through the hub cache."""
    open_clip = _open_clip()
    arch = architecture(name)
    hf_name = hf_tokenizer_name(arch)
    what = f"open_clip {arch} tokenizer" + (f" {hf_name!r}" if hf_name else "")
    try:
        return _through_hub(what, bool(hf_name) or ":" in arch, lambda: _real_tokenizer(open_clip.get_tokenizer(arch)))
    except (RuntimeError, OSError, ValueError) as exc:
        raise VideoTextError(f"{what}: cannot load ({' '.join(str(exc).split())[:400]})") from None


# open_clip's `SimpleTokenizer` splits the cleaned text into words with this pattern before BPE
CLIP_WORDS = r"""<start_of_text>|<end_of_text>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""


def fast_bpe_tokenizer(clip_tokenizer: Any) -> Any | None:
    """open_clip's own CLIP BPE tokenizer (`SimpleTokenizer` with its default `lower` cleaning) as a
    `tokenizers.Tokenizer` that gives the same ids for text cleaned as `query_encoder.clip_clean`
    cleans it: start and end tokens, and with truncation the end token kept last, as open_clip
    cuts. None for any other tokenizer (an HF tokenizer, another cleaning, extra special tokens)."""
    from open_clip.tokenizer import SimpleTokenizer, _clean_lower
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors

    if type(clip_tokenizer) is not SimpleTokenizer or clip_tokenizer.clean_fn is not _clean_lower or \
            getattr(clip_tokenizer, "reduction_fn", None) is not None or len(clip_tokenizer.all_special_ids) != 2:
        return None
    merges = sorted(clip_tokenizer.bpe_ranks, key=clip_tokenizer.bpe_ranks.get)
    fast = Tokenizer(models.BPE(vocab=dict(clip_tokenizer.encoder), merges=[tuple(m) for m in merges],
                                end_of_word_suffix="</w>"))
    fast.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(CLIP_WORDS), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    start, end = clip_tokenizer.sot_token_id, clip_tokenizer.eot_token_id
    fast.post_processor = processors.TemplateProcessing(
        single="<start_of_text> $A <end_of_text>", special_tokens=[("<start_of_text>", start), ("<end_of_text>", end)])
    fast.add_special_tokens(["<start_of_text>", "<end_of_text>"])
    return fast


def _real_tokenizer(tokenizer: Any) -> Any:
    """open_clip's tokenizer, refused (so `from_hub` downloads) when its HF tokenizer came from a
    cache without the tokenizer files (`videotext.hub.real_tokenizer`)."""
    hf = getattr(tokenizer, "tokenizer", None)
    if hf is not None:
        real_tokenizer(hf)
    return tokenizer


def image_preprocess(name: str, pretrained: str = "") -> dict[str, Any]:
    """open_clip's preprocessing config of the image tower: {"size", "mean", "std", "interpolation",
    "resize_mode", "fill_color"}, resolved as `open_clip.create_model_and_transforms` does (its
    defaults, the pretrained tag's values, the tower's image size), without building the model
    where it can."""
    open_clip = _open_clip()
    from open_clip.transform import PreprocessCfg, merge_preprocess_dict

    arch = architecture(name)
    config = open_clip.get_model_config(arch) if ":" not in arch else None
    if config is None:  # hf-hub: / local-dir: schemas: the built model knows
        cfg = dict(getattr(load_clip(name, pretrained).visual, "preprocess_cfg", {}) or {})
    else:
        tag = pretrained_config(arch, pretrained)  # the tag's mean, std, interpolation, resize mode
        cfg = merge_preprocess_dict(PreprocessCfg(), tag)
        cfg["size"] = config["vision_cfg"].get("image_size", 224)
    cfg = merge_preprocess_dict(PreprocessCfg(), cfg)
    size = cfg["size"]
    if isinstance(size, (tuple, list)):
        size = int(size[0]) if size[0] == size[1] else [int(v) for v in size]
    return {"size": size if isinstance(size, list) else int(size),
            "mean": tuple(float(v) for v in cfg["mean"]), "std": tuple(float(v) for v in cfg["std"]),
            "interpolation": str(cfg["interpolation"]), "resize_mode": str(cfg["resize_mode"]),
            "fill_color": int(cfg["fill_color"])}


class FramePreprocess:
    """open_clip's eval transform (what `create_model_and_transforms` returns as its val
    transform) applied to decoded video frames, in three consecutive parts:

    - `resize`: its first step (shorter side to the input size, bicubic, through PIL);
    - `crop`: the PIL steps after it (centre crop, RGB mode);
    - `pixels`: its tensor steps over a batch (ToTensor's x / 255, then Normalize by the model's
      mean / std).

    Frames go in at their decoded size (never scaled beforehand), as PIL images would; between
    the parts they are uint8 arrays, which PIL images are too, so `pixels(crop(resize(frames)))`
    equals open_clip's transform of each frame's PIL image bit for bit. Splitting lets the
    decoding workers do the PIL work and hand over small uint8 crops, a frame cache hold the
    resized frames (a training crop is cut from them), and the main process normalise batches.
    """

    def __init__(self, config: dict[str, Any]):
        self.config = dict(config)
        self._parts = None

    def __getstate__(self) -> dict[str, Any]:  # workers rebuild the transform
        return {"config": self.config, "_parts": None}

    @property
    def transform(self):
        """open_clip's eval transform (a torchvision Compose over one PIL image)."""
        from open_clip.transform import PreprocessCfg, image_transform_v2

        return image_transform_v2(PreprocessCfg(**self.config), is_train=False)

    def parts(self) -> tuple[list, list, list]:
        """(resize steps, other PIL steps, tensor steps after ToTensor) of `transform`."""
        if self._parts is None:
            from torchvision.transforms import ToTensor

            steps = list(self.transform.transforms)
            at = next(i for i, step in enumerate(steps) if isinstance(step, ToTensor))  # open_clip's MaybeToTensor
            self._parts = (steps[:1], steps[1:at], steps[at + 1:])
        return self._parts

    @property
    def size(self) -> int:
        size = self.config["size"]
        return int(size if isinstance(size, int) else size[0])

    @staticmethod
    def _pil(frames: Any, steps: list) -> Any:
        import numpy as np
        from PIL import Image

        out = []
        for frame in frames:
            image = Image.fromarray(np.ascontiguousarray(frame))
            for step in steps:
                image = step(image)
            out.append(np.asarray(image))
        return np.stack(out) if out else np.zeros((0, 0, 0, 3), np.uint8)

    def resize(self, frames: Any) -> Any:
        """uint8 RGB frames [N, H, W, 3] (one size) → resized uint8 [N, h, w, 3] (open_clip's resize)."""
        return self._pil(frames, self.parts()[0])

    def crop(self, frames: Any) -> Any:
        """Resized uint8 frames [N, h, w, 3] → uint8 crops [N, S, S, 3] (open_clip's crop)."""
        return self._pil(frames, self.parts()[1])

    def images(self, frames: Any) -> Any:
        """uint8 RGB frames [N, H, W, 3] at their decoded size → uint8 crops [N, S, S, 3]."""
        resize, crop, _ = self.parts()
        return self._pil(frames, resize + crop)

    def pixels(self, crops: Any) -> torch.Tensor:
        """uint8 crops [N, S, S, 3] → float32 pixels [N, 3, S, S], normalised by open_clip's own steps."""
        import numpy as np

        x = torch.from_numpy(np.ascontiguousarray(crops)).permute(0, 3, 1, 2).float().div(255)  # ToTensor
        for step in self.parts()[2]:
            x = step(x)
        return x

    def __call__(self, frames: Any) -> torch.Tensor:
        """uint8 RGB frames [N, H, W, 3] → model input [N, 3, S, S]."""
        return self.pixels(self.images(frames))


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


def _hf_config(folder: str) -> dict[str, Any]:
    import json

    path = Path(folder) / "config.json"
    config = json.loads(path.read_text()) if path.is_file() else {}
    if config.get("model_type") != "clip":
        raise VideoTextError(f"{folder}: not an HF CLIPModel folder (config.json with model_type 'clip')")
    return config


def _hf_quick_gelu(folder: str) -> bool:
    """OpenAI's CLIP uses QuickGELU; HF configs say so in hidden_act."""
    return bool(folder) and _hf_config(folder).get("text_config", {}).get("hidden_act") == "quick_gelu"


def _shape_errors(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> list[str]:
    own = model.state_dict()
    return [k for k, v in state.items() if k in own and tuple(own[k].shape) != tuple(v.shape)]


def hf_clip_state(folder: str) -> dict[str, torch.Tensor]:
    """The weights of an HF `CLIPModel` folder (transformers' save_pretrained) in open_clip names.

    text_model.embeddings.{token,position}_embedding → token_embedding / positional_embedding,
    *.encoder.layers.i.self_attn.{q,k,v}_proj → *.resblocks.i.attn.in_proj (concatenated),
    out_proj, layer_norm{1,2} → ln_{1,2}, mlp.fc{1,2} → mlp.c_fc / c_proj, final_layer_norm →
    ln_final, vision pre_layrnorm / post_layernorm → visual.ln_pre / ln_post, patch_embedding
    → visual.conv1, text / visual projections transposed, logit_scale as is.
    """
    from transformers import CLIPModel

    _hf_config(folder)
    try:
        hf = CLIPModel.from_pretrained(folder).state_dict()
    except (OSError, ValueError) as exc:
        raise VideoTextError(f"{folder}: cannot load the HF CLIPModel ({exc})") from None
    out: dict[str, torch.Tensor] = {"logit_scale": hf["logit_scale"],
                                    "text_projection": hf["text_projection.weight"].T.contiguous(),
                                    "visual.proj": hf["visual_projection.weight"].T.contiguous()}
    tops = {"text_model.embeddings.token_embedding.weight": "token_embedding.weight",
            "text_model.embeddings.position_embedding.weight": "positional_embedding",
            "text_model.final_layer_norm.weight": "ln_final.weight", "text_model.final_layer_norm.bias": "ln_final.bias",
            "vision_model.embeddings.class_embedding": "visual.class_embedding",
            "vision_model.embeddings.patch_embedding.weight": "visual.conv1.weight",
            "vision_model.embeddings.position_embedding.weight": "visual.positional_embedding",
            "vision_model.pre_layrnorm.weight": "visual.ln_pre.weight", "vision_model.pre_layrnorm.bias": "visual.ln_pre.bias",
            "vision_model.post_layernorm.weight": "visual.ln_post.weight",
            "vision_model.post_layernorm.bias": "visual.ln_post.bias"}
    out.update({ours: hf[theirs] for theirs, ours in tops.items()})
    parts = {"self_attn.out_proj": "attn.out_proj", "layer_norm1": "ln_1", "layer_norm2": "ln_2",
             "mlp.fc1": "mlp.c_fc", "mlp.fc2": "mlp.c_proj"}
    for tower, prefix in (("text_model", ""), ("vision_model", "visual.")):
        layers = {int(k.split(".")[3]) for k in hf if k.startswith(f"{tower}.encoder.layers.")}
        for i in sorted(layers):
            src, dst = f"{tower}.encoder.layers.{i}.", f"{prefix}transformer.resblocks.{i}."
            for kind in ("weight", "bias"):
                out[f"{dst}attn.in_proj_{kind}"] = torch.cat([hf[f"{src}self_attn.{p}_proj.{kind}"] for p in "qkv"])
                for theirs, ours in parts.items():
                    out[f"{dst}{ours}.{kind}"] = hf[f"{src}{theirs}.{kind}"]
    return out


# --- the text transformer for inference -----------------------------------------------------


def _packing_available() -> bool:
    """oneDNN's pre-packed linear (what torch.compile's CPU weight freezing uses) is in this torch build."""
    ops = torch.ops.mkldnn
    return bool(torch.backends.mkldnn.is_available() and hasattr(ops, "_reorder_linear_weight")
                and hasattr(ops, "_linear_pointwise") and hasattr(ops, "_is_mkldnn_bf16_supported"))


def _standard_blocks(tower: torch.nn.Module) -> bool:
    """True when every block of `tower` is open_clip's plain `ResidualAttentionBlock` (nn.MultiheadAttention
    with packed biased in-projection, batch first, MLP c_fc → act → c_proj) under a causal mask."""
    from open_clip.transformer import ResidualAttentionBlock

    transformer = getattr(tower, "transformer", None)
    if getattr(tower, "attn_mask", None) is None or getattr(tower, "cls_emb", None) is not None \
            or transformer is None or not getattr(transformer, "batch_first", False):
        return False
    for block in transformer.resblocks:
        attn = getattr(block, "attn", None)
        if type(block) is not ResidualAttentionBlock or hasattr(block, "ln_1_kv") \
                or not isinstance(attn, torch.nn.MultiheadAttention) or not attn.batch_first \
                or not attn._qkv_same_embed_dim or attn.in_proj_bias is None or attn.bias_k is not None \
                or attn.add_zero_attn or attn.out_proj.bias is None \
                or list(dict(block.mlp.named_children())) != ["c_fc", "gelu", "c_proj"] \
                or block.mlp.c_fc.bias is None or block.mlp.c_proj.bias is None:
            return False
    return True


class PackedTextTransformer:
    """Inference forward of an open_clip text transformer whose linear weights are pre-packed for
    oneDNN (`torch.ops.mkldnn._linear_pointwise`), on the CPU without gradients.

    A caption is a few tokens against 38 M weights (ViT-B-32's text tower): 48 matrix products of
    5–32 rows, slow through ATen's linear on the plain weight layout (which, under bf16 autocast,
    also casts every weight to bf16 on each call). Packed, the products of one ViT-B-32 caption
    take 14 instead of 25 ms in fp32 and 8 instead of 18 ms in bf16 (one thread, CPU time; the
    whole query: bench/query_latency.py). The packed copies are made once per compute dtype and
    remade when a weight changes (its version counter), e.g. between training epochs. The blocks compute what `ResidualAttentionBlock` does, in the same order and layout
    (nn.MultiheadAttention's in-projection, scaled dot-product attention under the causal mask,
    out-projection, MLP); under bf16 autocast every matrix product takes bf16 inputs as autocast
    would give them, so the states equal the module path's, and in fp32 they agree to round-off.
    Costs one extra copy of the tower's linear weights per dtype used (ViT-B-32: 151 MB fp32, 76 MB
    bf16)."""

    def __init__(self, tower: torch.nn.Module, rows: int = 32):
        self.tower = tower
        self.rows = rows  # rows per product that oneDNN tunes the packed layout for: a caption's tokens
        self.ok = _packing_available() and _standard_blocks(tower)
        self._packed: dict[torch.dtype, tuple[tuple, list]] = {}  # dtype -> (weight versions, per block)

    def __getstate__(self) -> dict[str, Any]:  # copies and pickles (data-loader workers) repack if they need to
        return {**self.__dict__, "_packed": {}}

    def usable(self, ids: torch.Tensor) -> bool:
        """Whether this call can take the packed path: CPU, no gradients, eval mode, fp32 weights,
        fp32 or bf16-autocast compute."""
        if not self.ok or torch.is_grad_enabled() or self.tower.training or ids.device.type != "cpu":
            return False
        if self.tower.transformer.get_cast_dtype() != torch.float32:
            return False
        if not torch.is_autocast_enabled("cpu"):
            return True
        return torch.get_autocast_dtype("cpu") == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported()

    def _weights(self) -> list[tuple[torch.Tensor, ...]]:
        """Per block: (in_proj W, b, out_proj W, b, c_fc W, b, c_proj W, b)."""
        return [(b.attn.in_proj_weight, b.attn.in_proj_bias, b.attn.out_proj.weight, b.attn.out_proj.bias,
                 b.mlp.c_fc.weight, b.mlp.c_fc.bias, b.mlp.c_proj.weight, b.mlp.c_proj.bias)
                for b in self.tower.transformer.resblocks]

    def packed(self, dtype: torch.dtype) -> list[tuple[torch.Tensor, ...]]:
        """Per block: (weight, bias) pairs of the four linears packed for `dtype`, (re)made when stale."""
        weights = self._weights()
        key = tuple((t.data_ptr(), t._version) for block in weights for t in block)
        cached = self._packed.get(dtype)
        if cached is None or cached[0] != key:
            reorder = torch.ops.mkldnn._reorder_linear_weight
            blocks = []
            for block in weights:
                pairs = []
                for w, b in zip(block[0::2], block[1::2]):
                    pairs += [reorder(w.detach().to(dtype), self.rows), b.detach().to(dtype)]
                blocks.append(tuple(pairs))
            self._packed = {k: v for k, v in self._packed.items() if v[0] == key}  # drop stale dtypes
            self._packed[dtype] = (key, blocks)
            cached = self._packed[dtype]
        return cached[1]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Token states [B, L, width] (embeddings + positions, fp32) → states after the last block."""
        dtype = torch.bfloat16 if torch.is_autocast_enabled("cpu") else torch.float32  # of the matrix products
        linear = torch.ops.mkldnn._linear_pointwise
        length = x.shape[1]
        mask = self.tower.attn_mask[:length, :length].to(x.dtype)[None, None]  # [1, 1, L, L] causal
        for block, (w_in, b_in, w_out, b_out, w_fc, b_fc, w_proj, b_proj) in zip(
                self.tower.transformer.resblocks, self.packed(dtype)):
            batch, _, width = x.shape
            heads = block.attn.num_heads
            h = block.ln_1(x).transpose(0, 1)  # [L, B, W]: nn.MultiheadAttention's layout
            qkv = linear(h.to(dtype), w_in, b_in, "none", [], "")  # [L, B, 3W]
            qkv = qkv.unflatten(-1, (3, width)).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()  # [3, L, B, W]
            q, k, v = (t.view(length, batch * heads, -1).transpose(0, 1).view(batch, heads, length, -1) for t in qkv)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, mask.to(q.dtype))  # [B, H, L, W/H]
            a = a.permute(2, 0, 1, 3).reshape(length * batch, width)  # [L·B, W]
            a = linear(a, w_out, b_out, "none", [], "").view(length, batch, width).transpose(0, 1)  # [B, L, W]
            x = x + block.ls_1(a)
            h = linear(block.ln_2(x).to(dtype), w_fc, b_fc, "none", [], "")  # [B, L, 4W]
            x = x + block.ls_2(linear(block.mlp.gelu(h), w_proj, b_proj, "none", [], ""))
        return x
