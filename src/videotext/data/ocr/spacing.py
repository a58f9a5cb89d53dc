"""Spaces that OCR dropped between words, put back.

PP-OCRv4's recogniser (trained mostly on Chinese text) often reads English without the spaces
between words ("Q32026revenue", "ExportPreferences"), which no word search can then find, and
writes some punctuation in its full-width forms ("f（x）"). The repairs, in order (`respace`):
- NFKC normalisation (full-width letters, digits and punctuation to their ASCII forms);
- `restore_spaces`: its CTC columns still place each character, and a gap between two characters
  wider than SPACE_GAP median character widths is a space (works where the font spaces words widely);
- `split_joined_words`: a run of letters and digits that is not a word of the GloVe 6B vocabulary
  (400 000 words in frequency order, shipped as the words expert's weights) is split into the most
  probable sequence of words under Zipf's law (cost of a word of rank r: log((r + 1) log N), as in
  the `wordninja` package), where every piece is among the MAX_RANK most frequent words and is a
  number, "a", "i" or at least two characters long; a run that does not split that way is kept as read.
"""
from __future__ import annotations

import functools
import math
import re
import unicodedata

import numpy as np

from videotext.data.experts.words import load_glove

SPACED = True  # also restore spaces in a line the recogniser spaced somewhere (bench/ocr.py, chosen on seed 0)
SPACE_GAP = 0.4  # a gap wider than this many median character widths is a space (bench/ocr.py, chosen on seed 0)
MAX_RANK = 50_000  # pieces of a split must be among this many most frequent GloVe words
MAX_PIECE = 24  # longest word tried as a piece
_RUN = re.compile(r"[A-Za-z0-9]+")


def restore_spaces(text: str, char_boxes: list, gap: float = SPACE_GAP, spaced: bool = SPACED) -> str:
    """`text` with a space inserted between characters whose boxes (`char_boxes` [len(text)] of four
    [x, y] corners, left to right) are further apart than `gap` median character widths. Where the
    boxes do not match the characters one to one, `text` is kept, and so is a line the recogniser
    already spaced unless `spaced`."""
    if gap <= 0 or len(char_boxes) != len(text) or len(text) < 2 or (" " in text and not spaced):
        return text
    boxes = np.asarray(char_boxes, dtype=np.float64)  # [N, 4, 2]
    left, right = boxes[:, :, 0].min(1), boxes[:, :, 0].max(1)
    width = float(np.median(right - left))
    if width <= 0:
        return text
    out = [text[0]]
    for i in range(1, len(text)):
        if text[i] != " " and text[i - 1] != " " and left[i] - right[i - 1] > gap * width:
            out.append(" ")
        out.append(text[i])
    return "".join(out)


@functools.lru_cache(maxsize=1)
def _word_costs() -> tuple[set[str], dict[str, float]]:
    """(the whole GloVe vocabulary, Zipf cost of each of its MAX_RANK most frequent plain words)."""
    vocabulary, _ = load_glove()
    log_n = math.log(len(vocabulary))
    costs = {}
    for word, rank in vocabulary.items():
        if rank < MAX_RANK and (len(word) >= 2 or word.isdigit() or word in ("a", "i")) and word.isalnum() \
                and word.isascii():
            costs[word] = math.log((rank + 1) * log_n)
    return set(vocabulary), costs


def split_run(run: str) -> list[str] | None:
    """The pieces of one letters-and-digits run (case kept), or None to keep it whole."""
    vocabulary, costs = _word_costs()
    lower = run.lower()
    if len(lower) < 4 or lower in vocabulary:
        return None
    best = [0.0] + [math.inf] * len(lower)  # best[i]: cost of the best split of lower[:i]
    back = [0] * (len(lower) + 1)
    for end in range(1, len(lower) + 1):
        for start in range(max(0, end - MAX_PIECE), end):
            cost = costs.get(lower[start:end])
            if cost is not None and best[start] + cost < best[end]:
                best[end], back[end] = best[start] + cost, start
    if math.isinf(best[-1]):
        return None
    pieces, end = [], len(lower)
    while end > 0:
        pieces.append(run[back[end]:end])
        end = back[end]
    return pieces[::-1] if len(pieces) > 1 else None


def split_joined_words(text: str) -> str:
    """`text` with each run of letters and digits that is not a word split into words (module doc)."""
    def replace(match: re.Match) -> str:
        pieces = split_run(match.group(0))
        return " ".join(pieces) if pieces else match.group(0)

    return _RUN.sub(replace, text)


SOLID_RANK = 300  # a piece of one or two letters is a word on its own only among this many most frequent


def _solid(piece: str, costs: dict[str, float], solid_cost: float) -> bool:
    """A piece that is a word by itself: a frequent word, and a very frequent one if one or two letters."""
    cost = costs.get(piece.lower())
    return not piece.isalpha() or (cost is not None and (len(piece) > 2 or cost <= solid_cost))


def merge_fragments(text: str) -> str:
    """`text` with broken words rejoined: each run of letter pieces around pieces that are not words by
    themselves (`_solid`) or are three letters or fewer is joined and split again into the most probable
    words (`split_run`), where that works ("Votes m in is ter ele ct io n" -> "Votes minister election");
    "in the" stays, being the best split of "inthe"."""
    vocabulary, costs = _word_costs()
    solid_cost = math.log((SOLID_RANK + 1) * math.log(len(vocabulary)))
    pieces = text.split(" ")
    weak = [not _solid(p, costs, solid_cost) or (p.isalpha() and len(p) <= 3) for p in pieces]  # short: maybe a piece
    near = [p.isalpha() and (weak[i] or (i > 0 and weak[i - 1]) or (i + 1 < len(pieces) and weak[i + 1]))
            for i, p in enumerate(pieces)]
    out, i = [], 0
    while i < len(pieces):
        if not near[i]:
            out.append(pieces[i])
            i += 1
            continue
        j = i
        while j < len(pieces) and near[j]:
            j += 1
        joined = "".join(pieces[i:j])
        split = split_run(joined) if j - i > 1 else None
        if split is None and j - i > 1 and joined.lower() in costs:
            split = [joined]
        out.extend(split if split is not None else pieces[i:j])
        i = j
    return " ".join(out)


def respace(text: str, char_boxes: list | None = None, gap: float = SPACE_GAP, spaced: bool = SPACED,
            merge: bool = True, split: bool = True) -> str:
    """Every repair of the module, in order: NFKC, `restore_spaces` (where `char_boxes` are given),
    `merge_fragments`, `split_joined_words`."""
    text = unicodedata.normalize("NFKC", text)
    if char_boxes is not None and len(char_boxes) == len(text):
        text = restore_spaces(text, char_boxes, gap, spaced)
    if merge:
        text = merge_fragments(text)
    return split_joined_words(text) if split else text
