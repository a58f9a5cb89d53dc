"""Pixels and sound of a `VideoSpec`, and their encoding into a browser-playable mp4.

Video: H.264 (libx264, baseline profile, yuv420p, one thread so the bytes are the same
on every run), a keyframe every 2 s so decoders can seek. Audio: mono AAC in the same
container; each shape sounds its own tone (`SHAPE_TONES_HZ`) loudly while it acts and
quietly while it is merely visible, so the soundtrack says which shape acts when.

AAC note: the encoder works in frames of 1024 samples, so the decoded audio is padded
up to a whole number of frames (6 s at 16 kHz: 96000 samples → 96256 decoded, ~16 ms
longer than the video). The container's edit list removes the encoder's priming delay,
so decoded sample 0 is t = 0.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

from videotext.data.synthetic.specs import VideoSpec
from videotext.data.synthetic.vocab import (
    ACTIVE_LEVELS,
    AUDIO_RAMP,
    BACKGROUND,
    COLOURS,
    GROW_FACTOR,
    IDLE_LEVEL,
    MOVE_DISTANCE,
    MOVES,
    SHAPE_TONES_HZ,
    SPIN_DEGREES,
)
from videotext.io import atomic_path

VIDEO_CODEC = "libx264"
VIDEO_OPTIONS = {"profile": "baseline", "preset": "veryfast"}  # baseline: plays in every browser
PIX_FMT = "yuv420p"
AUDIO_CODEC = "aac"
# fast coder and a 1.2 kHz band (tones ≤ 784 Hz, kept to 0.01 %): ~4x faster than the defaults
AUDIO_OPTIONS = {"aac_coder": "fast", "cutoff": "1200"}
KEYFRAME_SECONDS = 2.0
CONTAINER_OPTIONS = {"movflags": "+faststart", "fflags": "+bitexact"}  # index first: streams in browsers


@dataclass
class ObjectState:
    """An object at one instant (fractions of the frame side; angle in degrees, clockwise)."""

    x: float
    y: float
    size: float  # radius before `scale`
    angle: float
    scale: float  # 0 = invisible, 1 = full size (appear / vanish animate it)
    active: bool  # an event of this object is running

    @property
    def radius(self) -> float:
        return self.size * self.scale


def object_states(spec: VideoSpec, t: float) -> list[ObjectState]:
    """The state of every object of `spec` at time `t` (seconds); motion is linear in time."""
    states = [ObjectState(o.x, o.y, o.size, 0.0, 1.0 if o.visible else 0.0, False) for o in spec.objects]
    for event in spec.events:  # in time order
        if t < event.start:
            break
        state = states[event.object]
        progress = min(1.0, (t - event.start) / (event.end - event.start))
        state.active = t < event.end
        if event.action in MOVES:
            dx, dy = MOVES[event.action]
            state.x += dx * MOVE_DISTANCE * progress
            state.y += dy * MOVE_DISTANCE * progress
        elif event.action == "grow":
            state.size *= GROW_FACTOR**progress
        elif event.action == "shrink":
            state.size /= GROW_FACTOR**progress
        elif event.action == "spin":
            state.angle += SPIN_DEGREES * progress
        elif event.action == "appear":
            state.scale = progress
        elif event.action == "vanish":
            state.scale = 1.0 - progress
    return states


# --- shapes: boolean masks over local coordinates in units of the radius --------------------
def _polygon(u: np.ndarray, v: np.ndarray, sides: int, first_vertex_deg: float, circumradius: float) -> np.ndarray:
    """Regular polygon: in polar form, ρ·cos(θ − θ_edge) ≤ apothem."""
    rho = np.hypot(u, v)
    sector = 2 * math.pi / sides
    theta = (np.arctan2(v, u) - math.radians(first_vertex_deg)) % sector - sector / 2
    return rho * np.cos(theta) <= circumradius * math.cos(sector / 2)


def _star(u: np.ndarray, v: np.ndarray, points: int = 5, outer: float = 1.3, inner: float = 0.52) -> np.ndarray:
    """Star polygon with straight edges, first tip up: inside the edge from a tip to the next notch."""
    half = math.pi / points  # angle between a tip and the neighbouring notch
    rho = np.hypot(u, v)
    phi = np.abs((np.arctan2(v, u) + math.pi / 2 + half) % (2 * half) - half)  # angle from the nearest tip
    a, b = rho * np.cos(phi), rho * np.sin(phi)  # the point folded into the tip's half-sector
    ex, ey = inner * math.cos(half) - outer, inner * math.sin(half)  # edge vector tip → notch
    return ex * b - ey * (a - outer) >= 0  # same side of the edge as the centre (which gives > 0)


def shape_mask(shape: str, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Which local points (u right, v down, in radii) are inside `shape`; sizes look alike."""
    if shape == "circle":
        return u * u + v * v <= 1.0
    if shape == "square":
        return np.maximum(np.abs(u), np.abs(v)) <= 0.85
    if shape == "diamond":
        return np.abs(u) + np.abs(v) <= 1.15
    if shape == "triangle":
        return _polygon(u, v, 3, -90.0, 1.3)  # a vertex points up
    if shape == "star":
        return _star(u, v)
    if shape == "cross":
        au, av_ = np.abs(u), np.abs(v)
        return ((au <= 0.35) & (av_ <= 1.05)) | ((av_ <= 0.35) & (au <= 1.05))
    raise ValueError(f"unknown shape {shape!r}")


