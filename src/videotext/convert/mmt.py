"""Official MMT checkpoints (`gabeur/mmt`, `model/model.py` CENet) → a videotext `mmt` run.

The official file is `{'arch', 'epoch', 'state_dict', 'config', ...}` with no `module.`
prefix (the official trainer saves the bare model). The paper configs use vid_cont 'bert',
vid_inp 'both', pos_enc 'tint', out_tok 'mxp', txt_pro 'gbn', txt_wgh 'emb',
vid_wgh 'none', keep_missing_modalities true. Key mapping:

    video_dim_reduce.<e>.fc.*          → project.<e>.*
    vid_bert.embeddings.* / encoder.*  → video_bert.*            (vid_bert.pooler.* is unused: dropped)
    txt_bert.*                         → text_encoder.model.*    (HF names; old `position_ids` dropped)
    text_GU.<e>.{fc,cg.fc,cg.batch_norm}.* → text_gated.<e>.*
    moe_fc_txt.<e>.{weight [1, H], bias [1]} → mixture.{weight [M, H], bias [M]} (experts sorted)

and the official behaviour is switched on in the config: a zero [CLS] token, the
official token types per expert (compute_dims: s3d 1, vggish 2, face 3, …),
missing experts kept in the mixture, the `fix_norm` loss normalisation.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from videotext.config import DataConfig, RunConfig, save_config, to_plain
from videotext.convert._checkpoint import config_value, read_checkpoint, require_method, state_dict, state_keys, \
    trainer_config
from videotext.convert._options import Option, Options
from videotext.errors import VideoTextError
from videotext.models.mmt import MMTConfig
from videotext.models.registry import build_method
from videotext.train.checkpoint import save_checkpoint

OPTIONS = Options(
    "mmt",
    Option("text_model", "bert-base-cased", "the official model.py, which hard-codes bert-base-cased (§4.2); "
           "the checkpoint's config does not name it", "HF folder or name of the caption BERT; its architecture "
           "and tokenizer are used, its weights replaced by the checkpoint's"),
    Option("heads", 4, "the checkpoint's config (arch.args.vid_bert_params.num_attention_heads), else the "
           "paper's 4 (§4.2); not stored in the tensors", "attention heads of the multi-modal transformer"),
    Option("keep_missing_modalities", True, "the checkpoint's config (arch.args.keep_missing_modalities), else "
           "true as in every official config", "missing experts keep their weight in the similarity"),
)

# gabeur/mmt utils/util.py compute_dims: token-type row of each expert
OFFICIAL_TYPES = {"s3d": 1, "vggish": 2, "face": 3, "audio": 4, "rgb": 5, "speech": 6, "ocr": 7, "flow": 8,
                  "scene": 9, "audio_c": 1, "face_c": 2, "i3d": 3, "resnext101_32x48d": 4, "senet154": 5,
                  "ocr_c": 6, "r2p1d": 7, "s3dg": 8, "densenet161": 9, "speech_c": 10, "r2p1dk": 11}


def recognises(data: Any) -> bool:
    """True for an MMT checkpoint (vid_bert.* or video_dim_reduce.* weights)."""
    return any(k.startswith(("vid_bert.", "video_dim_reduce.")) for k in state_keys(data))


def read_official(checkpoint: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(state_dict, training config) of an official checkpoint.

    The pickled `parse_config.ConfigParser` under 'config' is read inertly
    (`_checkpoint.RestrictedUnpickler`): its JSON config comes back, its class never runs.
    """
    data = read_checkpoint(checkpoint)
    require_method(checkpoint, data, "mmt")
    return state_dict(data, checkpoint), trainer_config(data)


def config_experts(trainer: dict[str, Any], state: dict[str, torch.Tensor], checkpoint: Path) -> list[str] | None:
    """The config's expert list (experts.modalities), checked against the experts with weights."""
    listed = config_value(trainer, "experts", "modalities")
    if not isinstance(listed, list):
        return None
    weights = sorted(k.split(".")[1] for k in state if k.startswith("video_dim_reduce.") and k.endswith("fc.weight"))
    if sorted(listed) != weights:
        raise VideoTextError(f"{checkpoint}: its config lists experts {sorted(listed)} but it holds weights "
                             f"for {weights}")
    return listed


