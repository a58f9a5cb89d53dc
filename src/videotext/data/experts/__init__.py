"""Feature experts (appearance, motion, audio, words) and their extraction driver.

Experts register by name; `get_expert(name, **options)` builds one. Modules load
lazily, so using the motion expert never imports timm. Built-in experts:

| name         | input  | dim  | step            | what                                            |
|--------------|--------|------|-----------------|-------------------------------------------------|
| `appearance` | frames | 1280 | 1/rate (1 s)    | EfficientNet-Lite0 (ImageNet) pooled features   |
| `motion`     | frames | 80   | 1/rate (1 s)    | Farneback optical-flow statistics               |
| `audio`      | audio  | 128  | 1/rate (1 s)    | log-mel (64 bands) mean and std per step        |
| `words`      | speech | 50   | irregular (0)   | GloVe 6B 50-d vector per narration word         |

`extract_features(source, experts, out_dir)` runs them over a manifest, a dataset or
any folder of videos into a `FeatureStore`; it is resumable and skips broken files.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

from videotext.data.experts.base import (
    AudioExpert,
    Expert,
    ExpertOutput,
    FrameExpert,
    SpeechExpert,
)

_REGISTRY: dict[str, str | Callable[..., Expert]] = {
    "appearance": "videotext.data.experts.appearance:AppearanceExpert",
    "motion": "videotext.data.experts.motion:MotionExpert",
    "audio": "videotext.data.experts.audio:LogMelExpert",
    "words": "videotext.data.experts.words:GloveWordsExpert",
}


def register_expert(name: str, factory: str | Callable[..., Expert]) -> None:
    """Register an expert class (or "module:Class" path) under `name`."""
    _REGISTRY[name] = factory


def expert_names() -> list[str]:
    return sorted(_REGISTRY)


def expert_class(name: str) -> Callable[..., Expert]:
    if name not in _REGISTRY:
        raise KeyError(f"unknown expert {name!r}; known experts: {', '.join(expert_names())}")
    factory = _REGISTRY[name]
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        factory = getattr(importlib.import_module(module), attr)
        _REGISTRY[name] = factory
    return factory


def get_expert(name: str, **options: Any) -> Expert:
    """Build the expert registered as `name` with its options (e.g. rate=2.0)."""
    return expert_class(name)(**options)


def extract_features(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """See `videotext.data.experts.extract.extract_features`."""
    from videotext.data.experts.extract import extract_features as run

    return run(*args, **kwargs)


__all__ = [
    "AudioExpert", "Expert", "ExpertOutput", "FrameExpert", "SpeechExpert",
    "expert_class", "expert_names", "extract_features", "get_expert", "register_expert",
]
