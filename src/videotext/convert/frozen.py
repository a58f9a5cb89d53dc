"""Official Frozen in Time checkpoints (m-bain/frozen-in-time) → a videotext run directory.

The official file is `torch.save({'arch', 'epoch', 'state_dict', 'optimizer', 'monitor_best',
'config'})`, keys optionally prefixed `module.` (saved from a DataParallel / DDP wrapper).
Our video model uses the official names (`video_model.*`), so the mapping is:

    module.                      → (dropped; detected on every key, not only the first)
    text_model.<hf names>        → text_encoder.model.<hf names>
    txt_proj.1.* / vid_proj.0.*  → the same
    *.position_ids (old HF)      → dropped

and the config switches on the official behaviour: `text_relu` (ReLU before txt_proj),
`cls_attention: shared`, `residual: frozen`, [CLS] text pooling (DistilBERT). Sizes
come from the tensors; the head count is not stored, so it is `heads` (default: width/64,
ViT-B's 12). The text model's architecture + tokenizer come from `text_model` (a local
DistilBERT folder; its weights are replaced by the checkpoint's). The pickled trainer
config is read without running it (`_checkpoint`); its text model name, `num_frames` and
`load_temporal_fix` fill the options the user did not give (`OPTIONS`).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from videotext.config import DataConfig, RunConfig, save_config, to_plain
from videotext.convert._checkpoint import config_value, read_checkpoint, require_method, state_dict, state_keys, \
    trainer_config
from videotext.convert._options import Option, Options
from videotext.errors import VideoTextError
from videotext.models.frozen import FrozenConfig
from videotext.models.layers.space_time import expand_temporal_embed
from videotext.models.registry import build_method
from videotext.train.checkpoint import save_checkpoint

PREFIX = "module."
ARGS = ("arch", "args")  # where the official config keeps FrozenInTime's arguments
OPTIONS = Options(
    "frozen",
    Option("text_model", "distilbert-base-uncased",
           "the checkpoint's config (arch.args.text_params.model), else the paper's distilbert-base-uncased (§4.3)",
           "HF folder or name of the text model; its architecture and tokenizer are used, its weights "
           "replaced by the checkpoint's"),
    Option("heads", None, "video width / 64 (ViT-B/16: 768 / 64 = 12, the only official arch_config); "
           "the head count is not stored in the checkpoint", "attention heads of the video transformer", kind=int),
    Option("num_frames", None, "the checkpoint's config (arch.args.video_params.num_frames), else the length "
           "of its temporal embeddings", "frames per video; more than trained expands the temporal "
           "embeddings, fewer truncates them", kind=int),
    Option("temporal_expansion", "zeros", "the checkpoint's config (arch.args.load_temporal_fix; 'interp' = "
           "nearest), else the official default 'zeros'", "how extra temporal embeddings are made",
           choices=("zeros", "nearest", "bilinear")),
)


def recognises(data: Any) -> bool:
    """True for a Frozen in Time checkpoint (video_model.* and vid_proj.* weights)."""
    keys = [k[len(PREFIX):] if k.startswith(PREFIX) else k for k in state_keys(data)]
    return any(k.startswith("video_model.") for k in keys) and any(k.startswith("vid_proj.") for k in keys)


def read_official(checkpoint: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(state_dict without `module.` prefixes, training config) of an official checkpoint.

    The pickled `parse_config.ConfigParser` under 'config' is read inertly
    (`_checkpoint.RestrictedUnpickler`): its JSON config comes back, its class never runs.
    """
    data = read_checkpoint(checkpoint)
    require_method(checkpoint, data, "frozen")
    return state_dict(data, checkpoint, PREFIX), trainer_config(data)


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


def convert(checkpoint: Path, out_dir: Path, **options: Any) -> Path:
    """Write `out_dir/config.yaml` + `out_dir/checkpoints/best` from an official checkpoint.

    Options: `OPTIONS` (`videotext convert frozen --help`). `num_frames` larger than the
    checkpoint's expands the temporal embeddings (`temporal_expansion`: zeros | nearest |
    bilinear; the official 'interp' is nearest); smaller truncates them, as the official
    loader does.
    """
    opts = OPTIONS.resolve(options)
    official, trainer = read_official(Path(checkpoint))
    opts.from_config("text_model", config_value(trainer, *ARGS, "text_params", "model"), "arch.args.text_params.model")
    opts.from_config("num_frames", config_value(trainer, *ARGS, "video_params", "num_frames"),
                     "arch.args.video_params.num_frames")
    fix = opts.note("arch.args.load_temporal_fix", config_value(trainer, *ARGS, "load_temporal_fix"))
    opts.fill("temporal_expansion", {"interp": "nearest"}.get(fix, fix), "checkpoint config arch.args.load_temporal_fix")
    model_cfg = infer_model_config(official, opts["heads"], opts["text_model"], opts["num_frames"],
                                   opts["temporal_expansion"])
    opts.fill("heads", model_cfg["heads"], "video width / 64")
    opts.fill("num_frames", model_cfg["num_frames"], "the checkpoint's temporal embeddings")
    state = map_keys(official)
    loaded_frames = int(state["video_model.temporal_embed"].shape[1])
    state["video_model.temporal_embed"] = expand_temporal_embed(
        state["video_model.temporal_embed"], model_cfg["num_frames"], opts["temporal_expansion"])
    method = build_method("frozen", model_cfg)
    state["trained_frames"] = torch.tensor(model_cfg["num_frames"], dtype=torch.long)
    result = method.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise VideoTextError(f"{checkpoint}: does not match the model it describes: missing "
                             f"{result.missing_keys[:5]}, unexpected {result.unexpected_keys[:5]}")
    out_dir = Path(out_dir)
    config = RunConfig(method="frozen", model=to_plain(FrozenConfig(**model_cfg)), data=DataConfig(experts=[]),
                       out_dir=str(out_dir), name=f"frozen (converted from {Path(checkpoint).name})")
    architecture = {k: model_cfg[k] for k in ("video_dim", "depth", "heads", "patch_size", "img_size", "mlp_ratio",
                                              "num_frames", "embed_dim", "text_model")}
    architecture["trained_frames"] = loaded_frames
    out_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, out_dir / "config.yaml")
    save_checkpoint(out_dir / "checkpoints" / "best", method, {
        "method": "frozen", "model": config.model, "expert_dims": None,
        "converted_from": str(checkpoint), "checkpoint_frames": loaded_frames,
        "conversion": opts.meta(architecture),
    })
    return out_dir
