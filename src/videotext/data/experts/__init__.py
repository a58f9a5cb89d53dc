"""Feature experts (appearance, motion, audio, words, clip) and their extraction driver.

Experts register by name; `get_expert(name, **options)` builds one. Modules load
lazily, so using the motion expert never imports timm. Built-in experts:

| name         | input  | dim  | step            | what                                            |
|--------------|--------|------|-----------------|-------------------------------------------------|
| `appearance` | frames | 1280 | 1/rate (1 s)    | EfficientNet-Lite0 (ImageNet) pooled features   |
| `motion`     | frames | 80   | 1/rate (1 s)    | Farneback optical-flow statistics               |
| `audio`      | audio  | 128  | 1/rate (1 s)    | log-mel (64 bands) mean and std per step        |
| `words`      | speech | 50   | irregular (0)   | GloVe 6B 50-d vector per narration word         |
| `clip`       | frames | 512  | 1/rate (1 s)    | CLIP image embedding (open_clip; ViT-B-32: 512) |
| `speech`     | speech | 50   | irregular (0)   | `words` of the transcript (subtitles, else ASR) |

`extract_features(source, experts, out_dir)` runs them over a manifest, a dataset or
any folder of videos into a `FeatureStore`; it is resumable and skips broken files.
"""
from __future__ import annotations

from typing import Any

from videotext.data.experts.base import (
    AudioExpert,
    Expert,
    ExpertOutput,
    FrameExpert,
    SpeechExpert,
)
from videotext.data.experts.registry import (
    UnknownExpertError,
    expert_class,
    expert_names,
    get_expert,
    options_from_config,
    register_expert,
)


def extract_features(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """See `videotext.data.experts.extract.extract_features`."""
    # imported on call: the driver loads torch's DataLoader, which `import videotext.data.experts` does not need
    from videotext.data.experts.extract import extract_features as run

    return run(*args, **kwargs)


__all__ = [
    "AudioExpert", "Expert", "ExpertOutput", "FrameExpert", "SpeechExpert",
    "expert_class", "expert_names", "extract_features", "get_expert", "options_from_config", "register_expert",
]
