"""Timed lines from subtitles: a `.srt` / `.vtt` file beside a video, or a text subtitle stream
inside it (mov_text, subrip, webvtt, ass), all read through PyAV's (FFmpeg's) demuxers and decoders.

Subtitles are what a person wrote for the video, so they win over speech recognition. A file
FFmpeg cannot parse, or whose text is not UTF-8 (a Latin-1 `.srt` saved by an old editor), is
refused with a `SubtitleError` naming it; the caller records it and falls back to recognition.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from videotext.data.schema import Segment
from videotext.errors import VideoTextError

SIDECAR_EXTENSIONS = (".srt", ".vtt")
TEXT_CODECS = ("mov_text", "subrip", "srt", "webvtt", "ass", "ssa", "text")
_ASS_TAG = re.compile(r"\{[^}]*\}")  # ASS override tags ({\i1}, {\an8}) that FFmpeg turns markup into
_HTML_TAG = re.compile(r"</?[a-zA-Z][^>]*>")  # <i>, <c.yellow>, <v Speaker> left in WebVTT cues


class SubtitleError(VideoTextError):
    """A subtitle file or stream that cannot be read as timed UTF-8 text."""


def sidecar_subtitles(video: str | os.PathLike) -> Path | None:
    """The `.srt` (else `.vtt`) file with the video's stem in its folder, if there is one."""
    video = Path(video)
    for extension in SIDECAR_EXTENSIONS:
        for candidate in (video.with_suffix(extension), video.with_suffix(extension.upper())):
            if candidate.is_file():
                return candidate
    return None


def clean_line(text: str) -> str:
    """Subtitle text without markup, line breaks as spaces."""
    text = _HTML_TAG.sub("", _ASS_TAG.sub("", text.replace("\\N", " ").replace("\\n", " ")))
    return " ".join(text.split())


def has_subtitle_stream(path: str | os.PathLike) -> bool:
    """True when the media file holds a text subtitle stream."""
    import av

    try:
        with av.open(str(path)) as container:
            return any(s.codec_context.name in TEXT_CODECS for s in container.streams.subtitles)
    except av.error.FFmpegError:
        return False


def read_subtitles(path: str | os.PathLike) -> list[Segment]:
    """Timed lines (start, end in seconds, text) of the first text subtitle stream of `path`: a
    `.srt` / `.vtt` file or a video with subtitles inside; [] when it holds none."""
    import av

    path = Path(path)
    try:
        container = av.open(str(path))
    except (av.error.FFmpegError, UnicodeDecodeError) as exc:
        raise SubtitleError(f"{path}: not a readable subtitle file ({exc})") from None
    lines: list[Segment] = []
    with container:
        streams = [s for s in container.streams.subtitles if s.codec_context.name in TEXT_CODECS]
        if not streams:
            return []
        stream = streams[0]
        try:
            for packet in container.demux(stream):
                if packet.pts is None:
                    continue
                start = float(packet.pts * stream.time_base)
                end = start + float((packet.duration or 0) * stream.time_base)
                for subtitle in packet.decode():
                    raw = getattr(subtitle, "dialogue", None) or getattr(subtitle, "text", b"")
                    text = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
                    text = clean_line(text)
                    if text:
                        lines.append(Segment(start, max(end, start), text))
        except UnicodeDecodeError:
            raise SubtitleError(f"{path}: subtitle text is not UTF-8; save it as UTF-8") from None
        except (av.error.FFmpegError, ValueError) as exc:
            if path.suffix.lower() in SIDECAR_EXTENSIONS and not _is_utf8(path):
                raise SubtitleError(f"{path}: subtitle text is not UTF-8; save it as UTF-8") from None
            raise SubtitleError(f"{path}: subtitle stream {stream.index} cannot be decoded ({exc})") from None
    if path.suffix.lower() in SIDECAR_EXTENSIONS and not lines and path.stat().st_size > 0:
        raise SubtitleError(f"{path}: no timed line could be read (expected SubRip or WebVTT cues)")
    return sorted(lines, key=lambda s: (s.start, s.end))


def _is_utf8(path: Path) -> bool:
    try:
        path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
