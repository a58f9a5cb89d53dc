"""Retrieval losses on a ``[B_text, B_video]`` similarity matrix, selectable by name.

``LOSSES`` maps a config name to a loss function; every function takes ``sims`` and an
optional ``positives`` mask and returns ``{"loss", "t2v", "v2t"}``. See
`videotext.losses.contrastive` for the shared conventions.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

from torch import Tensor

from videotext.config import ConfigError
from videotext.losses.contrastive import check_similarity, info_nce
from videotext.losses.ranking import hardest_negative_triplet, max_margin_ranking

LossFn = Callable[..., dict[str, Tensor]]

LOSSES: dict[str, LossFn] = {
    "infonce": info_nce,  # Frozen in Time eq. 2-3
    "max_margin": max_margin_ranking,  # MMT eq. 8
    "triplet": hardest_negative_triplet,  # Support-set eq. 1 (VSE++ hardest negative)
}


def contrastive_loss(name: str, sims: Tensor, **kwargs: Any) -> dict[str, Tensor]:
    """Compute the loss registered as ``name`` on ``sims``; options go to that loss.

    Raises ``ConfigError`` for an unknown name or an option the loss does not take.
    """
    if name not in LOSSES:
        raise ConfigError(f"unknown contrastive loss {name!r}; known: {sorted(LOSSES)}")
    fn = LOSSES[name]
    accepted = [p for p in inspect.signature(fn).parameters if p != "sims"]
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise ConfigError(f"contrastive loss {name!r}: unknown option(s) {unknown}; it takes {accepted}")
    return fn(sims, **kwargs)


__all__ = [
    "LOSSES",
    "check_similarity",
    "contrastive_loss",
    "hardest_negative_triplet",
    "info_nce",
    "max_margin_ranking",
]