def infer_model_config(state: dict[str, torch.Tensor], args: dict[str, Any], text_model: str,
                       heads: int | None) -> tuple[dict[str, Any], dict[str, int]]:
    """Our MMTConfig (as a dict) and expert_dims, read from the state dict's shapes."""
    if "vid_bert.embeddings.word_embeddings.weight" in state or args.get("vid_cont", "bert") != "bert":
        raise VideoTextError("only MMT checkpoints with the multi-modal transformer (vid_cont 'bert') convert")
    experts = sorted(k.split(".")[1] for k in state if k.startswith("video_dim_reduce.") and k.endswith("fc.weight"))
    expert_dims = {e: int(state[f"video_dim_reduce.{e}.fc.weight"].shape[1]) for e in experts}
    unknown = [e for e in experts if e not in OFFICIAL_TYPES]
    if unknown:
        raise VideoTextError(f"experts {unknown} have no official token type (known: {sorted(OFFICIAL_TYPES)})")
    bert = args.get("vid_bert_params", {})
    layers = 1 + max(int(k.split(".")[3]) for k in state if k.startswith("vid_bert.encoder.layer."))
    d_model, intermediate = state["vid_bert.encoder.layer.0.intermediate.dense.weight"].shape[::-1]
    positions = int(state["vid_bert.embeddings.position_embeddings.weight"].shape[0])
    config = {
        "text_model": text_model, "text_pooling": "cls", "freeze_text": False,
        "max_text_tokens": 30, "text_dropout": 0.1, "gated_batch_norm": "text_GU." + experts[0] + ".cg.batch_norm.weight" in state,
        "d_model": int(d_model), "layers": layers, "heads": int(heads or bert.get("num_attention_heads", 4)),
        "intermediate": int(intermediate), "dropout": float(bert.get("hidden_dropout_prob", 0.1)),
        "max_seconds": positions - 2, "temporal_window": 1.0, "agg_init": "max", "encoder": "mmt", "inputs": "all",
        "feature_order": "ordered", "project_l2norm": True, "cls_token": True,
        "expert_types": {e: OFFICIAL_TYPES[e] for e in experts},
        "num_token_types": int(state["vid_bert.embeddings.token_type_embeddings.weight"].shape[0]),
        "keep_missing_experts": bool(args.get("keep_missing_modalities", True)), "missing_agg": "bias",
        "margin": 0.05, "loss_normalise": "terms",
    }
    return config, expert_dims


def map_keys(state: dict[str, torch.Tensor], experts: list[str]) -> dict[str, torch.Tensor]:
    """Official names → ours (see the module docstring)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        head, _, rest = key.partition(".")
        if head == "video_dim_reduce":
            expert, _, param = rest.partition(".fc.")
            out[f"project.{expert}.{param}"] = value
        elif head == "vid_bert":
            if not rest.startswith("pooler."):
                out[f"video_bert.{rest}"] = value
        elif head == "txt_bert":
            if not rest.endswith("position_ids"):
                out[f"text_encoder.model.{rest}"] = value
        elif head == "text_GU":
            out[f"text_gated.{rest}"] = value
        elif head == "moe_fc_txt":
            continue  # stacked below
        else:
            raise VideoTextError(f"unexpected key {key!r} in the MMT checkpoint")
    out["mixture.weight"] = torch.cat([state[f"moe_fc_txt.{e}.weight"] for e in experts])  # [M, H]
    out["mixture.bias"] = torch.cat([state[f"moe_fc_txt.{e}.bias"] for e in experts])  # [M]
    return out


def convert(checkpoint: Path, out_dir: Path, **options: Any) -> Path:
    """Write `out_dir/config.yaml` + `out_dir/checkpoints/best` from an official MMT checkpoint.

    Options: `OPTIONS` (`videotext convert mmt --help`). `text_model` is an HF folder whose
    config and tokenizer match the checkpoint's text BERT (the paper: bert-base-cased);
    its weights are replaced by the checkpoint's.
    """
    opts = OPTIONS.resolve(options)
    state, trainer = read_official(Path(checkpoint))
    args = dict(config_value(trainer, "arch", "args") or {})
    opts.note("experts.modalities", config_experts(trainer, state, Path(checkpoint)))
    opts.from_config("heads", config_value(args, "vid_bert_params", "num_attention_heads"),
                     "arch.args.vid_bert_params.num_attention_heads")
    args["keep_missing_modalities"] = opts.from_config(
        "keep_missing_modalities", args.get("keep_missing_modalities"), "arch.args.keep_missing_modalities")
    model_cfg, expert_dims = infer_model_config(state, args, opts["text_model"], opts["heads"])
    method = build_method("mmt", model_cfg, expert_dims=expert_dims)
    mapped = map_keys(state, method.experts)
    try:
        result = method.load_state_dict(mapped, strict=False)
    except RuntimeError as exc:  # shape mismatches
        raise VideoTextError(f"{checkpoint}: does not match the model it describes ({exc})") from None
    if result.missing_keys or result.unexpected_keys:
        raise VideoTextError(f"{checkpoint}: does not match the model it describes (is text_model the "
                             f"checkpoint's BERT?): missing {result.missing_keys[:5]}, "
                             f"unexpected {result.unexpected_keys[:5]}")
    out_dir = Path(out_dir)
    config = RunConfig(method="mmt", model=to_plain(MMTConfig(**model_cfg)),
                       data=DataConfig(experts=list(expert_dims)), out_dir=str(out_dir),
                       name=f"mmt (converted from {Path(checkpoint).name})")
    out_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, out_dir / "config.yaml")
    architecture = {k: model_cfg[k] for k in ("d_model", "layers", "heads", "intermediate", "max_seconds",
                                              "keep_missing_experts", "text_model")}
    architecture["experts"] = expert_dims
    save_checkpoint(out_dir / "checkpoints" / "best", method, {
        "method": "mmt", "model": config.model, "expert_dims": expert_dims, "converted_from": str(checkpoint),
        "conversion": opts.meta(architecture)})
    return out_dir
