"""A zero-shot run from an open_clip model, with no training:

    videotext convert openclip ViT-B-32 --option pretrained=openai -o runs/clip

writes a `clip4clip` run with the parameter-free `meanP` calculator (CLIP4Clip §3.3):
a video is the mean of its frames' unit CLIP image embeddings (the `clip` expert, one
frame per second, at most `max_frames` spread over the video), a caption CLIP's text
embedding; the score is their cosine. `index build`, `search`, `serve` and `eval` work on
it like on a trained run; `index build` extracts new videos with the same image tower
(the `clip` expert options come from the run's config).

The "checkpoint" argument is the open_clip architecture (`ViT-B-32`, a model-config JSON,
`hf-hub:…`, `local-dir:…`, or a multilingual one such as `xlm-roberta-base-ViT-B-32`);
`pretrained` an open_clip tag (downloaded once into the hub cache by open_clip, with the tag's
activation and preprocessing: `videotext.openclip`), a local checkpoint file, or "" (random
weights: plumbing only). `manifest` (and
`features`) name the dataset `videotext eval RUN` scores; `videotext eval RUN --data
CONFIG` scores any other.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from videotext import openclip
from videotext.config import DataConfig, RunConfig, save_config, to_plain
from videotext.convert._options import Option, Options
from videotext.models.clip4clip import CLIP4ClipConfig
from videotext.models.registry import build_method
from videotext.train.checkpoint import save_checkpoint

OPTIONS = Options(
    "openclip",
    Option("pretrained", "", "random weights (plumbing only): no CLIP weights ship with videotext",
           "an open_clip tag (e.g. openai, laion2b_s34b_b79k), a local checkpoint file or an HF CLIPModel folder"),
    Option("max_frames", 12, "CLIP4Clip §4.1: 12 frames per video (MSR-VTT, MSVD)",
           "frames per video: the clip expert's steps (one per second) kept, spread over the video"),
    Option("max_text_tokens", 32, "CLIP4Clip §4.1: 32 caption tokens", "caption length for the text tower"),
    Option("manifest", "", "none: `videotext eval RUN --data CONFIG` names the data instead",
           "the dataset manifest `videotext eval RUN` scores"),
    Option("features", "", "none: the manifest's own feature store", "a feature store with the clip expert"),
)


def recognises(data: Any) -> bool:
    """open_clip runs start from an architecture name, not from a checkpoint of another method's layout."""
    return False


def convert(checkpoint: Path, out_dir: Path, **options: Any) -> Path:
    """Write `out_dir/config.yaml` + `out_dir/checkpoints/best` (CLIP's text tower and logit scale)."""
    opts = OPTIONS.resolve(options)
    pretrained, max_frames, max_text_tokens = opts["pretrained"], opts["max_frames"], opts["max_text_tokens"]
    manifest, features = opts["manifest"], opts["features"]
    model_cfg = CLIP4ClipConfig(clip_model=openclip.canonical(str(checkpoint)),
                                pretrained=openclip.canonical(pretrained),
                                sim_header="meanP", max_text_tokens=int(max_text_tokens))
    method = build_method("clip4clip", model_cfg)
    dims = {model_cfg.expert: method.text_encoder.hidden_size}
    out_dir = Path(out_dir)
    data = DataConfig(manifest=str(Path(manifest).resolve()) if manifest else "",
                      features=str(Path(features).resolve()) if features else "",
                      experts=[model_cfg.expert], max_steps_per_expert=int(max_frames))
    source = f"{model_cfg.clip_model}@{model_cfg.pretrained or 'random'}"
    config = RunConfig(method="clip4clip", model=to_plain(model_cfg), data=data, out_dir=str(out_dir),
                       name=f"zero-shot CLIP ({source})")
    out_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, out_dir / "config.yaml")
    save_checkpoint(out_dir / "checkpoints" / "best", method, {
        "method": "clip4clip", "model": config.model, "expert_dims": dims, "converted_from": source,
        "selected_by": "none (zero-shot, no training)",
        "conversion": opts.meta({"clip_model": model_cfg.clip_model, "pretrained": model_cfg.pretrained or "random",
                                 "embed_dim": dims[model_cfg.expert], "sim_header": "meanP"}),
    })
    return out_dir