_EXTENT = 1.35  # every shape fits in ±_EXTENT radii


def _render(spec: VideoSpec, times: np.ndarray, size: int) -> np.ndarray:
    """Frames at `times` (seconds): [T, size, size, 3] uint8, batched over time per object.

    Each object's mask is computed in a square window that follows its centre, on a
    canvas padded by the window size so no window is ever clipped. The acting object is
    drawn on top, so the event's object is never hidden.
    """
    states = [object_states(spec, float(t)) for t in times]  # [T][N]
    count, objects = len(times), len(spec.objects)
    cx = np.array([[s.x * size for s in row] for row in states]).reshape(count, objects)  # [T, N] pixels
    cy = np.array([[s.y * size for s in row] for row in states]).reshape(count, objects)
    radius = np.array([[s.radius * size for s in row] for row in states]).reshape(count, objects)
    angle = np.radians([[s.angle for s in row] for row in states]).reshape(count, objects)
    reach = [int(math.ceil(_EXTENT * radius[:, n].max())) + 1 for n in range(objects)]
    pad = max(reach, default=1)
    side = size + 2 * pad
    background = np.empty((side, side, 3), np.uint8)
    background[:] = BACKGROUND
    canvas = np.empty((count, side, side, 3), np.uint8)
    canvas[:] = background  # [T, side, side, 3]; 30x faster than broadcasting a 3-vector

    windows = []  # per object: (left [T], top [T], mask [T, W, W])
    for n, obj in enumerate(spec.objects):
        width = 2 * reach[n] + 1
        left = np.floor(cx[:, n]).astype(int) - reach[n]  # [T] window corner, canvas = left + pad
        top = np.floor(cy[:, n]).astype(int) - reach[n]
        dx = (left[:, None] + np.arange(width) + 0.5 - cx[:, n, None])[:, None, :]  # [T, 1, W]
        dy = (top[:, None] + np.arange(width) + 0.5 - cy[:, n, None])[:, :, None]  # [T, W, 1]
        cos, sin = np.cos(angle[:, n])[:, None, None], np.sin(angle[:, n])[:, None, None]
        scale = np.maximum(radius[:, n], 1e-6)[:, None, None]
        u = (cos * dx + sin * dy) / scale  # [T, W, W]; rotating the point by −angle turns the shape by +angle
        v = (cos * dy - sin * dx) / scale
        mask = shape_mask(obj.shape, u, v) & (radius[:, n] >= 0.5)[:, None, None]
        windows.append((left + pad, top + pad, mask))

    for t, row in enumerate(states):
        for n in sorted(range(objects), key=lambda i: row[i].active):  # stable: actors last
            left, top, mask = windows[n]
            width = mask.shape[-1]
            canvas[t, top[t] : top[t] + width, left[t] : left[t] + width][mask[t]] = COLOURS[spec.objects[n].colour]
    return np.ascontiguousarray(canvas[:, pad : pad + size, pad : pad + size])


