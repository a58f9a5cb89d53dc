"""Word error rate: (substitutions + deletions + insertions) / reference words, after normalising both.

Normalisation follows the usual ASR scoring practice (NIST sclite, Whisper's English normaliser in
spirit, kept small): lowercase, hyphens and slashes split words, punctuation dropped, a few spoken
forms of abbreviations and numbers up to 99 restored ("mr" -> "mister", "10" -> "ten"), so that
"Mr. Dashwood," and "mister dashwood" count as equal.
"""
from __future__ import annotations

import re
from typing import Sequence

SPOKEN = {"mr": "mister", "mrs": "missus", "dr": "doctor", "st": "saint", "ok": "okay"}
_PUNCTUATION = re.compile(r"[^\w\s']")
_UNITS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen " \
         "seventeen eighteen nineteen".split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def _spoken_number(word: str) -> list[str]:
    """A number 0-99 as its spoken words ("42" -> ["forty", "two"]); other words as they are."""
    if not word.isdigit() or int(word) > 99:
        return [word]
    value = int(word)
    if value < 20:
        return [_UNITS[value]]
    return [_TENS[value // 10]] + ([_UNITS[value % 10]] if value % 10 else [])


def normalize(text: str) -> list[str]:
    """Lowercase words of `text` without punctuation, abbreviations spelled out."""
    text = text.lower().replace("’", "'").replace("-", " ").replace("/", " ")
    words = _PUNCTUATION.sub(" ", text).split()
    spelled = [SPOKEN.get(w.strip("'"), w.strip("'")) for w in words if w.strip("'")]
    return [piece for word in spelled for piece in _spoken_number(word)]


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
