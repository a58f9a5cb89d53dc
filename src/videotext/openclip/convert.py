"""Weights of other layouts in open_clip's and out of it (open_clip's `convert`): an HF transformers
`CLIPModel` folder as an open_clip state dict (`hf_clip_state`), and an open_clip image tower as
a timm ViT state dict (`vit_timm_state`, Frozen's spatial init)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from videotext.errors import VideoTextError


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
    path = Path(folder) / "config.json"
    config = json.loads(path.read_text()) if path.is_file() else {}
    if config.get("model_type") != "clip":
        raise VideoTextError(f"{folder}: not an HF CLIPModel folder (config.json with model_type 'clip')")
    return config


def hf_quick_gelu(folder: str) -> bool:
    """OpenAI's CLIP uses QuickGELU; HF configs say so in hidden_act."""
    return bool(folder) and _hf_config(folder).get("text_config", {}).get("hidden_act") == "quick_gelu"


def shape_errors(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> list[str]:
    """The keys of `state` whose shape differs from the model's own tensor of that name."""
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
