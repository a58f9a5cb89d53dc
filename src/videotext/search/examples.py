"""Query by example: an image, a video or a time range of one as the query, named on the
command line as `PATH` or `PATH@START-END` (seconds, e.g. `clip.mp4@30-40`).

`parse_example` reads that spelling, `check_example` opens the file (one error naming it when
it is missing, not an image or video, or undecodable, or when the range falls outside it) and
`example_dataset` makes the one-video dataset (plus the clip window, for a range) that
`LoadedModel.encode_example` extracts and encodes as `index build` does. Uploads over HTTP
are written to a temporary file first (`save_upload`), never into the index's folder.
"""
from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from videotext.data.schema import Video, VideoTextDataset
from videotext.data.video import VideoInfo, probe
from videotext.errors import VideoTextError

RANGE = re.compile(r"^(?P<path>.+)@(?P<start>\d+(?:\.\d+)?)-(?P<end>\d+(?:\.\d+)?)$")
MAX_UPLOAD_BYTES = 64 * 1024 * 1024  # an upload's limit (a minute of 1080p H.264 is ~40 MB)


@dataclass(frozen=True)
class Example:
    """A query example: a media file, and the seconds [start, end) of it when a range is given."""

    path: Path
    start: float | None = None
    end: float | None = None

    @property
    def spelled(self) -> str:
        return f"{self.path}@{self.start:g}-{self.end:g}" if self.start is not None else str(self.path)


def parse_example(spec: str | os.PathLike | Example) -> Example:
    """`PATH` or `PATH@START-END` as an Example (a file that exists under the whole name wins)."""
    if isinstance(spec, Example):
        return spec
    text = os.fspath(spec)
    match = RANGE.match(text)
    if match is None or Path(text).exists():
        return Example(Path(text))
    start, end = float(match["start"]), float(match["end"])
    if end <= start:
        raise VideoTextError(f"{text}: the range ends at {end:g} s, not after its start {start:g} s")
    return Example(Path(match["path"]), start, end)


def check_example(example: Example) -> VideoInfo:
    """The example file's metadata; a VideoTextError naming the file when it cannot serve as one."""
    path = example.path
    if not path.is_file():
        raise VideoTextError(f"{path}: no such file (expected an image or a video)")
    info = probe(path)  # VideoDecodeError naming the file: not a video or image, truncated, corrupt
    if example.start is not None:
        if info.duration <= 0:
            raise VideoTextError(f"{example.spelled}: {path.name} is a still image; a time range needs a video")
        if example.start >= info.duration:
            raise VideoTextError(f"{example.spelled}: the range starts after the video's end ({info.duration:.2f} s)")
    return info


def example_dataset(example: Example, info: VideoInfo) -> tuple[VideoTextDataset, tuple[float, float] | None]:
    """The example as a one-video dataset (id: the file's stem) and its window, if a range."""
    video = Video(id=example.path.stem or "example", path=str(example.path.resolve()),
                  duration=info.duration or None, kind="image" if info.duration <= 0 else "video")
    window = None
    if example.start is not None:
        window = (float(example.start), float(min(example.end, info.duration)))
    return VideoTextDataset("example", [video]), window


def save_upload(data: bytes, filename: str, folder: str | os.PathLike) -> Path:
    """An uploaded file written into `folder` under a safe name that keeps its extension
    (decoders pick the format by it for images)."""
    suffix = Path(filename or "").suffix.lower()
    suffix = suffix if re.fullmatch(r"\.[a-z0-9]{1,5}", suffix) else ""
    handle, name = tempfile.mkstemp(prefix="example-", suffix=suffix, dir=folder)
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    return Path(name)
