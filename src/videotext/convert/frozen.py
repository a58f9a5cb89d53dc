"""Official Frozen in Time checkpoints (m-bain/frozen-in-time) → a videotext run directory.

The official file is `torch.save({'arch', 'epoch', 'state_dict', 'optimizer', 'monitor_best',
'config'})`, keys optionally prefixed `module.` (OFFICIAL_CODE_NOTES "Checkpoint formats").
Our video model uses the official names (`video_model.*`), so the mapping is:

    module.                      → (dropped; detected on every key, not only the first)
    text_model.<hf names>        → text_encoder.model.<hf names>
    txt_proj.1.* / vid_proj.0.*  → the same
    *.position_ids (old HF)      → dropped

and the config switches on the official behaviour: `text_relu` (ReLU before txt_proj),
`cls_attention: shared`, `residual: frozen`, [CLS] text pooling (DistilBERT). Sizes
come from the tensors; the head count is not stored, so it is `heads` (default: width/64,
ViT-B's 12). The text model's architecture + tokenizer come from `text_model` (a local
DistilBERT folder; its weights are replaced by the checkpoint's).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from videotext.config import DataConfig, RunConfig, save_config, to_plain
from videotext.errors import VideoTextError

PREFIX = "module."


def read_official(checkpoint: Path, trust: bool = False) -> dict[str, torch.Tensor]:
    """The `state_dict` of an official checkpoint, `module.` prefixes removed.

    The originals pickle a parser object under 'config'; they load with `trust=True`
    (`weights_only=False`), which runs pickled code: only for files you trust.
    """
    if not Path(checkpoint).is_file():
        raise VideoTextError(f"{checkpoint}: checkpoint not found")
    try:
        data = torch.load(checkpoint, map_location="cpu", weights_only=not trust)
    except Exception as exc:  # noqa: BLE001 - torch raises several types for pickled objects
        if trust:
            raise VideoTextError(f"{checkpoint}: cannot read ({exc})") from None
        raise VideoTextError(
            f"{checkpoint}: holds pickled objects besides tensors (the official 'config'); pass "
            f"trust=True (`--option trust=true`) only if you trust the file ({type(exc).__name__})"
        ) from None
    state = data.get("state_dict", data) if isinstance(data, dict) else None
    if not isinstance(state, dict) or not state:
        raise VideoTextError(f"{checkpoint}: no 'state_dict' in the file")
    return {(k[len(PREFIX):] if k.startswith(PREFIX) else k): v for k, v in state.items()}


def map_keys(official: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Official names → ours (see the module doc)."""
    out = {}
    for key, value in official.items():
        if key.endswith("position_ids"):
            continue
        if key.startswith("text_model."):
            key = "text_encoder.model." + key[len("text_model."):]
        elif not key.startswith(("video_model.", "txt_proj.", "vid_proj.")):
            raise VideoTextError(f"unexpected key {key!r} in a Frozen in Time checkpoint")
        out[key] = value
    return out


def infer_model_config(state: dict[str, torch.Tensor], heads: int | None = None, text_model: str = "",
                       num_frames: int | None = None, temporal_expansion: str = "zeros") -> dict[str, Any]:
    """Our `model:` config for an official state dict (official key names, no prefix)."""
    if any(k.startswith("text_model.pooler") for k in state):
        raise VideoTextError("this checkpoint's text model is BERT (pooler_output); only DistilBERT "
                             "([CLS] of the last layer) checkpoints are supported")
    dim = int(state["video_model.cls_token"].shape[-1])
    patch = int(state["video_model.patch_embed.proj.weight"].shape[-1])
    grid = math.isqrt(int(state["video_model.pos_embed"].shape[1]) - 1)
    depth = 1 + max(int(k.split(".")[2]) for k in state if k.startswith("video_model.blocks."))
    frames = int(state["video_model.temporal_embed"].shape[1])
    return {
        "preset": "base", "img_size": grid * patch, "patch_size": patch, "video_dim": dim, "depth": depth,
        "heads": heads or max(1, dim // 64), "num_frames": num_frames or frames,
        "mlp_ratio": state["video_model.blocks.0.mlp.fc1.weight"].shape[0] / dim,
        "residual": "frozen", "cls_attention": "shared", "time_init": "zeros",
        "text_model": text_model, "text_pooling": "cls", "text_relu": True,
        "embed_dim": int(state["vid_proj.0.weight"].shape[0]), "temporal_expansion": temporal_expansion,
    }


def convert(checkpoint: Path, out_dir: Path, text_model: str = "distilbert-base-uncased", heads: int | None = None,
            num_frames: int | None = None, temporal_expansion: str = "zeros", trust: bool = False) -> Path:
    """Write `out_dir/config.yaml` + `out_dir/checkpoints/best` from an official checkpoint.

    `num_frames` larger than the checkpoint's expands the temporal embeddings
    (`temporal_expansion`: zeros | nearest | bilinear; the official 'interp' is nearest);
    smaller truncates them, as the official loader does.
    """
    from videotext.models.base import build_method
    from videotext.models.frozen import FrozenConfig
    from videotext.models.layers.space_time import expand_temporal_embed
    from videotext.train.checkpoint import save_checkpoint

    official = read_official(Path(checkpoint), trust)
    model_cfg = infer_model_config(official, heads, text_model, num_frames, temporal_expansion)
    state = map_keys(official)
    loaded_frames = int(state["video_model.temporal_embed"].shape[1])
    state["video_model.temporal_embed"] = expand_temporal_embed(
        state["video_model.temporal_embed"], model_cfg["num_frames"], temporal_expansion)
    method = build_method("frozen", model_cfg)
    state["trained_frames"] = torch.tensor(model_cfg["num_frames"], dtype=torch.long)
    result = method.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise VideoTextError(f"{checkpoint}: does not match the model it describes: missing "
                             f"{result.missing_keys[:5]}, unexpected {result.unexpected_keys[:5]}")
    out_dir = Path(out_dir)
    config = RunConfig(method="frozen", model=to_plain(FrozenConfig(**model_cfg)), data=DataConfig(experts=[]),
                       out_dir=str(out_dir), name=f"frozen (converted from {Path(checkpoint).name})")
    out_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, out_dir / "config.yaml")
    save_checkpoint(out_dir / "checkpoints" / "best", method, {
        "method": "frozen", "model": config.model, "expert_dims": None,
        "converted_from": str(checkpoint), "checkpoint_frames": loaded_frames,
    })
    return out_dir
