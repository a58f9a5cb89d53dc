"""Search by what is said and by what is written on screen: timed text lines of an index's videos,
ranked by words and by meaning, and fused with what is shown.

An index folder built with speech holds `speech.jsonl` (per entry of the index, the transcript lines
that start inside it: start, end, text, source, confidence) and `speech.npy` (each line's sentence
vector); one built with on-screen text holds `written.jsonl` / `written.npy` the same way, each line
with its box. A line is ranked two ways, and the two rankings are fused:
- BM25 (Robertson & Zaragoza 2009; the `bm25s` library, Lucene's variant, k1 = 1.5, b = 0.75) over
  lowercase Snowball-stemmed words without English stop words: exact words, names, numbers;
- the cosine of sentence vectors from the shipped text encoder (all-MiniLM-L6-v2, mean pooled,
  the pooling it was trained with): paraphrases and recognition errors ("maker" for "baker").
Measured on 24 speaking videos with paraphrasing queries (bench/speech.py, docs/speech.md), the
fusion was never below either alone. An entry scores as its best line; its hit carries that line
and its time (`meta["said"]`, `meta["written"]` with its box).

Fusion, of the two line rankings and of the channels (`--by shown,said,written`), is one rule of
`search.fusion` for both levels: by default each ranking's scores standardised over the candidates and
summed, so a channel that cannot tell candidates apart does not reorder them; reciprocal rank fusion
(`fusion="rrf"`) is the other.
"""
from __future__ import annotations

import dataclasses
import functools
import io
import json
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from videotext.digests import read_verified
from videotext.errors import VideoTextError
from videotext.io import atomic_open, read_json_lines
from videotext.search.entries import Entry, Hit
from videotext.search.filters import entry_fields, matches, parse_filter
from videotext.search.query_encoder import SENTENCE_FOLDER, exported_encoder
from videotext.search.fusion import DEFAULT_FUSION, FUSION_DEPTH, fuse_scores

SPEECH_FILE = "speech.jsonl"
LINE_FILES = {"said": SPEECH_FILE, "written": "written.jsonl"}


@functools.lru_cache(maxsize=1)
def _stemmer() -> Any:
    try:
        import snowballstemmer
    except ImportError:
        raise VideoTextError("spoken search needs snowballstemmer and bm25s; they come with the 'speech' extra: "
                             "pip install 'videotext[speech]'") from None
    return snowballstemmer.stemmer("english")


def tokenize(texts: Sequence[str]) -> list[list[str]]:
    """BM25 terms of each text: lowercase words of 2+ characters, English stop words out, stemmed."""
    import bm25s

    stem = _stemmer().stemWords
    return bm25s.tokenize(list(texts), stopwords="en", stemmer=stem, return_ids=False, show_progress=False)


@dataclasses.dataclass
class SaidLine:
    """A transcript line of one index entry."""

    entry: str  # index entry id
    start: float
    end: float
    text: str
    source: str
    confidence: float | None = None
    box: list[float] | None = None  # on-screen text: its pixel box [x0, y0, x1, y1]


def lines_for_entries(entries: Sequence[Entry], transcripts: dict[str, Any]) -> list[SaidLine]:
    """The transcript lines of each entry: those of its video (`transcripts` by video id, each with
    `.lines`) that start inside the entry's span (a whole video: all of them)."""
    out = []
    for entry in entries:
        transcript = transcripts.get(entry.video_id)
        if transcript is None:
            continue
        low = entry.start or 0.0
        high = entry.end if entry.end is not None else float("inf")
        for line in transcript.lines:
            if low <= max(line.start, 0.0) < high:
                out.append(SaidLine(entry.id, line.start, line.end, line.text, line.source, line.confidence,
                                    getattr(line, "box", None)))
    return out


