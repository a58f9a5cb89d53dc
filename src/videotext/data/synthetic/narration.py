"""A noisy "narration" track for synthetic videos: the HowTo100M stand-in.

Instructional-video speech is only loosely tied to the pixels (MMT §4.1: "captions are
naturally noisy, and often do not describe the visual content accurately or are
temporally misaligned with it"; Frozen §3.3). Each event of a synthetic video gets one
spoken line that names its object and action in casual words ("okay so the red circle
um goes left yeah"), shifted in time by up to ± `jitter` seconds, with 30–50 % of its
words filler; some lines talk about something else entirely ("don't forget to
subscribe") or about an object that is not in the video. The lines are the video's
`speech` segments; deterministic per (seed, video id).
"""
from __future__ import annotations

import math
import random
from typing import Sequence

from videotext.data.schema import Segment
from videotext.data.synthetic.vocab import ACTION_PHRASES, COLOURS, SHAPES

FILLERS = ("so", "um", "uh", "okay", "now", "like", "yeah", "basically", "just",
           "here", "we", "see", "actually", "well", "alright", "and", "this")
UNRELATED = ("don't forget to subscribe", "thanks for watching everybody", "let me grab my coffee",
             "I bought this at the store last week", "hit the like button", "my cat is sleeping",
             "it is raining outside today", "see you in the next one", "check the link below")
JITTER_S = 1.5  # ± seconds of misalignment (a few seconds relative to 6 s videos)
FILLER_RANGE = (0.3, 0.5)  # fraction of filler words in an on-topic line
UNRELATED_PROB = 0.2  # a line about something else entirely
WRONG_OBJECT_PROB = 0.15  # an on-topic line naming an object that is not shown


def _line(rng: random.Random, colour: str, shape: str, action: str) -> str:
    """One casual line about (colour, shape, action) with 30–50 % filler words."""
    content = f"the {colour} {shape} {rng.choice(ACTION_PHRASES[action])}".split()
    share = rng.uniform(*FILLER_RANGE)
    fillers = math.ceil(share * len(content) / (1 - share))  # ≥ share of the line, ≤ 50 %
    words = list(content)
    for _ in range(fillers):  # scatter fillers, keeping the content words in order
        words.insert(rng.randint(0, len(words)), rng.choice(FILLERS))
    return " ".join(words)


def narrate(spec, duration: float, seed: int, *, jitter: float = JITTER_S) -> list[Segment]:
    """The narration lines of one `VideoSpec`, sorted by start time, inside [0, duration]."""
    rng = random.Random(f"videotext-synth-narration:{seed}:{spec.id}")
    lines: list[Segment] = []
    for event in spec.events:
        obj = spec.objects[event.object]
        colour, shape = obj.colour, obj.shape
        if rng.random() < UNRELATED_PROB:
            text = rng.choice(UNRELATED)
        else:
            if rng.random() < WRONG_OBJECT_PROB:
                colour, shape = rng.choice(sorted(COLOURS)), rng.choice(list(SHAPES))
            text = _line(rng, colour, shape, event.action)
        length = event.end - event.start
        start = min(max(0.0, event.start + rng.uniform(-jitter, jitter)), max(0.0, duration - 0.5))
        end = min(duration, start + length)
        lines.append(Segment(round(start, 3), round(end, 3), text))
    return sorted(lines, key=lambda s: (s.start, s.end))


def narration_meta() -> dict[str, object]:
    """The manifest-level description of the narration noise (for reproducibility)."""
    return {"jitter_s": JITTER_S, "filler_fraction": list(FILLER_RANGE), "unrelated_prob": UNRELATED_PROB,
            "wrong_object_prob": WRONG_OBJECT_PROB}


def filler_share(text: str, fillers: Sequence[str] = FILLERS) -> float:
    """Fraction of a line's words that are filler."""
    words = text.split()
    return sum(w in fillers for w in words) / max(1, len(words))
