"""Transcripts of a folder of videos, stored beside its features: subtitles first, else recognition.

`transcribe(items, folder)` gives each video its timed lines and keeps them in
`<folder>/transcripts.jsonl`, one JSON line per video:
``{"key", "path", "size", "mtime_ns", "source", "lines": [{"start", "end", "text", "source", "confidence"}]}``.

Where the lines come from, in order:
1. a `.srt` / `.vtt` file with the video's stem beside it;
2. a text subtitle stream inside the video (mov_text, subrip, webvtt, ass);
3. speech recognition of its audio (decoded by PyAV, 16 kHz mono) with the engine asked for.

The job resumes: a video whose line is there (same file size and modification time, same engine
for recognized text) is not done again; lines are appended as each video finishes, so a killed
run loses at most the video it was on (a torn last line is skipped on reading). A video without an
audio stream, with no speech in it, or with a subtitle file that cannot be read gets one line in
`failures.jsonl` (a broken subtitle file then falls back to recognition); the job goes on.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from videotext.data.schema import Segment
from videotext.data.speech.recognize import SAMPLE_RATE, Line, SpeechEngine, speech_engine
from videotext.data.speech.subtitles import SubtitleError, read_subtitles, sidecar_subtitles
from videotext.data.video import read_audio
from videotext.digests import json_line
from videotext.errors import VideoDecodeError, VideoTextError
from videotext.io import FailureLog, append_json_line, atomic_open, file_lock, read_json_lines

TRANSCRIPTS = "transcripts.jsonl"
SUBTITLE = "subtitle"


@dataclass
class Transcript:
    """One video's timed lines and where they came from."""

    key: str
    lines: list[Line] = field(default_factory=list)
    source: str = ""  # "subtitle", "asr:ENGINE:MODEL", or "" when there is no audio to recognize
    path: str | None = None
    size: int | None = None
    mtime_ns: int | None = None

    def segments(self) -> list[Segment]:
        """The lines as `Video.speech` segments (what the words / speech experts read)."""
        return [Segment(line.start, line.end, line.text) for line in self.lines]

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "path": self.path, "size": self.size, "mtime_ns": self.mtime_ns,
                "source": self.source, "lines": [line.to_dict() for line in self.lines]}

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> "Transcript":
        lines = [Line(float(x["start"]), float(x["end"]), str(x["text"]), str(x.get("source", record["source"])),
                      x.get("confidence"), x.get("box")) for x in record.get("lines", [])]
        return cls(record["key"], lines, record.get("source", ""), record.get("path"), record.get("size"),
                   record.get("mtime_ns"))


def way_back(folder: str | os.PathLike) -> str:
    """What a user does about a damaged `transcripts.jsonl` or `onscreen.jsonl` in `folder`."""
    return (f"delete it and run the same command again: the videos are transcribed (or read on screen) anew into "
            f"{folder}, the other features kept")


