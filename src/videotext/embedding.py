"""What `encode_text` / `encode_video` return, and helpers over it.

A leaf module (no model imports) so that evaluation code and `models.base` both use it
without importing each other.
"""
from __future__ import annotations

from typing import Iterable, Union

import torch

# An embedding is usually one L2-normalised tensor [N, D]; methods with richer embeddings
# (MMT: per-expert vectors + mixture weights) use a dict of tensors with N first.
Embedding = Union[torch.Tensor, dict[str, torch.Tensor]]


def concat_embeddings(parts: Iterable[Embedding]) -> Embedding:
    """Concatenate per-batch embeddings along the first axis (tensors or dicts of tensors)."""
    parts = list(parts)
    if not parts:
        raise ValueError("no embeddings to concatenate")
    if isinstance(parts[0], dict):
        return {key: torch.cat([p[key] for p in parts]) for key in parts[0]}
    return torch.cat(parts)


def embedding_to(embedding: Embedding, device: torch.device | str) -> Embedding:
    if isinstance(embedding, dict):
        return {k: v.to(device) for k, v in embedding.items()}
    return embedding.to(device)
