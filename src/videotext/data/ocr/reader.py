"""Text on screen of a folder of videos, stored beside its features as timed lines with boxes.

`read_onscreen(items, folder)` gives each video its on-screen text and keeps it in
`<folder>/onscreen.jsonl`, one JSON line per video in the transcript format
(`videotext.data.speech.transcripts`), each line with its box:
``{"key", "path", "size", "mtime_ns", "source": "ocr:ENGINE:MODEL",
   "lines": [{"start", "end", "text", "source", "confidence", "box": [x0, y0, x1, y1]}]}``.

Per video (`video_text`):
1. frames are sampled every `every` seconds (1 s: text on screen stays up for seconds), decoded in
   chunks so a long video never sits in memory whole;
2. a frame is read by the OCR engine only where the picture changed since the last frame read: some
   cell of an 8 x 8 grid over a 64 x 36 grey thumbnail differs by more than CHANGE grey levels on
   average (a caption appearing changes its cells; a static slide or studio shot is read once);
3. a line read at consecutive samples with the same words (lowercase letters and digits, at least
   MERGE_SIMILARITY alike, as OCR of one line varies from frame to frame) and overlapping boxes is one
   segment from its first sample to one step after its last; its text is the reading with the
   highest confidence, its box the union.

The job resumes like transcription: a video whose line is there (same file size and modification
time, same engine) is not read again; a video that cannot be decoded is one line in
`failures.jsonl` and the job goes on; a frame the engine fails on is skipped and counted
(`unreadable`); a video without text gets no lines and no failure.
"""
from __future__ import annotations

import difflib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from videotext.data.ocr.engines import DEFAULT_ENGINE, OcrEngine, TextBox, ocr_engine
from videotext.data.speech.recognize import Line
from videotext.data.speech.transcripts import Transcript, TranscriptStore, file_stamp, is_current
from videotext.data.video import probe, rate_times, read_frames
from videotext.errors import VideoDecodeError
from videotext.io import FailureLog

ONSCREEN = "onscreen.jsonl"
EVERY = 1.0  # seconds between sampled frames
CHANGE = 6.0  # grey levels (0-255): a grid cell that moved more than this on average is a change
GRID = 8
CHUNK = 32  # frames decoded at once
MERGE_SIMILARITY = 0.8  # difflib ratio of two readings of one line
MERGE_OVERLAP = 0.3  # intersection over union of their boxes


