"""The sentence encoder of the spoken and written lines, in torch: the shipped all-MiniLM-L6-v2, mean
pooled (the pooling it was trained with), L2-normalised. The build writes each line's vector and
exports this encoder into the index folder (`search.query_export.export_sentence_encoder`), so a
search reads the lines and encodes its query without torch (`search.spoken`)."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from videotext.runtime import keeps_threads
from videotext.search.query_export import export_sentence_encoder
from videotext.text.encoder import HFTextEncoder

MAX_LINE_TOKENS = 128  # word pieces of a line the sentence encoder reads (MiniLM was trained on 128)


@functools.lru_cache(maxsize=1)
def sentence_encoder() -> Any:
    """The shipped sentence encoder, loaded once per process."""
    return HFTextEncoder(pooling="mean", freeze=True, max_tokens=MAX_LINE_TOKENS).eval()


def sentence_vectors(texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """L2-normalised sentence vectors of `texts` from the shipped text encoder [N, 384] float32."""
    encoder = sentence_encoder()
    out = []
    with torch.inference_mode():
        for first in range(0, len(texts), batch_size):
            batch = encoder.tokenize(list(texts[first : first + batch_size]))
            pooled = encoder.pool(encoder.token_states(batch), batch["attention_mask"])  # [B, H]
            out.append(torch.nn.functional.normalize(pooled.float(), dim=-1).numpy())
    return np.concatenate(out) if out else np.zeros((0, 0), np.float32)


def query_vector(query: str) -> np.ndarray:
    """The sentence vector of one query [H], on one thread: a few tokens gain nothing from more, and
    with both cores busy two threads took 700 ms where one took 14 ms (MiniLM, 2-core EPYC)."""

    def on_one_thread() -> np.ndarray:
        torch.set_num_threads(1)
        return sentence_vectors([query])[0]

    return keeps_threads(on_one_thread)()


def export_sentences(index_folder: str | Path) -> Path:
    """The sentence encoder into the index folder, so queries against its lines need no torch."""
    return export_sentence_encoder(index_folder, sentence_encoder())