def render_frame(spec: VideoSpec, t: float, size: int) -> np.ndarray:
    """The RGB frame at time `t`: [size, size, 3] uint8."""
    return _render(spec, np.array([t]), size)[0]


def render_frames(spec: VideoSpec, size: int, fps: int) -> np.ndarray:
    """All frames, frame i showing t = i / fps: [round(duration·fps), size, size, 3] uint8."""
    return _render(spec, np.arange(frame_count(spec.duration, fps)) / fps, size)


def frame_count(duration: float, fps: int) -> int:
    return int(round(duration * fps))


def render_audio(spec: VideoSpec, sample_rate: int) -> np.ndarray:
    """The mono soundtrack in [-1, 1]: [round(duration·sample_rate)] float32.

    Per object: level 0 while invisible, `IDLE_LEVEL` while visible, its colour's
    `ACTIVE_LEVELS` while one of its events runs, with short linear ramps between.
    """
    samples = int(round(spec.duration * sample_rate))
    t = np.arange(samples) / sample_rate  # [S]
    signal = np.zeros(samples, np.float64)
    for index, obj in enumerate(spec.objects):
        visible = obj.visible
        level = IDLE_LEVEL if visible else 0.0
        times, levels = [0.0], [level]
        for event in spec.events:
            if event.object != index:
                continue
            if event.action == "appear":
                visible = True
            elif event.action == "vanish":
                visible = False
            after = IDLE_LEVEL if visible else 0.0
            active = ACTIVE_LEVELS[obj.colour]
            times += [event.start, event.start + AUDIO_RAMP, event.end - AUDIO_RAMP, event.end]
            levels += [levels[-1], active, active, after]
        times.append(spec.duration)
        levels.append(levels[-1])
        envelope = np.interp(t, times, levels)  # [S]
        signal += envelope * np.sin(2 * math.pi * SHAPE_TONES_HZ[obj.shape] * t)
    return np.clip(signal, -1.0, 1.0).astype(np.float32)


class Mp4Writer:
    """An mp4 written piece by piece: frames [T, H, W, 3] uint8 and mono audio [S] float32 appended in
    order (H.264 + AAC, the settings above), so a long video is encoded once without being held in
    memory. Writes `path` directly; callers wanting atomicity pass a temporary path."""

    AUDIO_CHUNK = 1024  # one AAC frame per call keeps the encoder's FIFO small

    def __init__(self, path: str | Path, size: tuple[int, int], fps: int, sample_rate: int, comment: str = ""):
        height, width = size
        self.container = av.open(str(path), "w", format="mp4", options=CONTAINER_OPTIONS)
        if comment:
            self.container.metadata["comment"] = comment
        self.video = self.container.add_stream(VIDEO_CODEC, rate=fps, options=VIDEO_OPTIONS)
        self.video.width, self.video.height, self.video.pix_fmt = width, height, PIX_FMT
        self.video.codec_context.thread_count = 1  # deterministic bytes, and parallelism is per video
        self.video.codec_context.gop_size = max(1, int(round(KEYFRAME_SECONDS * fps)))
        self.sound = self.container.add_stream(AUDIO_CODEC, rate=sample_rate, options=AUDIO_OPTIONS)
        self.sound.layout = "mono"
        self.sample_rate = sample_rate
        self.frames_written = self.samples_written = 0
        self._pending = np.zeros(0, np.float32)  # audio short of a whole chunk
        self._video_flushed = False

    def write_frames(self, frames: np.ndarray) -> None:
        for pixels in frames:
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts = self.frames_written
            self.container.mux(self.video.encode(frame))
            self.frames_written += 1

    def write_audio(self, audio: np.ndarray, final: bool = False) -> None:
        """Append samples; whole chunks are encoded now, the rest when more come (or at `final`)."""
        pending = np.concatenate([self._pending, np.asarray(audio, np.float32)])
        whole = len(pending) if final else len(pending) // self.AUDIO_CHUNK * self.AUDIO_CHUNK
        for start in range(0, whole, self.AUDIO_CHUNK):
            piece = av.AudioFrame.from_ndarray(pending[None, start : min(start + self.AUDIO_CHUNK, whole)],
                                               format="fltp", layout="mono")
            piece.sample_rate, piece.pts = self.sample_rate, self.samples_written
            self.container.mux(self.sound.encode(piece))
            self.samples_written += piece.samples
        self._pending = pending[whole:]

    def flush_video(self) -> None:
        """No more frames: flush the video encoder (once)."""
        if not self._video_flushed:
            self.container.mux(self.video.encode(None))
            self._video_flushed = True

    def close(self) -> None:
        """Flush both encoders and finish the file."""
        self.flush_video()
        self.write_audio(np.zeros(0, np.float32), final=True)
        self.container.mux(self.sound.encode(None))
        self.container.close()

    def __enter__(self) -> "Mp4Writer":
        return self

    def __exit__(self, kind: object, *rest: object) -> None:
        if kind is None:
            self.close()
        else:  # a failed write: release the file without finishing it
            self.container.close()


