"""Evaluate a method on one split: encode everything, build the similarity, count ranks.

The protocol is the full multi-caption test (every caption a query; for video→text any
caption of the video is relevant); other protocols are other `relevant` mappings of the
one metric in `videotext.eval.retrieval`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch

from videotext.data.loaders import VideoFeatures
from videotext.data.schema import CaptionRef, VideoTextDataset
from videotext.errors import VideoTextError
from videotext.eval.relevance import dataset_caption_relevance, invert_relevance, multi_caption_relevance
from videotext.eval.rescore import (
    DSL_TEMPERATURE, QB_BETA, QB_TOP_K, RESCORERS, dual_softmax, querybank_norm, querybank_rescored_queries,
)
from videotext.eval.retrieval import retrieval_metrics
from videotext.embedding import Embedding
from videotext.encode import encode_texts, encode_videos
from videotext.runtime import full_precision

if TYPE_CHECKING:  # type hints only: evaluating a split needs no method module loaded
    from videotext.models.base import Method


@dataclass
class Encoded:
    """All embeddings of one split, with the ids that say what each row is."""

    text: Embedding  # one row per caption, in `refs` order
    video: Embedding  # one row per video, in `video_ids` order
    refs: list[CaptionRef]
    video_ids: list[str]


def encode_split(method: Method, dataset: VideoTextDataset, read_features: VideoFeatures,
                 batch_size: int = 256, device: Any = "cpu") -> Encoded:
    was_training = method.training
    method.eval()
    try:
        video_ids = [v.id for v in dataset]
        _, refs = dataset_caption_relevance(dataset, video_ids)
        text = encode_texts(method, [r.text for r in refs], batch_size, device)
        video = encode_videos(method, dataset, read_features, batch_size, device)
    finally:
        method.train(was_training)
    return Encoded(text, video, refs, video_ids)


@torch.inference_mode()
def score(method: Method, encoded: Encoded) -> torch.Tensor:
    """[n_captions, n_videos] similarity from the method's own scoring (fp32, autocast off)."""
    device = next(iter(encoded.text.values())).device if isinstance(encoded.text, dict) else encoded.text.device
    with full_precision(device):
        return method.similarity(encoded.text, encoded.video).float()


def evaluate_encoded(method: Method, encoded: Encoded, query_mask: np.ndarray | None = None,
                     return_ranks: bool = False, sims: torch.Tensor | None = None) -> dict[str, Any]:
    """Both directions of the multi-caption protocol, optionally on a subset of captions.

    `sims` ([n_captions, n_videos]) replaces the method's own scoring: a matrix already
    computed, or another score of the same embeddings (one MMT expert alone)."""
    sims = score(method, encoded) if sims is None else sims
    relevant = multi_caption_relevance([r.video_id for r in encoded.refs], encoded.video_ids)
    t2v = retrieval_metrics(sims, relevant, query_mask=query_mask, return_ranks=return_ranks)
    inverse = invert_relevance(relevant, len(encoded.video_ids))
    video_mask = None
    if query_mask is not None:  # v2t over the videos whose captions are kept
        kept_videos = {encoded.refs[i].video_id for i in np.flatnonzero(query_mask)}
        video_mask = np.array([v in kept_videos for v in encoded.video_ids])
    v2t = retrieval_metrics(sims.T, inverse, query_mask=video_mask, return_ranks=return_ranks)
    result: dict[str, Any] = {}
    if return_ranks:
        (t2v, t2v_ranks), (v2t, v2t_ranks) = t2v, v2t
        result["ranks"] = {"t2v": t2v_ranks, "v2t": v2t_ranks}
    result.update({"t2v": t2v, "v2t": v2t, "n_videos": len(encoded.video_ids), "n_captions": len(encoded.refs)})
    return result


def metric_directions(metrics: dict[str, Any]) -> dict[str, Any]:
    """The per-direction metric dicts of an evaluation (t2v, v2t, par2vid, …), without ranks
    and without the re-scored figures ("rescored", `rescored_metrics`)."""
    return {k: v for k, v in metrics.items() if isinstance(v, dict) and k not in ("ranks", "rescored")}


def caption_texts(dataset: VideoTextDataset) -> list[str]:
    """Every caption of a split, in the multi-caption protocol's query order (a QB-Norm querybank)."""
    _, refs = dataset_caption_relevance(dataset, [v.id for v in dataset])
    return [r.text for r in refs]


def querybank_similarity(method: Method, encoded: Encoded, querybank: Sequence[str],
                         batch_size: int = 256, device: Any = "cpu") -> torch.Tensor:
    """[n_bank, n_videos]: the querybank's captions, encoded by `method`, scored against the split's videos."""
    was_training = method.training
    method.eval()
    try:
        bank = encode_texts(method, list(querybank), batch_size, device)
    finally:
        method.train(was_training)
    return score(method, Encoded(bank, encoded.video, [], encoded.video_ids))


