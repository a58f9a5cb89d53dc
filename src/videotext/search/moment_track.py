"""The moment track of an index folder: one vector per step of every indexed video, what a search for
moments scores a query against (`eval.span_finder` turns the scores into spans).

A step's vector is the run's index vector of the clip of a few steps centred on that step (the
`--window` encoding of that clip, `search.moment_build`; how many: `context_steps`), L2-normalised,
so the query's cosine with it is comparable with its cosine with whole videos and windows. It lives
in `INDEX/moments/`:

    track.json            format, version, dim, the weights the vectors came from (`source`), the
                          steps of each vector's clip (`context_steps`; absent: 1), the file names
                          of this generation, and per video [id, first row, rows, hash]
    vectors-<gen>.f16     [S, D] float16, the videos' steps one after the other (raw, row-major)
    times-<gen>.f32       [S, 2] float32, each step's start and end in seconds

Written in a new generation each time (data files first, `track.json` last, atomically), so a folder
killed mid-write keeps the previous track whole; read through memory maps, so opening costs nothing
and a query reads only the rows of the videos it scores (a 1-hour video at one step a second and 256
dimensions: 1.8 MB). The folder is carried with the vectors when a build saves the index again.
This module reads and writes the files; it imports neither torch nor the model.
"""
from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from videotext.errors import DataFormatError, VideoTextError
from videotext.io import write_json

TRACK_FOLDER = "moments"  # in an index folder
TRACK_FILE = "track.json"
FORMAT = "videotext-moments"
VERSION = 1
REMEDY = "build the index again (`videotext index build ... --update` writes the track anew)"


