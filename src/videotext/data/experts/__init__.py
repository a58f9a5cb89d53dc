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

import importlib
import inspect
from typing import Any, Callable
from videotext.errors import VideoTextError

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
    "clip": "videotext.data.experts.clip:CLIPExpert",
    "layout": "videotext.data.experts.layout:LayoutExpert",
    "speech": "videotext.data.experts.words:SpeechWordsExpert",
}


def register_expert(name: str, factory: str | Callable[..., Expert]) -> None:
    """Register an expert class (or "module:Class" path) under `name`."""
    _REGISTRY[name] = factory


def expert_names() -> list[str]:
    return sorted(_REGISTRY)


class UnknownExpertError(VideoTextError, KeyError):
    """An expert name that is not registered (a user error: typo in --experts or a config)."""

    def __str__(self) -> str:
        return str(self.args[0])


def expert_class(name: str) -> Callable[..., Expert]:
    if name not in _REGISTRY:
        raise UnknownExpertError(f"unknown expert {name!r}; known experts: {', '.join(expert_names())}")
    factory = _REGISTRY[name]
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        factory = getattr(importlib.import_module(module), attr)
        _REGISTRY[name] = factory
    return factory


def options_from_config(name: str, config: dict[str, Any]) -> dict[str, Any]:
    """Constructor options that rebuild an expert from the config a FeatureStore recorded.

    New videos (an index over a user's folder) must be extracted exactly like the
    training features; the store's `info(expert)["config"]` says how they were made.
    """
    accepted = inspect.signature(expert_class(name)).parameters
    # device / batch size are the new machine's business; `weights` records a package name, not a path
    skip = ("device", "batch_size", "weights")
    return {k: v for k, v in config.items() if k in accepted and k not in skip}


def get_expert(name: str, **options: Any) -> Expert:
    """Build the expert registered as `name` with its options (e.g. rate=2.0)."""
    return expert_class(name)(**options)


def extract_features(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """See `videotext.data.experts.extract.extract_features`."""
    from videotext.data.experts.extract import extract_features as run  # extract imports this package: a cycle at the top

    return run(*args, **kwargs)


__all__ = [
    "AudioExpert", "Expert", "ExpertOutput", "FrameExpert", "SpeechExpert",
    "expert_class", "expert_names", "extract_features", "get_expert", "options_from_config", "register_expert",
]