class TranscriptStore:
    """`transcripts.jsonl` of a feature folder (or another `name`: `onscreen.jsonl` holds the text read
    on screen, `videotext.data.ocr.reader`): the latest line of each video wins."""

    def __init__(self, folder: str | os.PathLike, name: str = TRANSCRIPTS):
        self.folder = Path(folder)
        self.path = self.folder / name
        self._by_key: dict[str, Transcript] | None = None

    def all(self) -> dict[str, Transcript]:
        if self._by_key is None:
            self._by_key = {}
            for record in read_json_lines(self.path, way_back(self.folder)):
                if isinstance(record, dict) and "key" in record:
                    self._by_key[record["key"]] = Transcript.from_dict(record)
        return self._by_key

    def get(self, key: str) -> Transcript | None:
        return self.all().get(key)

    def add(self, transcript: Transcript) -> None:
        """Append one video's transcript (flushed to disk before returning)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with file_lock(self.folder / f".{self.path.name}.lock"):
            append_json_line(self.path, transcript.to_dict(), sync=True)
        self.all()[transcript.key] = transcript

    def compact(self) -> None:
        """Rewrite the file with one line per video (atomically)."""
        if not self.path.exists():
            return
        with file_lock(self.folder / f".{self.path.name}.lock"), atomic_open(self.path, "wb") as out:
            for transcript in self.all().values():
                out.write(json_line(transcript.to_dict()))


def file_stamp(path: Path) -> tuple[int | None, int | None]:
    """(size, modification time in ns) of a file, what a stored transcript is checked against; (None, None) if absent."""
    try:
        stat = path.stat()
    except OSError:
        return None, None
    return stat.st_size, stat.st_mtime_ns


def is_current(transcript: Transcript | None, path: Path, source: str | None) -> bool:
    """True when `transcript` was made from this very file (size, mtime) and, for recognized or read
    text, with the engine `source` (None: any engine will do)."""
    if transcript is None:
        return False
    if (transcript.size, transcript.mtime_ns) != file_stamp(path):
        return False
    if transcript.source.startswith(("asr:", "ocr:")) and source is not None:
        return transcript.source == source
    return True


def subtitles_of(path: Path) -> tuple[list[Line], list[str]]:
    """Subtitle lines of a video (its sidecar file, else a stream inside) and the problems met."""
    problems = []
    sidecar = sidecar_subtitles(path)
    for candidate in ([sidecar] if sidecar else []) + [path]:
        try:
            segments = read_subtitles(candidate)
        except SubtitleError as exc:
            problems.append(str(exc))
            continue
        if segments:
            return [Line(s.start, s.end, s.sentence, SUBTITLE) for s in segments], problems
    return [], problems


def transcribe_video(key: str, path: Path, engine: Callable[[], SpeechEngine | None]) -> tuple[Transcript, list[str]]:
    """One video's transcript (subtitles, else recognition by `engine()`; None: subtitles only) and
    the problems to record. Raises VideoDecodeError when its audio cannot be decoded."""
    size, mtime_ns = file_stamp(path)
    lines, problems = subtitles_of(path)
    if lines:
        return Transcript(key, lines, SUBTITLE, str(path), size, mtime_ns), problems
    recognizer = engine()
    if recognizer is None:
        return Transcript(key, [], "", str(path), size, mtime_ns), problems
    waveform = read_audio(path, SAMPLE_RATE)  # [N] mono float32
    if len(waveform) == 0:
        return Transcript(key, [], "", str(path), size, mtime_ns), problems + [f"{path}: no audio stream to recognize"]
    lines = recognizer.recognize(waveform)
    if not lines:
        problems.append(f"{path}: no speech found in {len(waveform) / SAMPLE_RATE:.1f} s of audio "
                        f"({recognizer.source}, voice activity detection)")
    return Transcript(key, lines, recognizer.source, str(path), size, mtime_ns), problems


def transcribe(items: Sequence[tuple[str, str | os.PathLike]], folder: str | os.PathLike, engine: str = "whisper",
               model: str | None = None, recognize: bool = True, progress: bool = True,
               failures: FailureLog | str | os.PathLike | None = None, threads: int = 0) -> dict[str, Any]:
    """Transcripts of every (key, media file) into `folder`/transcripts.jsonl (see the module
    docstring); `recognize=False` reads subtitles only. Returns a summary: counts per source,
    failures, seconds. A speech model that cannot be loaded raises its one error (WeightsError,
    SpeechError) before any video is recognized."""
    import time

    from tqdm.auto import tqdm

    started = time.time()
    store = TranscriptStore(folder)
    log = failures if isinstance(failures, FailureLog) else FailureLog(failures or Path(folder) / "failures.jsonl")
    loaded: list[SpeechEngine] = []

    def get_engine() -> SpeechEngine | None:
        if not recognize:
            return None
        if not loaded:
            loaded.append(speech_engine(engine, model, threads))
        return loaded[0]

    wanted_source = None if not recognize else _expected_source(engine, model)
    counts = {"videos": len(items), "kept": 0, "subtitle": 0, "asr": 0, "none": 0, "failed": 0}
    todo = [(k, Path(p)) for k, p in items if not is_current(store.get(k), Path(p), wanted_source)]
    counts["kept"] = len(items) - len(todo)
    with tqdm(todo, desc="transcribe", unit="video", disable=not progress or not todo, dynamic_ncols=True) as bar:
        for key, path in bar:
            try:
                transcript, problems = transcribe_video(key, path, get_engine)
            except (VideoDecodeError, SubtitleError) as exc:
                log.record(key, exc, path=str(path), stage="transcribe", experts=["transcript"])
                counts["failed"] += 1
                continue
            for problem in problems:
                log.record(key, problem, path=str(path), stage="transcribe", experts=["transcript"])
            if not problems:
                log.resolve(key, "transcript")
            store.add(transcript)
            kind = "subtitle" if transcript.source == SUBTITLE else "asr" if transcript.lines else "none"
            counts[kind] += 1
            bar.set_postfix(failed=counts["failed"], refresh=False)
    store.compact()
    log.compact()
    return {**counts, "seconds": time.time() - started, "transcripts": str(store.path), "failures": str(log.path)}


def _expected_source(engine: str, model: str | None) -> str | None:
    """The source a recognized transcript of `engine`/`model` records (None: cannot tell without loading)."""
    if engine == "pocketsphinx":
        return "asr:pocketsphinx:en-us"
    if engine == "whisper":
        name = model or "tiny.en"
        return f"asr:whisper:{Path(name).name if Path(name).expanduser().is_dir() else name}"
    raise VideoTextError(f"unknown speech engine {engine!r}; expected whisper or pocketsphinx")
