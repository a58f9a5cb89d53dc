"""Experts by name: `get_expert(name, **options)` builds the expert registered as `name`.

A built-in expert is registered as a "module:Class" path and imported on first use, so
using the motion expert never imports timm; `register_expert` adds one (a class, a factory
or such a path).
"""
from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable

from videotext.data.experts.base import Expert
from videotext.errors import VideoTextError

_REGISTRY: dict[str, str | Callable[..., Expert]] = {
    "appearance": "videotext.data.experts.appearance:AppearanceExpert",
    "motion": "videotext.data.experts.motion:MotionExpert",
    "audio": "videotext.data.experts.audio:LogMelExpert",
    "words": "videotext.data.experts.words:GloveWordsExpert",
    "clip": "videotext.data.experts.clip:CLIPExpert",
    "layout": "videotext.data.experts.layout:LayoutExpert",
    "speech": "videotext.data.experts.words:SpeechWordsExpert",
    "ocr": "videotext.data.experts.words:OcrWordsExpert",
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
