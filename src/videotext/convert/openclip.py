"""A zero-shot run from an open_clip model, with no training:

    videotext convert openclip ViT-B-32 --option pretrained=openai -o runs/clip

writes a `clip4clip` run with the parameter-free `meanP` calculator (CLIP4Clip §3.3):
a video is the mean of its frames' unit CLIP image embeddings (the `clip` expert, one
frame per second, at most `max_frames` spread over the video), a caption CLIP's text
embedding; the score is their cosine. `index build`, `search`, `serve` and `eval` work on
it like on a trained run; `index build` extracts new videos with the same image tower
(the `clip` expert options come from the run's config).

The "checkpoint" argument is the open_clip architecture (`ViT-B-32`, a model-config JSON,
`hf-hub:…`, `local-dir:…`); `pretrained` an open_clip tag (downloaded once into the hub
cache), a local checkpoint file, or "" (random weights: plumbing only). `manifest` (and
`features`) name the dataset `videotext eval RUN` scores; `videotext eval RUN --data
CONFIG` scores any other.
"""
from __future__ import annotations

from pathlib import Path

from videotext.config import DataConfig, RunConfig, save_config, to_plain


def convert(checkpoint: Path, out_dir: Path, pretrained: str = "", max_frames: int = 12, max_text_tokens: int = 32,
            manifest: str = "", features: str = "") -> Path:
    """Write `out_dir/config.yaml` + `out_dir/checkpoints/best` (CLIP's text tower and logit scale)."""
    from videotext import openclip
    from videotext.models.base import build_method
    from videotext.models.clip4clip import CLIP4ClipConfig
    from videotext.train.checkpoint import save_checkpoint

    model_cfg = CLIP4ClipConfig(clip_model=openclip.canonical(str(checkpoint)),
                                pretrained=openclip.canonical(pretrained),
                                sim_header="meanP", max_text_tokens=int(max_text_tokens))
    method = build_method("clip4clip", model_cfg)
    dims = {model_cfg.expert: method.text_encoder.hidden_size}
    out_dir = Path(out_dir)
    data = DataConfig(manifest=str(Path(manifest).resolve()) if manifest else "",
                      features=str(Path(features).resolve()) if features else "",
                      experts=[model_cfg.expert], max_steps_per_expert=int(max_frames),
                      max_text_tokens=int(max_text_tokens))
    source = f"{model_cfg.clip_model}@{model_cfg.pretrained or 'random'}"
    config = RunConfig(method="clip4clip", model=to_plain(model_cfg), data=data, out_dir=str(out_dir),
                       name=f"zero-shot CLIP ({source})")
    out_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, out_dir / "config.yaml")
    save_checkpoint(out_dir / "checkpoints" / "best", method, {
        "method": "clip4clip", "model": config.model, "expert_dims": dims, "converted_from": source,
        "selected_by": "none (zero-shot, no training)",
    })
    return out_dir
