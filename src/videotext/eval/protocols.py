"""The evaluation of one split, chosen by the protocol the method declares.

A method says which protocol its embeddings need (`Method.protocol`, a name here); the
trainer (validation, selection, the one test evaluation), `videotext eval` and the
benchmarks call `evaluate_split`, so a method never imports evaluation code and evaluation
never special-cases a method by name.

    multi_caption  every caption a query, t2v and v2t (`videotext.eval.evaluate.evaluate`)
    hierarchy      multi_caption + paragraph↔video and sentence↔clip (COOT, `videotext.eval.hierarchy`)

Every protocol returns {"t2v", "v2t", ..., "n_videos", ...}: each dict value is a direction
of metrics that `train.select_metric` can name (e.g. "par2vid.R1", "selection.r1_sum").
"""
from __future__ import annotations

from typing import Any, Callable

from videotext.errors import VideoTextError
from videotext.eval.evaluate import evaluate
from videotext.eval.hierarchy import evaluate_with_hierarchy

#: protocol name → function(method, dataset, read_features, device=...) → metrics
PROTOCOLS: dict[str, Callable[..., dict[str, Any]]] = {
    "multi_caption": evaluate,
    "hierarchy": evaluate_with_hierarchy,
}


def evaluate_split(method: Any, dataset: Any, read_features: Any, device: Any = "cpu") -> dict[str, Any]:
    """Metrics of `dataset` (one split) under the method's protocol."""
    protocol = getattr(method, "protocol", "multi_caption")
    if protocol not in PROTOCOLS:
        raise VideoTextError(f"method {getattr(method, 'name', type(method).__name__)!r}: unknown evaluation "
                             f"protocol {protocol!r} (known: {sorted(PROTOCOLS)})")
    return PROTOCOLS[protocol](method, dataset, read_features, device=device)