def _words(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def _iou(a: Sequence[float], b: Sequence[float]) -> float:
    width = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    height = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = width * height
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def thumbnail(frame: np.ndarray) -> np.ndarray:
    """64 x 36 grey thumbnail [36, 64] float32 of an RGB frame (area averages)."""
    from PIL import Image

    grey = Image.fromarray(frame).convert("L").resize((64, 36), Image.BOX)
    return np.asarray(grey, dtype=np.float32)


def changed(before: np.ndarray | None, after: np.ndarray, threshold: float = CHANGE) -> bool:
    """Whether some cell of a GRID x GRID grid differs by more than `threshold` grey levels on average."""
    if before is None:
        return True
    rows, cols = np.array_split(np.arange(after.shape[0]), GRID), np.array_split(np.arange(after.shape[1]), GRID)
    difference = np.abs(after - before)
    return any(difference[np.ix_(r, c)].mean() > threshold for r in rows for c in cols)


@dataclass(eq=False)  # compared by identity: two segments may read alike
class _Open:
    """A segment being followed: where and since when its line is on screen."""

    start: float
    last: float
    box: list[float]
    best: TextBox
    readings: int = 1
    words: str = ""


@dataclass
class _Segments:
    """Lines read at consecutive samples, merged into segments."""

    every: float
    open: list[_Open] = field(default_factory=list)
    done: list[Line] = field(default_factory=list)

    def add(self, at: float, boxes: list[TextBox], source: str) -> None:
        still = []
        for box in boxes:
            words = _words(box.text)
            if not words:
                continue
            match = next((o for o in self.open if o not in still and _iou(o.box, box.box) >= MERGE_OVERLAP
                          and difflib.SequenceMatcher(None, o.words, words).ratio() >= MERGE_SIMILARITY), None)
            if match is None:
                match = _Open(at, at, list(box.box), box, words=words)
            else:
                match.last, match.readings = at, match.readings + 1
                match.box = [min(match.box[0], box.box[0]), min(match.box[1], box.box[1]),
                             max(match.box[2], box.box[2]), max(match.box[3], box.box[3])]
                if box.confidence > match.best.confidence:
                    match.best, match.words = box, words
            still.append(match)
        for gone in [o for o in self.open if o not in still]:
            self.done.append(self._line(gone, source))
        self.open = still

    def close(self, source: str) -> list[Line]:
        self.done.extend(self._line(o, source) for o in self.open)
        self.open = []
        return sorted(self.done, key=lambda line: (line.start, line.box[1] if line.box else 0.0))

    def _line(self, segment: _Open, source: str) -> Line:
        start = max(0.0, segment.start - self.every / 2)  # the sample is the centre of its step
        return Line(start, segment.last + self.every / 2, segment.best.text, source, segment.best.confidence,
                    segment.box)


def video_text(path: str | Path, engine: OcrEngine, every: float = EVERY, change: float = CHANGE,
               progress: Callable[[int], None] | None = None) -> tuple[list[Line], dict[str, int]]:
    """The on-screen lines of one video and counts (`samples`; `read`: frames given to the engine;
    `unreadable`: those it failed on, skipped). Raises VideoDecodeError when it cannot be decoded."""
    info = probe(path)
    times = rate_times(max(info.duration, every), 1.0 / every)  # [T] step centres
    segments = _Segments(every)
    last_read, boxes, read, unreadable = None, [], 0, 0
    for first in range(0, len(times), CHUNK):
        frames = read_frames(path, times[first: first + CHUNK])  # [C, H, W, 3]
        for at, frame in zip(times[first: first + CHUNK], frames):
            small = thumbnail(frame)
            if changed(last_read, small, change):
                try:
                    boxes = engine.read(frame)
                except Exception:  # noqa: BLE001 - one frame the engine cannot read is skipped and counted
                    boxes, unreadable = [], unreadable + 1
                last_read, read = small, read + 1
            segments.add(float(at), boxes, engine.source)
        if progress is not None:
            progress(len(frames))
    return segments.close(engine.source), {"samples": len(times), "read": read, "unreadable": unreadable}


def read_onscreen(items: Sequence[tuple[str, str | Path]], folder: str | Path, engine: str = DEFAULT_ENGINE,
                  every: float = EVERY, progress: bool = True, failures: FailureLog | str | Path | None = None,
                  threads: int = 1) -> dict[str, Any]:
    """On-screen text of every (key, media file) into `folder`/onscreen.jsonl (module docstring).
    Returns counts (videos, kept, with text, without, failed, frames sampled and read) and seconds. An
    engine that cannot be loaded raises its one error (OcrError, WeightsError) before any video is read."""
    from tqdm.auto import tqdm

    started = time.time()
    store = TranscriptStore(folder, ONSCREEN)
    log = failures if isinstance(failures, FailureLog) else FailureLog(failures or Path(folder) / "failures.jsonl")
    todo = [(k, Path(p)) for k, p in items if not is_current(store.get(k), Path(p), None)
            or not store.get(k).source.startswith(f"ocr:{engine}:")]
    counts = {"videos": len(items), "kept": len(items) - len(todo), "text": 0, "none": 0, "failed": 0,
              "samples": 0, "read": 0, "unreadable": 0}
    if not todo:
        return {**counts, "seconds": time.time() - started, "onscreen": str(store.path), "failures": str(log.path)}
    reader = ocr_engine(engine, threads=threads)
    with tqdm(todo, desc="read on-screen text", unit="video", disable=not progress, dynamic_ncols=True) as bar:
        for key, path in bar:
            size, mtime_ns = file_stamp(path)
            try:
                lines, seen = video_text(path, reader, every)
            except VideoDecodeError as exc:
                log.record(key, exc, path=str(path), stage="ocr", experts=["onscreen"])
                counts["failed"] += 1
                continue
            log.resolve(key, "onscreen")
            store.add(Transcript(key, lines, reader.source, str(path), size, mtime_ns))
            counts["text" if lines else "none"] += 1
            for name in ("samples", "read", "unreadable"):
                counts[name] += seen[name]
            bar.set_postfix(read=counts["read"], failed=counts["failed"], refresh=False)
    store.compact()
    log.compact()
    return {**counts, "seconds": time.time() - started, "onscreen": str(store.path), "failures": str(log.path)}