class MomentTrack:
    """The track of one index folder, opened read-only (`open_track`)."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        path = self.folder / TRACK_FILE
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
            if info.get("format") != FORMAT or int(info.get("version", 0)) > VERSION:
                raise DataFormatError(path, "format", f"is not a {FORMAT} file of version <= {VERSION}; {REMEDY}")
            self.dim, self.steps, self.source = int(info["dim"]), int(info["steps"]), info.get("source")
            self.context_steps = int(info.get("context_steps", 1))  # tracks written before it was kept: 1
            self.rows: dict[str, tuple[int, int]] = {}  # video id -> (first row, rows)
            self.hashes: dict[str, str | None] = {}
            for video_id, first, count, digest in info["videos"]:
                self.rows[str(video_id)] = (int(first), int(count))
                self.hashes[str(video_id)] = digest
            vectors, times = self.folder / info["vectors"], self.folder / info["times"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataFormatError(path, None, f"cannot be read ({exc}); {REMEDY}") from None
        self.vectors = _memmap(vectors, np.float16, (self.steps, self.dim))  # [S, D]
        self.times = _memmap(times, np.float32, (self.steps, 2))  # [S, 2]

    def __contains__(self, video_id: object) -> bool:
        return video_id in self.rows

    def __len__(self) -> int:
        return len(self.rows)

    def video(self, video_id: str) -> tuple[np.ndarray, np.ndarray]:
        """One video's step vectors [T, D] (float16, a view of the file) and step times [T, 2]."""
        first, count = self.rows[video_id]
        return self.vectors[first : first + count], self.times[first : first + count]

    def scores(self, video_id: str, query: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The cosine of the unit query vector [D] with each step of one video: scores [T] (float32),
        step starts [T] and ends [T] in seconds."""
        vectors, times = self.video(video_id)
        scores = np.asarray(vectors, dtype=np.float32) @ np.asarray(query, dtype=np.float32)
        return scores, np.asarray(times[:, 0], np.float64), np.asarray(times[:, 1], np.float64)


def check_context_steps(context_steps: int) -> None:
    """One clear error for a track context that is not an odd number of steps >= 1."""
    if isinstance(context_steps, bool) or not isinstance(context_steps, int) or context_steps < 1 \
            or context_steps % 2 == 0:
        raise VideoTextError(f"moment track: the context must be an odd number of steps >= 1 (--moment-context), "
                             f"got {context_steps!r}")


def _memmap(path: Path, dtype: Any, shape: tuple[int, int]) -> np.ndarray:
    """A read-only map of a raw array file of `shape`; one error naming it when it is short or absent."""
    expected = int(np.prod(shape)) * np.dtype(dtype).itemsize
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise DataFormatError(path, None, f"missing ({exc.strerror}); {REMEDY}") from None
    if size != expected:
        raise DataFormatError(path, None, f"holds {size} bytes where {shape} {np.dtype(dtype).name} needs "
                                          f"{expected}; {REMEDY}")
    if not expected:
        return np.zeros(shape, dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=shape)


def open_track(index_folder: str | os.PathLike) -> MomentTrack | None:
    """The moment track of an index folder, or None when it keeps none."""
    folder = Path(index_folder) / TRACK_FOLDER
    return MomentTrack(folder) if (folder / TRACK_FILE).is_file() else None


def remove_track(index_folder: str | os.PathLike) -> None:
    """Delete an index folder's track (its vectors no longer match the index's)."""
    folder = Path(index_folder) / TRACK_FOLDER
    (folder / TRACK_FILE).unlink(missing_ok=True)
    for stale in _data_files(folder):
        stale.unlink(missing_ok=True)


class TrackWriter:
    """Writes a new generation of an index folder's track, one video after another, in bounded memory:
    `add` appends a video's rows to the data files, `finish` writes `track.json` naming them and
    removes the older generations. Use as a context manager: an exception leaves the old track."""

    def __init__(self, index_folder: str | os.PathLike, dim: int, source: str | None, context_steps: int = 1):
        self.folder = Path(index_folder) / TRACK_FOLDER
        self.folder.mkdir(parents=True, exist_ok=True)
        self.dim, self.source, self.context_steps = int(dim), source, int(context_steps)
        generation = uuid.uuid4().hex[:12]
        self.names = {"vectors": f"vectors-{generation}.f16", "times": f"times-{generation}.f32"}
        self._vectors = open(self.folder / self.names["vectors"], "wb")
        self._times = open(self.folder / self.names["times"], "wb")
        self.videos: list[list[Any]] = []
        self.steps = 0

    def __enter__(self) -> "TrackWriter":
        return self

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        self._vectors.close()
        self._times.close()
        if kind is not None:  # failed: this generation's files go, the old track stays
            for name in self.names.values():
                (self.folder / name).unlink(missing_ok=True)

    def add(self, video_id: str, vectors: np.ndarray, times: np.ndarray, digest: str | None = None) -> None:
        """One video's step vectors [T, D] (unit rows, any float dtype) and step times [T, 2]."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float16)
        times = np.ascontiguousarray(times, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim or times.shape != (len(vectors), 2):
            raise ValueError(f"{video_id}: step vectors {vectors.shape} and times {times.shape} do not match "
                             f"[T, {self.dim}] and [T, 2]")
        self._vectors.write(vectors.tobytes())
        self._times.write(times.tobytes())
        self.videos.append([video_id, self.steps, len(vectors), digest])
        self.steps += len(vectors)

    def finish(self) -> None:
        """Flush the data files and publish them (`track.json`, atomically), then drop older generations."""
        for handle in (self._vectors, self._times):
            handle.flush()
            os.fsync(handle.fileno())
        write_json(self.folder / TRACK_FILE, {"format": FORMAT, "version": VERSION, "dim": self.dim,
                                              "steps": self.steps, "source": self.source,
                                              "context_steps": self.context_steps, **self.names,
                                              "videos": self.videos}, indent=None)
        for stale in _data_files(self.folder):
            if stale.name not in self.names.values():
                stale.unlink(missing_ok=True)


def _data_files(folder: Path) -> Iterator[Path]:
    yield from folder.glob("vectors-*.f16")
    yield from folder.glob("times-*.f32")
