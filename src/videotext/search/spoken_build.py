"""The text parts of an index: transcripts of its videos into `speech.jsonl` / `speech.npy`, and the
text read on screen into `written.jsonl` / `written.npy` (`build_written_index`).

`build_spoken_index(index, out, features_dir)` runs after the visual index is written (a build or an
update): every indexed video gets its transcript (`videotext.data.speech.transcripts`: subtitles,
else recognition; kept beside the features and resumed, so an update recognizes only new or changed
videos), and the lines of each entry are saved in the index folder for `search.spoken`.

What is said never stops what is shown from being indexed: a video without audio or speech, or with
a broken subtitle file, is a line in the feature folder's failures.jsonl; a speech model that cannot
be loaded (missing, or its sha256 not the pinned release's) is one line there and one warning, and
the index stays searchable by what is shown.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from videotext.data.ocr.engines import DEFAULT_ENGINE, OcrError
from videotext.data.ocr.reader import ONSCREEN, read_onscreen
from videotext.data.speech.recognize import SpeechError
from videotext.data.speech.transcripts import TranscriptStore, transcribe
from videotext.io import FailureLog
from videotext.search.sentences import export_sentences, sentence_vectors
from videotext.search.spoken import SaidLine, SpokenIndex, lines_for_entries
from videotext.weights import WeightsError


def build_spoken_index(index: Any, out: str | os.PathLike, features_dir: str | os.PathLike, engine: str = "whisper",
                       model: str | None = None, recognize: bool = True, progress: bool = True) -> dict[str, Any]:
    """Transcribe the videos of `index` into `features_dir` and save their lines in the index folder
    `out`. Returns the transcription summary plus `lines` (saved) or `error` (the model's)."""
    entries = index.entries()
    videos = _videos_of(entries)
    log = FailureLog(Path(features_dir) / "failures.jsonl")
    try:
        summary = transcribe(sorted(videos.items()), features_dir, engine, model, recognize=recognize,
                             progress=progress, failures=log)
    except (WeightsError, SpeechError) as exc:
        log.record(f"speech model {model or 'default'}", exc, stage="transcribe", experts=["transcript"])
        warnings.warn(f"speech not indexed: {exc}", stacklevel=2)
        return {"error": str(exc), "failures": str(log.path)}
    spoken = save_lines(lines_for_entries(entries, TranscriptStore(features_dir).all()), "said", out)
    return {**summary, "lines": len(spoken)}


def save_lines(lines: list[SaidLine], channel: str, out: str | os.PathLike) -> SpokenIndex:
    """`lines` of `channel` with their sentence vectors into the index folder `out`, and the sentence
    encoder beside them, so a query against them needs no torch."""
    spoken = SpokenIndex(lines, sentence_vectors([line.text for line in lines]) if lines else None, channel)
    spoken.save(out)
    export_sentences(out)
    return spoken


def _videos_of(entries: list) -> dict[str, str]:
    """Each indexed video's file, by video id (clips of one video share it)."""
    videos: dict[str, str] = {}
    for entry in entries:
        if entry.path:
            videos.setdefault(entry.video_id, entry.path)
    return dict(sorted(videos.items()))


def build_written_index(index: Any, out: str | os.PathLike, features_dir: str | os.PathLike,
                        engine: str = DEFAULT_ENGINE, progress: bool = True, threads: int = 1) -> dict[str, Any]:
    """Read the on-screen text of the videos of `index` into `features_dir` (`data.ocr.reader`, resumed)
    and save the lines of each entry in the index folder `out`. Returns the reading summary plus
    `lines` (saved) or `error` (an engine that cannot be loaded: one line in failures.jsonl, one warning,
    the index stays searchable by what is shown)."""
    entries = index.entries()
    log = FailureLog(Path(features_dir) / "failures.jsonl")
    try:
        summary = read_onscreen(sorted(_videos_of(entries).items()), features_dir, engine, progress=progress,
                                failures=log, threads=threads)
    except (WeightsError, OcrError) as exc:
        log.record(f"OCR engine {engine}", exc, stage="ocr", experts=["onscreen"])
        warnings.warn(f"on-screen text not indexed: {exc}", stacklevel=2)
        return {"error": str(exc), "failures": str(log.path)}
    written = save_lines(lines_for_entries(entries, TranscriptStore(features_dir, ONSCREEN).all()), "written", out)
    return {**summary, "lines": len(written)}
