"""Convert an official COOT retrieval checkpoint (`gingsi/coot-videotext`) into a run dir.

The official file is a dict of four state dicts {net_video_local, net_video_global,
net_text_local, net_text_global} (older files: a list of the four in that order, with
`input_norm.`/`input_fc.`/`pooler.genpool` names). Key names follow
`nntrainer/models/transformer_legacy.py` (TransformerLegacy, Sublayer,
MultiHeadAttention, PointwiseFeedForwardNetwork), `poolers.py` (MultiGenPool/GenPool)
and `normalizations.py` (LayerNormalization with gain/bias).

The converted config switches on the official code's behaviours (`layernorm_coot` in
normalizations.py, the sin/cos encoding of encoder.py, `TemporalAvgPool` that ignores the
mask): `layer_norm="coot"`, `positional_encoding="sincos_official"`,
`global_pooling="avg_special"`. Only 1-layer attention and 1 AF module are supported (the
paper configs; the official `TransformerEncoder` does not really stack more layers, and
`GenPool` with more than one module differs likewise).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from videotext.config import RunConfig, save_config, to_plain
from videotext.convert._checkpoint import read_checkpoint, require_method, state_dict
from videotext.convert._options import Option, Options
from videotext.errors import VideoTextError
from videotext.models.coot import Coot, CootConfig, sincos_table
from videotext.train.checkpoint import save_checkpoint

NETS = ("net_video_local", "net_video_global", "net_text_local", "net_text_global")
OURS = {"net_video_local": "video_local", "net_video_global": "video_global",
        "net_text_local": "text_local", "net_text_global": "text_global"}
_LAYER = {"self_attention_layer.sublayer.query_projection": "attention.query",
          "self_attention_layer.sublayer.key_projection": "attention.key",
          "self_attention_layer.sublayer.value_projection": "attention.value",
          "self_attention_layer.sublayer.final_projection": "attention.out",
          "self_attention_layer.layer_normalization": "norm1",
          "pointwise_feedforward_layer.sublayer.feed_forward": "ff",
          "pointwise_feedforward_layer.layer_normalization": "norm2"}
_IGNORED = ("embedding.pe", "genpool_one", "fixed_ones")  # fixed tables / constants
OPTIONS = Options(
    "coot",
    Option("num_heads", 8, "the paper's config (Table 7: 8 heads); the head count is not stored in the checkpoint",
           "attention heads of every transformer"),
    Option("cmc_weight", 0.01, "the ActivityNet config (supp.: λ = 0.01); YouCook2 uses 0.001",
           "weight λ of the cross-modal cycle-consistency loss (matters only when training on)"),
    Option("expert", "video", "videotext's name for COOT's one video input; name it after your feature store",
           "name of the one video-feature expert"),
    Option("text_model", "", "the bundled all-MiniLM-L6-v2; the official text features are BERT's: name that "
           "folder to encode new captions the same way", "BERT-family folder the text features come from"),
)


def recognises(data: Any) -> bool:
    """True for a COOT checkpoint: the four nets by name, or (older files) a list of four state dicts."""
    if isinstance(data, (list, tuple)):
        return len(data) == 4 and all(isinstance(d, dict) for d in data)
    return isinstance(data, dict) and all(n in data for n in NETS)


def read_official(checkpoint: Path) -> dict[str, dict[str, torch.Tensor]]:
    """The four official state dicts, by official net name (list format upgraded)."""
    state = read_checkpoint(checkpoint)
    require_method(checkpoint, state, "coot")
    if isinstance(state, (list, tuple)):
        renames = {"input_norm.": "norm_input.", "input_fc.": "input_fc.mlp.", "pooler.genpool": "pooler.pools.0.genpool"}
        upgraded = {}
        for name, sub in zip(NETS, state):
            new = {}
            for key, value in sub.items():
                for old, repl in renames.items():
                    key = key.replace(old, repl)
                new[key] = value
            upgraded[name] = new
        state = upgraded
    return {n: state_dict(state[n], checkpoint) for n in NETS}


def rename_key(key: str) -> str | None:
    """Official key (inside one net) → our key inside the matching CootNet; None = dropped."""
    if any(key.endswith(s) for s in _IGNORED):
        return None
    key = key.replace(".gain", ".weight")
    if key.startswith("input_fc.mlp.0."):
        return "input_fc." + key[len("input_fc.mlp.0."):]
    match = re.match(r"(tf|tf_context)\.encoder_layers\.(\d+)\.(.+)", key)
    if match:
        if match.group(2) != "0":
            raise VideoTextError(f"official key {key!r}: only 1-layer attention is supported")
        prefix = "self_attention" if match.group(1) == "tf" else "cross_attention"
        rest = match.group(3)
        for old, new in _LAYER.items():
            if rest.startswith(old + "."):
                return f"{prefix}.{new}{rest[len(old):]}"
        raise VideoTextError(f"official key {key!r}: unknown layer part")
    match = re.match(r"pooler\.(?:pools\.(\d+)\.)?genpool_(w1|b1|w2|b2)_head$", key)
    if match:
        if match.group(1) not in (None, "0"):
            raise VideoTextError(f"official key {key!r}: only 1 AF module is supported")
        return f"pool.{match.group(2)}"
    return key  # norm_input.weight / norm_input.bias


def official_config(state: dict[str, dict[str, torch.Tensor]], **options: Any) -> tuple[CootConfig, int]:
    """Model config read off the tensor shapes, with the official behaviours on; `options` as `OPTIONS`."""
    options = OPTIONS.resolve(options)
    local = state["net_video_local"]
    hidden = local["input_fc.mlp.0.weight"].shape[0]
    video_dim = local["norm_input.gain"].shape[0]
    text_dim = state["net_text_local"]["norm_input.gain"].shape[0]
    w1 = next(v for k, v in local.items() if k.endswith("genpool_w1_head"))
    ff = next(v for k, v in local.items() if k.endswith("feed_forward.0.weight"))
    config = CootConfig(
        hidden_dim=hidden, ff_dim=ff.shape[0], af_heads=w1.shape[0], af_dim=w1.shape[0] * w1.shape[2],
        num_heads=options["num_heads"], text_feature_dim=text_dim,
        text_model=options["text_model"], layer_norm="coot",
        positional_encoding="sincos_official", global_pooling="avg_special",
        use_context=any(k.startswith("tf_context.") for k in state["net_video_global"]),
        cmc_distance="mean", cmc_weight=options["cmc_weight"], standardise_experts=False,
    )
    return config, video_dim


def convert_state(state: dict[str, dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The four official state dicts → one state dict of `Coot`."""
    out = {}
    for net, ours in OURS.items():
        for key, value in state[net].items():
            new = rename_key(key)
            if new is not None:
                out[f"{ours}.{new}"] = value.float()
    return out


