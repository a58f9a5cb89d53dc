"""Benchmark: reading the text on screen of a one-hour screen recording, and OCR frames per second.

    python bench/onscreen_scale.py [--minutes 60] [--out bench/results/onscreen_scale.json]

1. A screen recording of `--minutes` (960x540, 2 frames per second, H.264): a slide (a title and three
   lines, DejaVu fonts) that changes every 30 s, with a mouse pointer moving over it all the time.
   It is written once into a temporary folder, then `read_onscreen` (what `index build --text` runs)
   reads it with the default engine: frames sampled once a second, read where the picture changed.
   Reported: wall seconds, frames sampled and read, lines stored, and the share of the slides' words
   found in the stored lines.
2. Frames per second of each engine on 960x540 slide frames, on 1 and on 2 threads.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
BOLD = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"
WORDS = ("energy entropy temperature pressure volume system process heat work cycle engine gas ideal law "
         "first second third state change reversible equilibrium constant molecule particle motion model").split()


def slide(index: int, rng: np.random.Generator) -> tuple[np.ndarray, list[str]]:
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", (960, 540), (250, 250, 246))
    draw = ImageDraw.Draw(image)
    title = f"Lecture {index + 1}: " + " ".join(rng.choice(WORDS, 2, replace=False)).title()
    lines = [title] + [" ".join(rng.choice(WORDS, int(rng.integers(3, 6)), replace=False)).capitalize()
                       for _ in range(3)]
    draw.text((60, 50), title, fill=(20, 30, 80), font=ImageFont.truetype(BOLD, 40))
    for i, line in enumerate(lines[1:]):
        draw.text((90, 170 + 90 * i), "- " + line, fill=(30, 30, 30), font=ImageFont.truetype(FONT, 30))
    return np.asarray(image), lines


def write_recording(path: Path, minutes: float, seed: int = 0) -> list[str]:
    """Encode the recording frame by frame (never whole in memory); returns every slide's lines."""
    import av

    rng = np.random.default_rng(seed)
    fps, seconds = 2, int(minutes * 60)
    shown: list[str] = []
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = 960, 540, "yuv420p"
        stream.options = {"preset": "veryfast", "crf": "28"}
        picture = None
        for i in range(seconds * fps):
            if i % (30 * fps) == 0:
                picture, lines = slide(i // (30 * fps), rng)
                shown += lines
            frame = picture.copy()
            x, y = int(480 + 400 * np.sin(i / 7)), int(270 + 230 * np.cos(i / 11))  # the pointer
            frame[y:y + 14, x:x + 9] = 0
            out.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        out.mux(stream.encode(None))
    return shown


def words(texts) -> list[str]:
    return [w for text in texts for w in re.findall(r"[a-z0-9]+", text.lower())]


def engine_fps(seconds: float = 20.0) -> dict:
    from videotext.data.ocr.engines import ENGINES, ocr_engine

    rng = np.random.default_rng(1)
    frames = [slide(i, rng)[0] for i in range(8)]
    out = {}
    for name in ENGINES:
        for threads in (1, 2):
            engine = ocr_engine(name, threads=threads)
            engine.read(frames[0])
            started, count = time.perf_counter(), 0
            while time.perf_counter() - started < seconds / 4:
                engine.read(frames[count % len(frames)])
                count += 1
            out[f"{name} {threads} thread{'s' if threads > 1 else ''}"] = count / (time.perf_counter() - started)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "onscreen_scale.json")
    args = parser.parse_args()
    from videotext.data.ocr.reader import ONSCREEN, read_onscreen
    from videotext.data.speech.transcripts import TranscriptStore

    results = {"engine_frames_per_second": engine_fps()}
    print("frames per second:", {k: round(v, 2) for k, v in results["engine_frames_per_second"].items()}, flush=True)
    with tempfile.TemporaryDirectory() as folder:
        video = Path(folder) / "recording.mp4"
        started = time.perf_counter()
        shown = write_recording(video, args.minutes)
        results["write_seconds"] = time.perf_counter() - started
        started = time.perf_counter()
        summary = read_onscreen([("recording", video)], Path(folder) / "features", progress=False)
        results["read_seconds"] = time.perf_counter() - started
        lines = TranscriptStore(Path(folder) / "features", ONSCREEN).get("recording").lines
        found, drawn = set(words(line.text for line in lines)), words(shown)
        results.update(minutes=args.minutes, samples=summary["samples"], frames_read=summary["read"],
                       lines=len(lines), slide_word_recall=sum(w in found for w in drawn) / len(drawn))
    print(f"{args.minutes:.0f} min recording: read in {results['read_seconds']:.0f} s "
          f"({results['samples']} frames sampled, {results['frames_read']} read, {results['lines']} lines, "
          f"{100 * results['slide_word_recall']:.1f} % of the slides' words found)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
