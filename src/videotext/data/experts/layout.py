"""The `layout` expert: where the colours lie in each frame, a grid of cell means (192-d).

Per step (default 1 s) the centre frame's central square is averaged into `grid` × `grid`
RGB cells (area resampling, [0, 1] pixels), each channel's frame mean is subtracted, the
cells divided by their spread, and the grid added to its left-right mirror image, so a
mirrored copy gives the same values. What it tells apart is what an ImageNet network's
pooled features hardly do: frames of one style with different objects in different places
and colours (the synthetic videos, one dark background with small shapes). The `conse` run
joins it into its video vector for query by example and near-duplicate groups.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from videotext.data.experts.appearance import CentreFrameExpert

GRID = 8  # cells per side: 8 × 8 × 3 = 192 values (a cell is 1/8 of the square, ~10 % crops move little)


class LayoutExpert(CentreFrameExpert):
    """Mirror-symmetric colour layout of the centre frame of each step (no network)."""

    name = "layout"
    version = "1"

    def __init__(self, rate: float = 1.0, grid: int = GRID, max_steps: int | None = None, trim_borders: bool = False):
        self.rate = float(rate)
        self.grid = int(grid)
        self.dim = 3 * self.grid * self.grid
        self.frame_size = 8 * self.grid  # decoded at least this large (other experts may ask for more)
        self.max_steps = max_steps
        self.trim_borders = bool(trim_borders)

    def settings(self) -> dict[str, Any]:
        return {"grid": self.grid, **self.capped()}

    def prepare(self, frames: np.ndarray, shown: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Layout vectors [T, 3·grid²] of frames [T, H, W, 3] (uint8)."""
        import cv2

        out = np.zeros((len(frames), self.dim), np.float32)
        for i, frame in enumerate(self.picture(frames)):
            height, width = frame.shape[:2]
            side = min(height, width)
            top, left = (height - side) // 2, (width - side) // 2
            square = np.ascontiguousarray(frame[top : top + side, left : left + side])
            cells = cv2.resize(square, (self.grid, self.grid), interpolation=cv2.INTER_AREA).astype(np.float32) / 255.0
            cells -= cells.mean((0, 1), keepdims=True)  # [G, G, 3]: each channel about its frame mean
            cells /= cells.std() + 1e-3
            out[i] = (cells + cells[:, ::-1]).reshape(-1)  # mirror-symmetric
        return out