def convert(checkpoint: Path, out_dir: Path, **options: Any) -> Path:
    """Write a run dir (config.yaml + checkpoints/best) from an official COOT checkpoint.

    Options: `OPTIONS` (`videotext convert coot --help`).
    """
    opts = OPTIONS.resolve(options)
    state = read_official(Path(checkpoint))
    config, video_dim = official_config(state, **opts)
    expert = opts["expert"]
    model = Coot(config, expert_dims={expert: video_dim})
    for net in ("net_video_local", "net_text_local"):  # the PE buffer must be the official table
        pe = state[net].get("embedding.pe")
        if pe is not None and not torch.allclose(pe[: 16].float(), sincos_table(16, pe.shape[1], "sincos_official"), atol=1e-5):
            raise VideoTextError(f"{checkpoint}: {net}.embedding.pe is not the official sin/cos table")
    result = model.load_state_dict(convert_state(state), strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise VideoTextError(f"{checkpoint}: missing {result.missing_keys}, unexpected {result.unexpected_keys}")
    run = RunConfig(method="coot", model=to_plain(config), out_dir=str(out_dir), name=f"coot from {Path(checkpoint).name}")
    run.data.experts = [expert]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_config(run, out_dir / "config.yaml")
    architecture = {"hidden_dim": config.hidden_dim, "ff_dim": config.ff_dim, "num_heads": config.num_heads,
                    "af_heads": config.af_heads, "af_dim": config.af_dim, "use_context": config.use_context,
                    "text_feature_dim": config.text_feature_dim, "experts": {expert: video_dim}}
    save_checkpoint(out_dir / "checkpoints" / "best", model,
                    {"method": "coot", "model": to_plain(config), "expert_dims": {expert: video_dim},
                     "converted_from": str(checkpoint), "conversion": opts.meta(architecture)})
    return out_dir
