"""Video decoding (PyAV), frame sampling and audio reading.

Three layers, each usable alone:

- `probe(path)` reads a file's metadata without decoding it;
- the sampling functions (`uniform_times`, `tsn_times`, `rate_times`, `uniform_indices`,
  `tsn_indices`, `stride_indices`) are pure: they turn a duration or frame count into
  the times / frame indices to read, and are what datasets use for train (TSN-random,
  Frozen in Time §3.3) and test (uniform / stride);
- `read_frames(path, times)` decodes only what those times need: it seeks to the
  keyframe before a target when the target is far from the current position, and
  decodes forward otherwise, so dense targets decode the file once, sequentially.

Time convention: a time is seconds from the video stream's start; the frame "at" time t
is the last frame whose presentation time is <= t (the frame on screen at t). Times
before the first frame give the first frame, times after the last give the last.
AVI files carry no real presentation times (and packed MPEG-4 B-frames in AVI get
wrong ones), so for AVI the decode-order timestamp (dts) is used, as ffmpeg does.

Every failure (missing, empty, truncated, undecodable file) raises `VideoDecodeError`
naming the file.

Writing videos is `videotext.data.video_write`, finding video files in a folder
`videotext.data.media_files`, and tensor transforms of decoded frames
`videotext.data.transforms`.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from videotext.errors import VideoDecodeError

try:  # PyAV is a hard dependency; imported lazily in spirit but needed for everything here
    import av
    import av.error
    from av.video.reformatter import VideoReformatter
except ImportError as exc:  # pragma: no cover - dependency missing
    raise ImportError("videotext.data.video needs PyAV: pip install av") from exc

_TIME_EPS = 1e-6  # seconds; absorbs float rounding when comparing a frame time to a target

Size = int | tuple[int, int] | None  # shorter side, or (height, width), or native


# ------------------------------------------------------------------------------------
# opening and probing
# ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VideoInfo:
    """What a container says about its video stream (no decoding involved)."""

    path: str
    duration: float  # seconds (0 for a still image)
    fps: float  # average frame rate
    num_frames: int  # frame count; estimated from duration * fps when the container lacks it
    frames_estimated: bool  # True when num_frames is an estimate
    width: int
    height: int
    codec: str  # decoder name, e.g. "h264", "mpeg4", "msmpeg4", "cinepak"
    has_audio: bool
    container: str = ""  # demuxer name, e.g. "avi", "mov,mp4,m4a,3gp,3g2,mj2"


def _check_file(path: str | os.PathLike) -> Path:
    path = Path(path)
    if not path.exists():
        raise VideoDecodeError(path, "file not found")
    if path.is_dir():
        raise VideoDecodeError(path, "is a directory, expected a video file")
    if path.stat().st_size == 0:
        raise VideoDecodeError(path, "file is empty (0 bytes)")
    return path


def open_video(path: str | os.PathLike) -> "av.container.InputContainer":
    """Open a media file with PyAV, turning every failure into a `VideoDecodeError`.

    Also rejects files whose header declares more frames than the file holds (an AVI
    cut short keeps its header, and FFmpeg then reports only the duration it finds).
    """
    path = _check_file(path)
    try:
        container = av.open(str(path), mode="r")
    except av.error.FFmpegError as exc:
        raise VideoDecodeError(
            path, f"cannot open as a video ({_ffmpeg_message(exc)}; truncated, corrupt or not a video?)"
        ) from None
    except (OSError, ValueError) as exc:
        raise VideoDecodeError(path, f"cannot open as a video ({exc})") from None
    if not container.streams.video:
        kinds = sorted({s.type for s in container.streams}) or ["none"]
        container.close()
        raise VideoDecodeError(path, f"no video stream (streams: {', '.join(kinds)})")
    stream = container.streams.video[0]
    found, fps = _stream_duration(container, stream), _stream_fps(stream)
    if found is not None and stream.frames and fps:
        declared = stream.frames / fps
        if found < declared - _tolerance(declared, fps):
            container.close()
            raise VideoDecodeError(
                path, f"truncated: the header declares {stream.frames} frames ({declared:.2f}s) "
                f"but the file holds {found:.2f}s"
            )
    return container


def _tolerance(duration: float, fps: float) -> float:
    """How far short of its declared duration a video may end before we call it truncated."""
    return max(1.0, 0.05 * duration, 3.0 / fps if fps else 0.0)


def _packets_decoded(container, stream, path: Path, max_bad: int | None = 8) -> Iterator:
    """Decoded frames of `stream`, skipping packets the decoder rejects.

    Real files often have a damaged packet or two (Megamind.avi's first AC-3 packet);
    more than `max_bad` of them (None: no limit) means the file is corrupt.
    """
    bad = 0
    for packet in container.demux(stream):
        try:
            frames = packet.decode()
        except av.error.InvalidDataError as exc:
            bad += 1
            if max_bad is not None and bad > max_bad:
                raise VideoDecodeError(path, f"corrupt: {bad} undecodable packets ({_ffmpeg_message(exc)})") from None
            continue
        except av.error.FFmpegError as exc:
            raise VideoDecodeError(path, f"decoding failed ({_ffmpeg_message(exc)})") from None
        yield from frames


def _ffmpeg_message(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or str(exc)


def _stream_fps(stream) -> float:
    for rate in (stream.average_rate, stream.guessed_rate, stream.base_rate):
        if rate:
            return float(rate)
    return 0.0


def _stream_duration(container, stream) -> float | None:
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return container.duration / 1_000_000  # av.time_base is microseconds
    return None


def probe(path: str | os.PathLike) -> VideoInfo:
    """Metadata of a video file: duration, fps, frame count, size, codec, audio."""
    with open_video(path) as container:
        stream = container.streams.video[0]
        fps = _stream_fps(stream)
        duration = _stream_duration(container, stream)
        frames = int(stream.frames or 0)
        still = container.format.name in ("image2", "png_pipe", "jpeg_pipe", "webp_pipe", "bmp_pipe", "gif")
        estimated = False
        if still and frames <= 1:
            duration, frames = 0.0, 1
        if duration is None:  # nothing declared: count frames by demuxing packets (no decoding)
            frames = sum(1 for p in container.demux(stream) if p.size)
            duration = frames / fps if fps else 0.0
        elif frames <= 0:
            frames, estimated = max(1, round(duration * fps)), True
        ctx = stream.codec_context
        return VideoInfo(
            path=str(path), duration=float(duration), fps=fps, num_frames=frames,
            frames_estimated=estimated, width=int(ctx.width), height=int(ctx.height),
            codec=ctx.name, has_audio=bool(container.streams.audio), container=container.format.name,
        )


# ------------------------------------------------------------------------------------
# sampling (pure functions; times in seconds, indices are frame numbers)
# ------------------------------------------------------------------------------------


def uniform_times(duration: float, num_frames: int) -> np.ndarray:
    """Centres of `num_frames` equal segments of [0, duration): the test-time sampling."""
    _check_count(num_frames)
    return (np.arange(num_frames) + 0.5) * (float(duration) / num_frames)  # [T]


def tsn_times(duration: float, num_frames: int, rng: np.random.Generator) -> np.ndarray:
    """One uniformly random time inside each of `num_frames` equal segments (TSN, training)."""
    _check_count(num_frames)
    return (np.arange(num_frames) + rng.random(num_frames)) * (float(duration) / num_frames)  # [T]


def rate_times(duration: float, rate: float) -> np.ndarray:
    """Centres of consecutive steps of 1/rate seconds covering the video (per-second features).

    A video of duration d gives ceil(d * rate) steps (at least one); step k covers
    [k/rate, (k+1)/rate) and is sampled at its centre.
    """
    return (np.arange(num_steps(duration, rate)) + 0.5) / float(rate)  # [T]


def step_starts(duration: float, rate: float) -> np.ndarray:
    """Start times of the steps `rate_times` samples: the timestamps stored with features."""
    return np.arange(num_steps(duration, rate)) / float(rate)  # [T]


def num_steps(duration: float, rate: float) -> int:
    """How many steps of 1/rate seconds cover `duration` (at least one)."""
    if rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
    return max(1, math.ceil(float(duration) * rate - 1e-9))


def uniform_indices(frame_count: int, num_frames: int) -> np.ndarray:
    """Frame indices at the centres of `num_frames` equal segments of `frame_count` frames."""
    _check_count(num_frames)
    _check_count(frame_count, "frame_count")
    return np.minimum(((np.arange(num_frames) + 0.5) * frame_count / num_frames).astype(np.int64), frame_count - 1)


def tsn_indices(frame_count: int, num_frames: int, rng: np.random.Generator) -> np.ndarray:
    """One random frame index per segment; segments are [floor(i n/T), floor((i+1) n/T)).

    When there are fewer frames than segments, a segment may be empty and then
    holds its first frame (indices repeat), as in Frozen in Time's sampler.
    """
    _check_count(num_frames)
    _check_count(frame_count, "frame_count")
    edges = (np.arange(num_frames + 1) * frame_count) // num_frames  # [T+1]
    low = edges[:-1]
    width = np.maximum(edges[1:] - low, 1)
    picks = low + (rng.random(num_frames) * width).astype(np.int64)
    return np.minimum(picks, frame_count - 1)  # [T]


def stride_indices(frame_count: int, stride: int, offset: int = 0) -> np.ndarray:
    """Every `stride`-th frame index starting at `offset`."""
    if stride < 1:
        raise ValueError(f"stride must be >= 1, got {stride}")
    return np.arange(offset, frame_count, stride, dtype=np.int64)


def indices_to_times(indices: Sequence[int] | np.ndarray, fps: float) -> np.ndarray:
    """Times that select the given frame indices of a constant-rate video: the frame centres."""
    return (np.asarray(indices, dtype=np.float64) + 0.5) / float(fps)


def _check_count(value: int, name: str = "num_frames") -> None:
    if int(value) < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


# ------------------------------------------------------------------------------------
# decoding
# ------------------------------------------------------------------------------------


def output_size(width: int, height: int, size: Size) -> tuple[int, int]:
    """(height, width) of decoded frames for a requested `size`.

    `size` is None (native), an int (the shorter side, aspect kept) or (height, width).
    """
    if size is None:
        return height, width
    if isinstance(size, int):
        if width <= height:
            return max(1, round(height * size / width)), size
        return size, max(1, round(width * size / height))
    return int(size[0]), int(size[1])


def frame_to_rgb(frame: "av.VideoFrame", hw: tuple[int, int], reformatter: Any = None) -> np.ndarray:
    """One decoded frame as uint8 RGB [H, W, 3] at size `hw` (area interpolation).

    Pass one `av.video.reformatter.VideoReformatter` for all frames of a video: it keeps its
    swscale context, while `frame.to_ndarray(format=...)` builds a new one per frame, which
    cost 3 ms a frame for 128-px video, 15x the decoding itself (the same pixels either way)."""
    height, width = hw
    reformatter = reformatter or VideoReformatter()
    if frame.width == width and frame.height == height:
        return reformatter.reformat(frame, format="rgb24").to_ndarray()
    return reformatter.reformat(frame, width=width, height=height, format="rgb24",
                                interpolation="AREA").to_ndarray()


class _Clock:
    """Seconds of each decoded frame, robust to missing and (in AVI) wrong timestamps."""

    def __init__(self, container, stream):
        self.time_base = stream.time_base or Fraction(1, 1_000_000)
        self.origin = stream.start_time or 0
        self.use_dts = container.format.name == "avi"
        fps = _stream_fps(stream)
        self.tick = int(round(1 / (fps * self.time_base))) if fps else 1
        self.last: int | None = None

    def reset(self) -> None:
        self.last = None

    def __call__(self, frame) -> float:
        first, second = (frame.dts, frame.pts) if self.use_dts else (frame.pts, frame.dts)
        stamp = first
        if stamp is None:  # e.g. frames flushed from the decoder at the end carry no dts
            stamp = self.last + self.tick if self.last is not None else second
        if stamp is None:
            stamp = self.origin
        self.last = stamp
        return float((stamp - self.origin) * self.time_base)


class _Cursor:
    """Walks a video stream forward, seeking only when that saves decoding.

    Seeking costs decoding from the keyframe before the target; continuing costs
    decoding from the current position. With `gop` the longest keyframe interval seen
    so far (learned while decoding and after each seek), a target more than `gop`
    seconds ahead must have a keyframe in between, so a seek there is cheaper.
    """

    def __init__(self, container, stream, path: Path, min_seek_gap: float):
        self.container, self.stream, self.path = container, stream, path
        self.clock = _Clock(container, stream)
        self.gop = float(min_seek_gap)
        self.frames: Iterator | None = None
        self.current: tuple[float, object] | None = None  # last frame with time <= target
        self.pending: tuple[float, object] | None = None  # decoded frame beyond the target
        self.last_key: float | None = None
        self.ended = False
        self.seeks = 0  # for tests and benchmarks

    def _next(self) -> tuple[float, object] | None:
        if self.pending is not None:
            item, self.pending = self.pending, None
            return item
        frame = next(self.frames, None)  # type: ignore[arg-type]
        if frame is None:
            return None
        time = self.clock(frame)
        if frame.key_frame:
            if self.last_key is not None and time > self.last_key:
                self.gop = max(self.gop, time - self.last_key)
            self.last_key = time
        return time, frame

    def _reset(self) -> None:
        self.frames = _packets_decoded(self.container, self.stream, self.path)
        self.clock.reset()
        self.current = self.pending = None
        self.last_key = None
        self.ended = False

    def _seek(self, target: float) -> None:
        """Seek to the keyframe before `target` (further back if the index lands after it)."""
        back = 0.0
        while True:
            goal = target - back
            try:
                if goal <= 0:  # from the very beginning
                    self.container.seek(self.clock.origin, stream=self.stream, backward=True, any_frame=False)
                else:
                    offset = int(self.clock.origin + math.floor(goal / self.clock.time_base))
                    self.container.seek(offset, stream=self.stream, backward=True, any_frame=False)
                    self.seeks += 1
            except av.error.FFmpegError as exc:
                raise VideoDecodeError(self.path, f"seek failed ({_ffmpeg_message(exc)})") from None
            self._reset()
            first = self._next()
            if goal <= 0 or (first is not None and first[0] <= target + _TIME_EPS):
                self.pending = first
                if first is not None:
                    self.gop = max(self.gop, target - first[0])  # the keyframe interval is at least this
                else:
                    self.ended = True
                return
            back = 1.0 if back == 0 else back * 2

    def frame_at(self, target: float) -> tuple[float, object] | None:
        """The frame on screen at `target` seconds (targets must come in increasing order)."""
        if self.ended:
            return self.current
        if self.frames is None:
            if target > self.gop:
                self._seek(target)
            else:
                self._reset()
        else:
            ahead = self.pending or self.current
            if ahead is not None and target - ahead[0] > self.gop:
                self._seek(target)
        return self._advance(target)

    def _advance(self, target: float) -> tuple[float, object] | None:
        while True:
            item = self._next()
            if item is None:
                self.ended = True
                return self.current
            if self.current is None or item[0] <= target + _TIME_EPS:
                self.current = item
                if item[0] > target + _TIME_EPS:  # target before the first frame: clamp to it
                    return item
                continue
            self.pending = item
            return self.current


def read_frames(
    path: str | os.PathLike,
    times: Sequence[float] | np.ndarray,
    size: Size = None,
    *,
    min_seek_gap: float = 1.0,
    threads: int = 0,
    return_times: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Decode the frames on screen at `times` (seconds) as uint8 RGB [T, H, W, 3].

    Seeks to the keyframe before a target when the target is far from the current
    decoding position and decodes forward otherwise; the result equals a full decode
    picked at the same times. `size`: None (native), int (shorter side) or (H, W).
    `threads`: decoder threads (0 = FFmpeg's choice). With `return_times`, also the
    presentation time (seconds) of each returned frame [T].
    """
    path = _check_file(path)
    times = np.asarray(times, dtype=np.float64).reshape(-1)  # [T]
    if times.size == 0:
        raise ValueError("read_frames needs at least one time")
    if not np.all(np.isfinite(times)):
        raise ValueError(f"times must be finite, got {times}")
    with open_video(path) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        stream.codec_context.thread_count = threads
        declared = _stream_duration(container, stream)
        cursor = _Cursor(container, stream, path, min_seek_gap)
        order = np.argsort(times, kind="stable")
        hw = output_size(stream.codec_context.width, stream.codec_context.height, size)
        out: np.ndarray | None = None
        got = np.zeros(len(times), dtype=np.float64)
        last_id, last_rgb = None, None
        reformatter = VideoReformatter()
        for index in order:
            item = cursor.frame_at(float(times[index]))
            if item is None:
                raise VideoDecodeError(path, "no frame could be decoded")
            frame_time, frame = item
            if cursor.ended and declared and times[index] > frame_time:
                _check_not_truncated(path, frame_time, declared, _stream_fps(stream))
            if id(frame) != last_id:
                try:
                    last_rgb = frame_to_rgb(frame, hw, reformatter)
                except (av.error.FFmpegError, ValueError) as exc:
                    raise VideoDecodeError(path, f"cannot convert frame at {frame_time:.3f}s ({exc})") from None
                last_id = id(frame)
            if out is None:
                out = np.empty((len(times), *hw, 3), dtype=np.uint8)  # [T, H, W, 3]
            out[index] = last_rgb
            got[index] = frame_time
    assert out is not None
    return (out, got) if return_times else out


def _check_not_truncated(path: Path, last_time: float, declared: float, fps: float) -> None:
    """Decoding ended well before the declared duration: the file is cut or corrupt."""
    if last_time < declared - _tolerance(declared, fps):
        raise VideoDecodeError(
            path, f"truncated or corrupt: decoding stopped at {last_time:.2f}s of {declared:.2f}s declared"
        )


def decode_all(path: str | os.PathLike, size: Size = None) -> tuple[np.ndarray, np.ndarray]:
    """Every frame of the video in order: (frames uint8 [N, H, W, 3], times seconds [N]).

    The plain reference `read_frames` is tested against; fine for short clips only.
    """
    path = _check_file(path)
    frames, stamps = [], []
    with open_video(path) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        clock = _Clock(container, stream)
        hw = output_size(stream.codec_context.width, stream.codec_context.height, size)
        reformatter = VideoReformatter()
        for frame in _packets_decoded(container, stream, path):
            stamps.append(clock(frame))
            frames.append(frame_to_rgb(frame, hw, reformatter))
    if not frames:
        raise VideoDecodeError(path, "no frame could be decoded")
    return np.stack(frames), np.asarray(stamps)


def pick_frames(frame_times: np.ndarray, times: Sequence[float] | np.ndarray) -> np.ndarray:
    """Index of the frame on screen at each time, given all frame times in display order."""
    times = np.asarray(times, dtype=np.float64)
    index = np.searchsorted(frame_times, times + _TIME_EPS, side="right") - 1
    return np.clip(index, 0, len(frame_times) - 1)


def read_audio(path: str | os.PathLike, sample_rate: int = 16000, start: float | None = None,
               end: float | None = None) -> np.ndarray:
    """The first audio stream as mono float32 samples in [-1, 1] at `sample_rate` [N].

    An empty array when the file has no audio stream. `start` / `end` (seconds) read only
    that stretch: samples [start·rate, end·rate) of the whole track (fewer where the track
    ends), found by seeking a second before `start`, so a long video's audio is read piece
    by piece in bounded memory.
    """
    if start is not None or end is not None:
        return _read_audio_range(path, sample_rate, float(start or 0.0), end)
    path = _check_file(path)
    try:
        container = av.open(str(path), mode="r")
    except av.error.FFmpegError as exc:
        raise VideoDecodeError(path, f"cannot open ({_ffmpeg_message(exc)})") from None
    with container:
        if not container.streams.audio:
            return np.zeros(0, dtype=np.float32)
        stream = container.streams.audio[0]
        resampler = av.AudioResampler(format="flt", layout="mono", rate=sample_rate)
        chunks: list[np.ndarray] = []
        try:
            for frame in _packets_decoded(container, stream, path, max_bad=None):
                frame.pts = None  # let the resampler count samples itself
                for out in resampler.resample(frame):
                    chunks.append(out.to_ndarray().reshape(-1))
            for out in resampler.resample(None):
                chunks.append(out.to_ndarray().reshape(-1))
        except (av.error.FFmpegError, ValueError) as exc:
            raise VideoDecodeError(path, f"audio decoding failed ({_ffmpeg_message(exc)})") from None
    if not chunks:
        return np.zeros(0, dtype=np.float32)
    return np.concatenate(chunks).astype(np.float32, copy=False)


_AUDIO_SEEK_MARGIN = 1.0  # seconds decoded before a range: the first frames after a seek lack their overlap


def _read_audio_range(path: str | os.PathLike, sample_rate: int, start: float, end: float | None) -> np.ndarray:
    path = _check_file(path)
    try:
        container = av.open(str(path), mode="r")
    except av.error.FFmpegError as exc:
        raise VideoDecodeError(path, f"cannot open ({_ffmpeg_message(exc)})") from None
    first_wanted = max(0, int(round(start * sample_rate)))
    last_wanted = None if end is None else max(first_wanted, int(round(end * sample_rate)))
    with container:
        if not container.streams.audio:
            return np.zeros(0, dtype=np.float32)
        stream = container.streams.audio[0]
        origin = float(stream.start_time * stream.time_base) if stream.start_time is not None else 0.0
        if start - _AUDIO_SEEK_MARGIN > 0:
            try:
                container.seek(int((origin + start - _AUDIO_SEEK_MARGIN) / stream.time_base), stream=stream,
                               backward=True)
            except av.error.FFmpegError as exc:
                raise VideoDecodeError(path, f"cannot seek to {start:.2f}s ({_ffmpeg_message(exc)})") from None
        resampler = av.AudioResampler(format="flt", layout="mono", rate=sample_rate)
        chunks: list[np.ndarray] = []
        position: int | None = None  # sample index (at sample_rate) of the next resampled sample

        def keep(samples: np.ndarray) -> bool:
            nonlocal position
            assert position is not None
            low, high = position, position + len(samples)
            position = high
            cut_high = high if last_wanted is None else min(high, last_wanted)
            if cut_high > max(low, first_wanted):
                chunks.append(samples[max(low, first_wanted) - low : cut_high - low])
            return last_wanted is not None and high >= last_wanted

        try:
            done = False
            for frame in _packets_decoded(container, stream, path, max_bad=None):
                if position is None:
                    when = frame.time if frame.time is not None else 0.0
                    position = int(round((when - origin) * sample_rate))
                frame.pts = None  # let the resampler count samples itself, as for the whole track
                for out in resampler.resample(frame):
                    done = keep(out.to_ndarray().reshape(-1))
                if done:
                    break
            if not done and position is not None:
                for out in resampler.resample(None):
                    keep(out.to_ndarray().reshape(-1))
        except (av.error.FFmpegError, ValueError) as exc:
            raise VideoDecodeError(path, f"audio decoding failed ({_ffmpeg_message(exc)})") from None
    if not chunks:
        return np.zeros(0, dtype=np.float32)
    return np.concatenate(chunks).astype(np.float32, copy=False)
