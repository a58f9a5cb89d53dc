"""Videos with text on screen: lines drawn over footage for a stated time, Pillow's own font (no
system font needed). Used by the on-screen text tests."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np


def draw_lines(frame: np.ndarray, lines: Sequence[tuple[str, tuple[int, int]]], size: int = 28) -> np.ndarray:
    """`frame` [H, W, 3] uint8 with each (text, (x, y)) drawn in white on a dark band."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.fromarray(frame)
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=size)
    for text, (x, y) in lines:
        left, top, right, bottom = draw.textbbox((x, y), text, font=font)
        draw.rectangle((left - 6, top - 6, right + 6, bottom + 6), fill=(20, 20, 40))
        draw.text((x, y), text, fill=(255, 255, 255), font=font)
    return np.asarray(image)


def texted_video(path: Path, shown: Sequence[tuple[str, float, float, tuple[int, int]]], seconds: float = 6.0,
                 fps: int = 5, size: tuple[int, int] = (360, 640), seed: int = 0, still: bool = False) -> Path:
    """An mp4 of a slowly moving gradient (`still`: a fixed one) where each (text, start, end, (x, y))
    is on screen from start to end seconds."""
    from videotext.data.video_write import write_video

    rng = np.random.default_rng(seed)
    height, width = size
    base = np.linspace(40, 160, width, dtype=np.float32)[None, :, None] * np.ones((height, 1, 3), np.float32)
    tint = rng.uniform(0.6, 1.0, 3).astype(np.float32)
    frames = []
    for i in range(int(seconds * fps)):
        t = i / fps
        frame = np.clip(np.roll(base, 0 if still else i, axis=1) * tint, 0, 255).astype(np.uint8)
        frames.append(draw_lines(frame, [(text, xy) for text, start, end, xy in shown if start <= t < end]))
    return write_video(path, np.stack(frames), fps)
