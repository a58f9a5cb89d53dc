"""Uniform borders around the picture: letterbox and pillarbox bars, a picture inside a plain frame.

A copy padded to another aspect ratio, or shown smaller inside a plain frame, holds the same
picture as its source at another place and scale; experts that describe where things lie in
the frame (the `layout` expert, a centre crop for a network) see a different frame unless the
border is cut first. The border is found over all frames of a stretch of video at once, as
ffmpeg's cropdetect does, and only where it is plain (one colour within compression noise) and
centred (opposite sides of about the same size and colour), so a dark sky, a static title bar
or a logo in a corner is never taken for one.
"""
from __future__ import annotations

import numpy as np

TOLERANCE = 24  # levels a border pixel may differ from the border's colour (compression noise)
OUTLIERS = 0.01  # share of a border line's pixels (over every frame) allowed beyond the tolerance
MIN_SHARE = 0.03  # a border covers at least this share of the side
SYMMETRY = 0.03  # opposite borders differ by at most this share of the side (+2 px): centred
MIN_KEPT = 0.3  # the picture left is at least this share of each side (else nothing is cut)


def _plain_run(frames: np.ndarray, axis: int, from_end: bool) -> tuple[int, np.ndarray]:
    """Lines (rows for axis 1, columns for axis 2) from one edge that are all the edge's colour:
    their count, and that colour [3]."""
    lines = np.moveaxis(frames, axis, 0)  # [L, T, other, 3]
    if from_end:
        lines = lines[::-1]
    colour = np.median(lines[0].reshape(-1, 3), axis=0)  # [3]
    off = (np.abs(lines.astype(np.int16) - colour.astype(np.int16)).max(-1) > TOLERANCE)  # [L, T, other]
    plain = off.reshape(len(lines), -1).mean(1) <= OUTLIERS  # [L]
    run = len(plain) if plain.all() else int(np.argmin(plain))
    return run, colour


def border_box(frames: np.ndarray) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) pixels of plain, centred border of frames [T, H, W, 3] (uint8);
    zeros where there is none."""
    if frames.ndim != 4 or not len(frames):
        return 0, 0, 0, 0
    cut = []
    for axis in (1, 2):
        side = frames.shape[axis]
        (a, colour_a), (b, colour_b) = _plain_run(frames, axis, False), _plain_run(frames, axis, True)
        centred = abs(a - b) <= SYMMETRY * side + 2 and np.abs(colour_a - colour_b).max() <= TOLERANCE
        if min(a, b) >= MIN_SHARE * side and centred and side - a - b >= MIN_KEPT * side:
            cut += [a, b]
        else:
            cut += [0, 0]
    return cut[0], cut[1], cut[2], cut[3]


def trim_borders(frames: np.ndarray) -> np.ndarray:
    """Frames [T, H, W, 3] without their plain, centred border ([T, H', W', 3]; the same array
    when there is none)."""
    top, bottom, left, right = border_box(frames)
    if not (top or bottom or left or right):
        return frames
    height, width = frames.shape[1:3]
    return np.ascontiguousarray(frames[:, top : height - bottom, left : width - right])
