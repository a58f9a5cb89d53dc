"""Videos that speak: Debian's espeak-ng says a sentence, muxed as AAC under unrelated footage.

Used by the speech tests and bench/spoken_search.py. SENTENCES are 24 different topics, each with a
QUERY that paraphrases its key words (other word forms, other order, words left out), so a spoken
search has to find the one video that says it.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np

ESPEAK = shutil.which("espeak-ng")
ESPEAK_MISSING = "espeak-ng is not installed: `make install` installs it from Debian (apt, as root)"

SENTENCES = [
    ("The baker pulls fresh bread out of the hot oven every morning.", "baker taking bread from an oven"),
    ("Our team replaced the broken bicycle chain with a new one.", "fixing a bicycle chain"),
    ("The volcano erupted and covered the village in grey ash.", "village covered with volcanic ash"),
    ("She plants tomatoes and carrots in the garden behind the house.", "planting carrots and tomatoes"),
    ("The pilot explained how the airplane lands in strong wind.", "airplane landing in wind"),
    ("Penguins slide on the ice to escape from the hungry seal.", "seal hunting penguins on ice"),
    ("This recipe needs two eggs, sugar and a cup of flour.", "recipe with eggs and flour"),
    ("The orchestra played a symphony by Beethoven last night.", "Beethoven symphony concert"),
    ("Thunderstorms will bring heavy rain to the coast tomorrow.", "heavy rain on the coast"),
    ("The museum opened a new exhibition about ancient Egypt.", "Egypt exhibition at the museum"),
    ("He painted the wooden fence bright blue on Saturday.", "painting a blue fence"),
    ("Our dog loves to chase the red ball across the park.", "dog chasing a ball in the park"),
    ("The farmer milks the cows before the sun rises.", "milking cows at sunrise"),
    ("Astronauts repaired the telescope during a long space walk.", "astronauts fixing a telescope"),
    ("The chess champion won the final game in twenty moves.", "chess final won"),
    ("Divers found an old shipwreck near the coral reef.", "shipwreck by a coral reef"),
    ("The students built a small robot that can climb stairs.", "robot climbing stairs"),
    ("A strong earthquake shook the city early on Monday.", "earthquake in the city"),
    ("The firefighters rescued a kitten from the tall tree.", "kitten rescued from a tree"),
    ("Wash the vegetables and cut them into thin slices.", "slicing washed vegetables"),
    ("The river flooded the fields after the snow melted.", "flooded fields by the river"),
    ("My grandmother knits warm sweaters for the whole family.", "grandmother knitting sweaters"),
    ("The goalkeeper stopped the penalty in the last minute.", "goalkeeper saves a penalty"),
    ("Bees carry pollen from flower to flower all summer.", "bees carrying pollen"),
]


def espeak(text: str, voice: str = "en-us", words_per_minute: int = 150) -> tuple[np.ndarray, int]:
    """(mono float32 samples [N] in [-1, 1], sample rate) of espeak-ng saying `text`."""
    if ESPEAK is None:
        raise RuntimeError(ESPEAK_MISSING)
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "speech.wav"
        subprocess.run([ESPEAK, "-v", voice, "-s", str(words_per_minute), "-w", str(out), text], check=True,
                       capture_output=True)
        with wave.open(str(out)) as handle:
            rate = handle.getframerate()
            samples = np.frombuffer(handle.readframes(handle.getnframes()), dtype="<i2")
    return samples.astype(np.float32) / 32768.0, rate


def footage(seconds: float, seed: int, fps: int = 5, size: int = 64) -> np.ndarray:
    """Unrelated moving footage: a coloured square drifting over noise, [T, size, size, 3] uint8."""
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 60, size=(max(1, int(round(seconds * fps))), size, size, 3), dtype=np.uint8)
    colour = rng.integers(80, 256, size=3, dtype=np.uint8)
    for t, frame in enumerate(frames):
        x = (t * 3 + seed * 7) % (size - 16)
        frame[20:36, x : x + 16] = colour
    return frames


def speaking_video(path: Path, text: str | None, seed: int = 0, lead: float = 1.0, tail: float = 1.0,
                   fps: int = 5) -> Path:
    """An mp4 (H.264 + AAC) of footage with `text` spoken after `lead` seconds (None: silence)."""
    from videotext.data.video_write import write_video

    speech, rate = espeak(text) if text else (np.zeros(2 * 22050, np.float32), 22050)
    audio = np.concatenate([np.zeros(int(lead * rate), np.float32), speech, np.zeros(int(tail * rate), np.float32)])
    return write_video(path, footage(len(audio) / rate, seed, fps), fps, audio=audio, sample_rate=rate)


def silent_footage(path: Path, seconds: float = 3.0, seed: int = 0, fps: int = 5) -> Path:
    """An mp4 without any audio stream."""
    from videotext.data.video_write import write_video

    return write_video(path, footage(seconds, seed, fps), fps)
