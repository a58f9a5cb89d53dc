"""Word error rate: (substitutions + deletions + insertions) / reference words, after normalising both.

Normalisation follows the usual ASR scoring practice (NIST sclite, Whisper's English normaliser in
spirit, kept small): lowercase, hyphens and slashes split words, punctuation dropped, a few spoken
forms of abbreviations restored ("mr" -> "mister"), so that "Mr. Dashwood," and "mister dashwood"
count as equal.
"""
from __future__ import annotations

import re
from typing import Sequence

SPOKEN = {"mr": "mister", "mrs": "missus", "dr": "doctor", "st": "saint", "ok": "okay"}
_PUNCTUATION = re.compile(r"[^\w\s']")


def normalize(text: str) -> list[str]:
    """Lowercase words of `text` without punctuation, abbreviations spelled out."""
    text = text.lower().replace("’", "'").replace("-", " ").replace("/", " ")
    words = _PUNCTUATION.sub(" ", text).split()
    return [SPOKEN.get(w.strip("'"), w.strip("'")) for w in words if w.strip("'")]


def edit_distance(reference: Sequence[str], hypothesis: Sequence[str]) -> int:
    """Fewest word substitutions, deletions and insertions turning `reference` into `hypothesis`."""
    previous = list(range(len(hypothesis) + 1))
    for i, word in enumerate(reference, 1):
        current = [i] + [0] * len(hypothesis)
        for j, other in enumerate(hypothesis, 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (word != other))
        previous = current
    return previous[-1]


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(word errors, reference words) of one utterance, both normalised."""
    ref, hyp = normalize(reference), normalize(hypothesis)
    return edit_distance(ref, hyp), len(ref)


def word_error_rate(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Corpus WER in [0, ∞): all errors over all reference words (not a mean of per-utterance rates)."""
    if len(references) != len(hypotheses):
        raise ValueError(f"{len(references)} references but {len(hypotheses)} hypotheses")
    errors = words = 0
    for reference, hypothesis in zip(references, hypotheses):
        e, n = word_errors(reference, hypothesis)
        errors, words = errors + e, words + n
    if words == 0:
        raise ValueError("the references hold no word")
    return errors / words
