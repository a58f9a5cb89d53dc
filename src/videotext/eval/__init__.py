"""Evaluation: the one retrieval metric (`retrieval_metrics`), the relevance its protocols build, and reports.

The public names load their module at first use, so a module of this package that needs none of them
(the span finder, which a search imports) costs no more than itself."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_RELEVANCE = ("Relevance", "as_relevance", "clip_sentence_relevance", "dataset_caption_relevance",
              "invert_relevance", "msrvtt_1ka_relevance", "multi_caption_relevance", "one_to_one_relevance",
              "paragraph_video_relevance", "relevance_from_ids")
_RETRIEVAL = ("aggregate_seeds", "format_mean_std", "format_table", "retrieval_metrics", "retrieval_metrics_both")
_HOMES = {**{name: "videotext.eval.relevance" for name in _RELEVANCE},
          **{name: "videotext.eval.retrieval" for name in _RETRIEVAL}}
__all__ = sorted(_HOMES)

if TYPE_CHECKING:  # what type checkers and editors see of the names loaded at first use
    from videotext.eval.relevance import (
        Relevance,
        as_relevance,
        clip_sentence_relevance,
        dataset_caption_relevance,
        invert_relevance,
        msrvtt_1ka_relevance,
        multi_caption_relevance,
        one_to_one_relevance,
        paragraph_video_relevance,
        relevance_from_ids,
    )
    from videotext.eval.retrieval import (
        aggregate_seeds, format_mean_std, format_table, retrieval_metrics, retrieval_metrics_both,
    )


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'videotext.eval' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
