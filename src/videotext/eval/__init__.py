"""Evaluation: the one retrieval metric (`retrieval_metrics`), the relevance its protocols build, and reports."""
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
from videotext.eval.retrieval import aggregate_seeds, format_mean_std, format_table, retrieval_metrics, retrieval_metrics_both

__all__ = [
    "Relevance",
    "aggregate_seeds",
    "as_relevance",
    "clip_sentence_relevance",
    "dataset_caption_relevance",
    "format_mean_std",
    "format_table",
    "invert_relevance",
    "msrvtt_1ka_relevance",
    "multi_caption_relevance",
    "one_to_one_relevance",
    "paragraph_video_relevance",
    "relevance_from_ids",
    "retrieval_metrics",
    "retrieval_metrics_both",
]