class SpokenIndex:
    """Timed text lines of an index's entries (transcripts: `channel="said"`; on-screen text:
    `"written"`), ranked by BM25 and by sentence vectors."""

    def __init__(self, lines: Sequence[SaidLine], vectors: np.ndarray | None = None, channel: str = "said"):
        if channel not in LINE_FILES:
            raise VideoTextError(f"line channel {channel!r}: expected one of {', '.join(LINE_FILES)}")
        self.channel = channel
        self.lines = list(lines)
        self._bm25 = None
        self.vectors = vectors  # [L, H] or None: computed on first use
        self.folder: Path | None = None  # the index folder it was loaded from
        self._exported: Any = None  # its exported sentence encoder, False when it has none
        if self.lines:
            import bm25s

            self._bm25 = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
            self._bm25.index(tokenize([line.text for line in self.lines]), show_progress=False)

    def __len__(self) -> int:
        return len(self.lines)

    def line_vectors(self) -> np.ndarray:
        """The sentence vector of every line [L, H]: those saved with the lines, else computed now."""
        if self.vectors is None or len(self.vectors) != len(self.lines):
            self.vectors = _torch_sentences().sentence_vectors([line.text for line in self.lines])
        return self.vectors

    def save(self, folder: str | os.PathLike) -> Path:
        """`speech.jsonl` and `speech.npy` (`written.*` for on-screen text) in the index folder (each
        written atomically)."""
        path = Path(folder) / LINE_FILES[self.channel]
        vectors = self.line_vectors() if self.lines else np.zeros((0, 0), np.float32)
        way_back = lines_way_back(self.channel, folder)
        with atomic_open(path.with_suffix(".npy"), "wb", way_back) as handle:
            np.save(handle, vectors)
        with atomic_open(path, "w", way_back, encoding="utf-8") as handle:
            for line in self.lines:
                record = dataclasses.asdict(line)
                if record["box"] is None:
                    del record["box"]
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        return path

    @classmethod
    def load(cls, folder: str | os.PathLike, channel: str = "said") -> "SpokenIndex | None":
        """The `channel` lines of an index folder; None when it was built without them."""
        path = Path(folder) / LINE_FILES[channel]
        if not path.is_file():
            return None
        way_back = lines_way_back(channel, folder)
        lines = [SaidLine(**record) for record in read_json_lines(path, way_back)]
        vectors_path = path.with_suffix(".npy")
        vectors = np.load(io.BytesIO(read_verified(vectors_path, way_back))) if vectors_path.is_file() else None
        spoken = cls(lines, vectors, channel)
        spoken.folder = Path(folder)
        return spoken

    def query_vector(self, query: str) -> np.ndarray:
        """The sentence vector of `query` [H]: through the sentence encoder exported into the index
        folder when it has one (no torch), else the shipped encoder itself."""
        if self._exported is None:
            self._exported = (exported_encoder(self.folder, SENTENCE_FOLDER) if self.folder else None) or False
        return self._exported.encode([query])[0] if self._exported else _torch_sentences().query_vector(query)

    def bm25_scores(self, query: str) -> np.ndarray:
        """BM25 score of every line for `query` [L] (0 where no query term occurs)."""
        if self._bm25 is None:
            return np.zeros(0, np.float32)
        terms = tokenize([query])[0]
        if not terms:
            return np.zeros(len(self.lines), np.float32)
        return np.asarray(self._bm25.get_scores(terms), dtype=np.float32)

    def line_ranking(self, query: str, fusion: str = DEFAULT_FUSION) -> np.ndarray:
        """Line rows best first [L]. The candidates are the FUSION_DEPTH best lines by BM25 (lines with a
        query word) and by sentence-vector cosine; they come first, ordered by the fusion of the two
        (`search.fusion`), the other lines after them by cosine. `last_scores` [L] holds each row's
        fused score (the lowest candidate's outside the candidates)."""
        if not self.lines:
            self.last_scores = np.zeros(0)
            return np.zeros(0, np.int64)
        bm25 = self.bm25_scores(query).astype(np.float64)  # [L]
        cosine = (self.line_vectors() @ self.query_vector(query)).astype(np.float64)  # [L]
        worded = np.flatnonzero(bm25 > 0)
        candidates = np.union1d(worded[np.argsort(-bm25[worded], kind="stable")[:FUSION_DEPTH]],
                                np.argsort(-cosine, kind="stable")[:FUSION_DEPTH])
        # both scores are known for every line; under rrf a line without a query word gets no BM25 vote
        known = bm25[candidates] > 0 if fusion == "rrf" else np.ones(len(candidates), bool)
        fused = np.full(len(self.lines), -np.inf)
        fused[candidates] = fuse_scores([bm25[candidates], cosine[candidates]],
                                        [known, np.ones(len(candidates), bool)], fusion)
        order = np.lexsort((-cosine, -fused))
        self.last_scores = np.maximum(fused, fused[candidates].min())  # the others score as the last candidate
        return order

    def search(self, query: str, entry_of: Callable[[str], Entry | None], k: int = 10,
               where: str | None = None, fusion: str = DEFAULT_FUSION) -> list[Hit]:
        """Entries ranked by their best line (`line_ranking`); each hit's score is that line's fused
        score and its meta[channel] that line: {"text", "start", "end", "source", "confidence"}, and
        "box" for on-screen text.
        `entry_of(id)` is the index's entry (None: no longer in the index)."""
        if k < 1:
            raise VideoTextError(f"k must be at least 1, got {k}")
        tree = parse_filter(where) if where else None
        best: dict[str, int] = {}
        found: dict[str, Entry] = {}
        left_out: set[str] = set()  # not in the index, or filtered out
        for row in self.line_ranking(query, fusion).tolist():
            entry_id = self.lines[row].entry
            if entry_id in best or entry_id in left_out:
                continue
            entry = entry_of(entry_id)
            if entry is None or (tree is not None and not matches(tree, entry_fields(entry))):
                left_out.add(entry_id)
                continue
            best[entry_id], found[entry_id] = row, entry
            if len(best) == k:
                break
        hits = []
        for rank, (entry_id, row) in enumerate(best.items(), 1):
            line, entry = self.lines[row], found[entry_id]
            matched = {"text": line.text, "start": line.start, "end": line.end, "source": line.source,
                       "confidence": line.confidence}
            if line.box is not None:
                matched["box"] = line.box
            hits.append(_hit(entry, float(self.last_scores[row]), rank, {**entry.meta, self.channel: matched}))
        return hits


def lines_way_back(channel: str, folder: str | os.PathLike) -> str:
    """What a user does about a damaged file of the `channel` lines of the index `folder`."""
    flag = "--speech" if channel == "said" else "--text"
    return (f"build the index again with {flag} (`videotext index build RUN SOURCE -o {folder} --update {flag}`: "
            f"the lines already read are reused)")


def _torch_sentences() -> Any:
    """`search.sentences`, the shipped sentence encoder in torch: for lines saved without vectors or
    an index folder without its exported encoder (a search otherwise never loads torch)."""
    from videotext.search import sentences  # torch: only where the exported encoder is missing

    return sentences


def _hit(entry: Entry, score: float, rank: int, meta: dict) -> Hit:
    return Hit(id=entry.id, path=entry.path, start=entry.start, end=entry.end, video_id=entry.video_id,
               meta=meta, score=score, rank=rank)