def rescored_metrics(encoded: Encoded, sims: torch.Tensor, name: str, bank_sims: torch.Tensor | None = None,
                     ) -> dict[str, Any]:
    """The multi-caption metrics of `sims` re-scored by `name` (`videotext.eval.rescore.RESCORERS`),
    with their labels and the information the re-scoring used.

    dsl: t2v ranks ``dual_softmax(sims)`` (softmax over all test captions), v2t ranks
    ``dual_softmax(sims.T)`` (over all test videos). qbnorm: t2v only, with `bank_sims`
    ([n_bank, n_videos], `querybank_similarity`); its t2v adds "rescored_queries", how many
    test captions had an activated top-1 (the others keep their raw scores)."""
    spec = RESCORERS[name]
    relevant = multi_caption_relevance([r.video_id for r in encoded.refs], encoded.video_ids)
    n_captions, n_videos = len(encoded.refs), len(encoded.video_ids)
    out: dict[str, Any] = {"uses": spec.uses_for(n_captions, n_videos), "reference": spec.reference}
    if name == "dsl":
        out["settings"] = {"temperature": DSL_TEMPERATURE}
        out["t2v"] = retrieval_metrics(dual_softmax(sims), relevant)
        out["v2t"] = retrieval_metrics(dual_softmax(sims.T), invert_relevance(relevant, n_videos))
        out["labels"] = {"t2v": spec.label("t2v", n_captions), "v2t": spec.label("v2t", n_videos)}
    elif name == "qbnorm":
        if bank_sims is None:
            raise VideoTextError("--rescore qbnorm: needs a querybank (the training captions)")
        out["settings"] = {"beta": QB_BETA, "dynamic": True, "k": QB_TOP_K, "bank_size": int(bank_sims.shape[0])}
        out["t2v"] = retrieval_metrics(querybank_norm(sims, bank_sims), relevant)
        out["t2v"]["rescored_queries"] = int(querybank_rescored_queries(sims, bank_sims).sum())
        out["labels"] = {"t2v": f"{spec.label('t2v', n_captions, int(bank_sims.shape[0]))}; "
                                f"{out['t2v']['rescored_queries']} of {n_captions} queries re-scored"}
    else:
        raise VideoTextError(f"--rescore {name}: unknown (known: {', '.join(RESCORERS)})")
    return out


def order_sensitive_mask(dataset: VideoTextDataset, encoded: Encoded) -> np.ndarray:
    """[n_captions] True where the caption's video is marked `order_sensitive` (another video
    shows the same events in another order: only temporal modelling can tell them apart)."""
    return np.array([bool(dataset[r.video_id].meta.get("order_sensitive")) for r in encoded.refs], dtype=bool)


def _event_sequence(video: Any) -> tuple | None:
    """(colour, shape, action) of each `meta.events` entry in time order, or None without events."""
    events = video.meta.get("events")
    if not events:
        return None
    ordered = sorted(events, key=lambda e: (e.get("start", 0.0), e.get("end", 0.0)))
    return tuple((e.get("colour"), e.get("shape"), e.get("action")) for e in ordered)


def order_twin_pairs(dataset: VideoTextDataset, encoded: Encoded) -> list[tuple[int, int, int]]:
    """(caption row, its video's column, twin column) for every caption whose video has an
    *order twin* in the split: a video with the same events (`meta.events`) in another order."""
    columns = {v: i for i, v in enumerate(encoded.video_ids)}
    sequences = {v: _event_sequence(dataset[v]) for v in encoded.video_ids}
    by_bag: dict[tuple, list[str]] = {}
    for video_id, sequence in sequences.items():
        if sequence is not None:
            by_bag.setdefault(tuple(sorted(sequence)), []).append(video_id)
    pairs = []
    for row, ref in enumerate(encoded.refs):
        sequence = sequences.get(ref.video_id)
        if sequence is None:
            continue
        for twin in by_bag[tuple(sorted(sequence))]:
            if sequences[twin] != sequence:
                pairs.append((row, columns[ref.video_id], columns[twin]))
    return pairs


def order_twin_accuracy(sims: torch.Tensor, pairs: Sequence[tuple[int, int, int]]) -> float:
    """% of (caption, twin) pairs where the caption scores its own video above the twin
    (chance 50 %; a model blind to order scores the two alike). Ties count as half."""
    rows, own, twin = (torch.tensor(column) for column in zip(*pairs))
    diff = sims[rows, own] - sims[rows, twin]
    return float(100.0 * ((diff > 0).float() + 0.5 * (diff == 0).float()).mean())


def evaluate(method: Method, dataset: VideoTextDataset, read_features: VideoFeatures,
             batch_size: int = 256, device: Any = "cpu", return_ranks: bool = False,
             rescore: Sequence[str] = (), querybank: Sequence[str] | None = None) -> dict[str, Any]:
    """Encode a split and compute t2v / v2t retrieval metrics (multi-caption protocol).

    When some (not all) of the split's videos are marked order-sensitive (the synthetic
    data marks them), the same metrics on those captions only are added as
    "t2v_order" / "v2t_order", and "t2v_order.twin_accuracy": how often such a caption
    scores its video above the video with the same events in another order (chance 50 %).

    `rescore` names inference-time re-scorings (`videotext.eval.rescore.RESCORERS`: "dsl",
    "qbnorm"); their figures go under "rescored" → name (`rescored_metrics`), beside the plain
    ones, which they never change. "qbnorm" needs `querybank`: the training captions.
    """
    encoded = encode_split(method, dataset, read_features, batch_size, device)
    sims = score(method, encoded)  # scored once for the full set, the order subset and the twins
    result = evaluate_encoded(method, encoded, return_ranks=return_ranks, sims=sims)
    mask = order_sensitive_mask(dataset, encoded)
    if mask.any() and not mask.all():
        subset = evaluate_encoded(method, encoded, query_mask=mask, sims=sims)
        result["t2v_order"], result["v2t_order"] = subset["t2v"], subset["v2t"]
        pairs = order_twin_pairs(dataset, encoded)
        if pairs:
            result["t2v_order"]["twin_accuracy"] = order_twin_accuracy(sims, pairs)
            result["t2v_order"]["twin_pairs"] = len(pairs)
    if rescore:
        bank_sims = None
        if "qbnorm" in rescore:
            if not querybank:
                raise VideoTextError("--rescore qbnorm: needs a querybank (the training captions); none given")
            bank_sims = querybank_similarity(method, encoded, querybank, batch_size, device)
        result["rescored"] = {name: rescored_metrics(encoded, sims, name, bank_sims) for name in rescore}
    return result