def encode_mp4(
    path: str | Path,
    frames: np.ndarray,
    audio: np.ndarray,
    fps: int,
    sample_rate: int,
    comment: str = "",
) -> None:
    """Write frames [T, H, W, 3] uint8 and mono audio [S] float32 as H.264 + AAC mp4 (all video, then all
    audio). Writes `path` directly; callers wanting atomicity pass a temporary path."""
    with Mp4Writer(path, frames.shape[1:3], fps, sample_rate, comment) as writer:
        writer.write_frames(frames)
        writer.flush_video()
        writer.write_audio(audio)


def _fingerprint(spec: VideoSpec, size: int, fps: int, sample_rate: int) -> str:
    """What a finished mp4 depends on: the spec, the render parameters, the encoder settings."""
    return spec.fingerprint(
        size=size, fps=fps, sample_rate=sample_rate,
        video_options=VIDEO_OPTIONS, audio_options=AUDIO_OPTIONS, keyframe_seconds=KEYFRAME_SECONDS,
    )


def render_video(
    spec: VideoSpec,
    path: str | Path,
    *,
    size: int = 128,
    fps: int = 8,
    sample_rate: int = 16000,
) -> Path:
    """Render `spec` to an mp4 at `path`, atomically (a killed run leaves no half file)."""
    path = Path(path)
    frames = render_frames(spec, size, fps)
    audio = render_audio(spec, sample_rate)
    comment = _fingerprint(spec, size, fps, sample_rate)
    with atomic_path(path) as tmp:
        encode_mp4(tmp, frames, audio, fps, sample_rate, comment)
        os.chmod(tmp, 0o644)  # temp files are private (0600); media is for everyone, e.g. a web server
    return path


def is_rendered(spec: VideoSpec, path: str | Path, *, size: int = 128, fps: int = 8, sample_rate: int = 16000) -> bool:
    """Whether `path` already holds this spec's video: right size, frame count, audio, fingerprint."""
    path = Path(path)
    if not path.is_file():
        return False
    try:
        with av.open(str(path)) as container:
            if container.metadata.get("comment") != _fingerprint(spec, size, fps, sample_rate):
                return False
            video, audio = container.streams.video, container.streams.audio
            if len(video) != 1 or len(audio) != 1:
                return False
            stream = video[0]
            return (
                stream.codec_context.width == size
                and stream.codec_context.height == size
                and stream.frames == frame_count(spec.duration, fps)
            )
    except (av.FFmpegError, OSError, ValueError):
        return False
