"""Encoding frames (and mono audio) into a video file with PyAV: test clips, benchmarks, demos.

Decoding is `videotext.data.video`; this module only writes.
"""
from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from videotext.io import atomic_path


def write_video(
    path: str | os.PathLike,
    frames: np.ndarray,
    fps: float,
    *,
    audio: np.ndarray | None = None,
    sample_rate: int = 16000,
    codec: str = "libx264",
    gop: int | None = None,
    options: dict[str, str] | None = None,
    container_options: dict[str, str] | None = None,
) -> Path:
    """Encode uint8 RGB frames [T, H, W, 3] (and optional mono float audio [N]) to a file.

    H.264 yuv420p by default (even sizes required), AAC audio; written atomically.
    `gop` sets the keyframe interval in frames; `options` go to the encoder and
    `container_options` to the muxer (e.g. {"movflags": "faststart"}). Used for test
    clips and demos.
    """
    frames = np.asarray(frames, dtype=np.uint8)
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames must be [T, H, W, 3], got {frames.shape}")
    path = Path(path)
    with atomic_path(path) as tmp:
        with av.open(str(tmp), mode="w", format=_muxer_for(path), options=dict(container_options or {})) as out:
            rate = Fraction(fps).limit_denominator(1001)
            stream = out.add_stream(codec, rate=rate)
            stream.width, stream.height = int(frames.shape[2]), int(frames.shape[1])
            stream.pix_fmt = "yuv420p"
            if gop is not None:
                stream.codec_context.gop_size = int(gop)
            stream.options = dict(options or {})
            sound = None
            if audio is not None:
                sound = out.add_stream("aac", rate=sample_rate)
                sound.layout = "mono"
            for image in frames:
                out.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
            out.mux(stream.encode(None))
            if sound is not None:
                samples = np.asarray(audio, dtype=np.float32).reshape(1, -1)
                block = 1024
                for start in range(0, samples.shape[1], block):
                    chunk = av.AudioFrame.from_ndarray(
                        np.ascontiguousarray(samples[:, start : start + block]), format="flt", layout="mono"
                    )
                    chunk.sample_rate = sample_rate
                    chunk.pts = start
                    out.mux(sound.encode(chunk))
                out.mux(sound.encode(None))
    return path


def _muxer_for(path: Path) -> str | None:
    return {".mp4": "mp4", ".m4v": "mp4", ".mov": "mov", ".mkv": "matroska", ".webm": "webm", ".avi": "avi"}.get(
        path.suffix.lower()
    )
