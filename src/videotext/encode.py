"""Encode texts and videos with a method, batched: the one encoding path of evaluation, search and
the inference API.

Texts are batched in order of length (less padding per batch) and come back in the order given;
videos come in the order of the dataset. Embeddings are gathered on the CPU as fp32, also under
bf16 autocast.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import torch

from videotext.data.loaders import VideoFeatures
from videotext.data.schema import VideoTextDataset
from videotext.embedding import Embedding, concat_embeddings, embedding_to
from videotext.runtime import to_device, to_float32

if TYPE_CHECKING:  # type hints only
    from videotext.models.base import Method


@torch.inference_mode()
def encode_texts(method: Method, texts: Sequence[str], batch_size: int = 256, device: Any = "cpu") -> Embedding:
    """Batched text embeddings on `device`, gathered on the CPU (fp32 also under bf16 autocast).

    Texts are batched in order of length (less padding per batch), rows come back in
    the order given."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    parts = []
    for start in range(0, len(texts), batch_size):
        batch = method.prepare_text([texts[i] for i in order[start : start + batch_size]])
        batch = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}
        parts.append(to_float32(embedding_to(method.encode_text(batch), "cpu")))
    if not parts:
        return concat_embeddings(parts)
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order)] = torch.arange(len(order))
    embedding = concat_embeddings(parts)
    return {k: v[inverse] for k, v in embedding.items()} if isinstance(embedding, dict) else embedding[inverse]


@torch.inference_mode()
def encode_videos(method: Method, dataset: VideoTextDataset, read_features: VideoFeatures,
                  batch_size: int = 256, device: Any = "cpu") -> Embedding:
    parts = []
    for batch in method.video_batches(dataset, read_features, batch_size):
        batch = to_device(batch, device)
        parts.append(to_float32(embedding_to(method.encode_video(batch), "cpu")))
    return concat_embeddings(parts)
