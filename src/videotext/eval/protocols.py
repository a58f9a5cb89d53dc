"""The evaluation of one split, chosen by the protocol the method declares.

A method says which protocol its embeddings need (`Method.protocol`, a name here); the
trainer (validation, selection, the one test evaluation), `videotext eval` and the
benchmarks call `evaluate_split`, so a method never imports evaluation code and evaluation
never special-cases a method by name.

    multi_caption  every caption a query, t2v and v2t (`videotext.eval.evaluate.evaluate`)
    hierarchy      multi_caption + paragraph↔video and sentence↔clip (COOT, `videotext.eval.hierarchy`)
    moments        a moment method's spans per query, R1/R5@IoU, mIoU, mAP, HIT@1 (`videotext.eval.moment_eval`)

Every protocol returns {"t2v", "v2t", ..., "n_videos", ...}: each dict value is a direction
of metrics that `train.select_metric` can name (e.g. "par2vid.R1", "selection.r1_sum").

Inference-time re-scorings (`videotext.eval.rescore`: dual softmax, QB-Norm) are offered by
the protocols in `RESCORING` only; they add "rescored" beside the plain metrics.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from videotext.errors import VideoTextError
from videotext.eval.evaluate import evaluate
from videotext.eval.hierarchy import evaluate_with_hierarchy
from videotext.eval.moment_eval import evaluate_moments
from videotext.eval.rescore import parse_rescore

#: protocol name → function(method, dataset, read_features, device=...) → metrics
PROTOCOLS: dict[str, Callable[..., dict[str, Any]]] = {
    "multi_caption": evaluate,
    "hierarchy": evaluate_with_hierarchy,
    "moments": evaluate_moments,
}
#: protocols that take `rescore=` / `querybank=` (`videotext.eval.evaluate.evaluate`)
RESCORING = ("multi_caption",)


def evaluate_split(method: Any, dataset: Any, read_features: Any, device: Any = "cpu",
                   rescore: Sequence[str] = (), querybank: Sequence[str] | None = None) -> dict[str, Any]:
    """Metrics of `dataset` (one split) under the method's protocol; `rescore` adds the named
    re-scored figures (a protocol in `RESCORING` only; "qbnorm" needs `querybank`, the training captions)."""
    protocol = getattr(method, "protocol", "multi_caption")
    name = getattr(method, "name", type(method).__name__)
    if protocol not in PROTOCOLS:
        raise VideoTextError(f"method {name!r}: unknown evaluation protocol {protocol!r} (known: {sorted(PROTOCOLS)})")
    rescore = parse_rescore(rescore)
    if not rescore:
        return PROTOCOLS[protocol](method, dataset, read_features, device=device)
    if protocol not in RESCORING:
        raise VideoTextError(f"--rescore {','.join(rescore)}: method {name!r} is evaluated by the {protocol!r} "
                             f"protocol, which has no re-scoring (only {', '.join(RESCORING)})")
    return PROTOCOLS[protocol](method, dataset, read_features, device=device, rescore=rescore, querybank=querybank)
