"""The `motion` expert: optical-flow statistics per step (OpenCV Farneback), 80-d.

Per step (default 1 s) `frames_per_step` frames (default 4) are sampled at equal
spacing inside the step, converted to grey at `flow_size` (shorter side, default
128), and dense Farneback flow is computed between consecutive ones. Flow is
expressed as velocity in frame widths per second (pixels / analysis width / Δt, Δt
the true time between the two decoded frames), so the numbers do not depend on
resolution or sampling rate. The step's features average its frame pairs:

    [0:8]   global:  mean dx, mean dy, mean |v|, std |v|,
                     moving fraction (displacement > `moving_px` pixels),
                     mean dx, mean dy, mean |v| over moving pixels
    [8:80]  a `grid`×`grid` (3×3) grid of cells, row-major, each an 8-bin histogram
            of flow direction weighted by |v| and divided by the cell's pixel count
            (so a cell's bins sum to its mean |v|); bin b is centred on b·45° from +x
            towards +y (image y points down): 0 = right, 2 = down, 4 = left, 6 = up

D = 8 + 8 · grid² (80 for the default 3×3 grid). A step whose frames are all the same
decoded frame (video slower than the sampling) has zero motion.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from videotext.data.experts.base import FrameExpert

N_GLOBAL = 8
N_BINS = 8
FARNEBACK = dict(pyr_scale=0.5, levels=3, winsize=15, iterations=3, poly_n=5, poly_sigma=1.2, flags=0)


def to_grey(frames: np.ndarray, size: int) -> np.ndarray:
    """uint8 RGB [N, H, W, 3] → uint8 grey [N, h, w] with the shorter side `size`."""
    import cv2

    out = []
    for frame in frames:
        grey = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)
        height, width = grey.shape
        scale = size / min(height, width)
        if abs(scale - 1) > 1e-6:
            grey = cv2.resize(grey, (max(1, round(width * scale)), max(1, round(height * scale))), interpolation=cv2.INTER_AREA)
        out.append(grey)
    return np.stack(out)


def flow_statistics(flow: np.ndarray, dt: float, grid: int = 3, moving_px: float = 0.5) -> np.ndarray:
    """The D = 8 + 8·grid² statistics of one flow field [h, w, 2] (pixels) over Δt seconds."""
    height, width = flow.shape[:2]
    velocity = flow / (width * dt)  # frame widths per second, [h, w, 2]
    vx, vy = velocity[..., 0], velocity[..., 1]
    speed = np.hypot(vx, vy)  # [h, w]
    moving = np.hypot(flow[..., 0], flow[..., 1]) > moving_px
    frac = float(moving.mean())
    if moving.any():
        moving_stats = [float(vx[moving].mean()), float(vy[moving].mean()), float(speed[moving].mean())]
    else:
        moving_stats = [0.0, 0.0, 0.0]
    out = [float(vx.mean()), float(vy.mean()), float(speed.mean()), float(speed.std()), frac, *moving_stats]
    angle = np.arctan2(vy, vx)  # radians, y down
    bins = np.round(angle / (2 * np.pi / N_BINS)).astype(np.int64) % N_BINS  # [h, w]
    rows = np.minimum(np.arange(height) * grid // height, grid - 1)
    cols = np.minimum(np.arange(width) * grid // width, grid - 1)
    cell = rows[:, None] * grid + cols[None, :]  # [h, w]
    hist = np.bincount((cell * N_BINS + bins).ravel(), weights=speed.ravel(), minlength=grid * grid * N_BINS)
    counts = np.bincount(cell.ravel(), minlength=grid * grid).astype(np.float64)  # pixels per cell
    hist = hist.reshape(grid * grid, N_BINS) / counts[:, None]
    return np.concatenate([np.asarray(out), hist.ravel()]).astype(np.float32)


class MotionExpert(FrameExpert):
    """Farneback optical-flow statistics per step (see the module docstring for D)."""

    name = "motion"
    version = "1"

    def __init__(
        self, rate: float = 1.0, frames_per_step: int = 4, flow_size: int = 128, grid: int = 3,
        moving_px: float = 0.5,
    ):
        if frames_per_step < 2:
            raise ValueError("frames_per_step must be >= 2 (flow needs frame pairs)")
        self.rate = float(rate)
        self.frames_per_step = int(frames_per_step)
        self.flow_size = int(flow_size)
        self.frame_size = self.flow_size
        self.grid = int(grid)
        self.moving_px = float(moving_px)
        self.dim = N_GLOBAL + N_BINS * self.grid * self.grid

    def settings(self) -> dict[str, Any]:
        return {"frames_per_step": self.frames_per_step, "flow_size": self.flow_size, "grid": self.grid,
                "moving_px": self.moving_px, "farneback": FARNEBACK}

    def frame_times(self, starts: np.ndarray) -> np.ndarray:
        offsets = (np.arange(self.frames_per_step) + 0.5) * self.step / self.frames_per_step  # [m]
        return (starts[:, None] + offsets[None, :]).reshape(-1)  # [T * m]

    def prepare(self, frames: np.ndarray, shown: np.ndarray, starts: np.ndarray) -> np.ndarray:
        import cv2

        m = self.frames_per_step
        grey = to_grey(frames, self.flow_size)  # [T * m, h, w]
        grey = grey.reshape(len(starts), m, *grey.shape[1:])  # [T, m, h, w]
        shown = np.asarray(shown).reshape(len(starts), m)
        out = np.zeros((len(starts), self.dim), np.float32)  # [T, D]
        for step, (images, times) in enumerate(zip(grey, shown)):
            stats = []
            for a in range(m - 1):
                dt = float(times[a + 1] - times[a])
                if dt <= 0:  # the same decoded frame twice: no motion observable
                    continue
                flow = cv2.calcOpticalFlowFarneback(images[a], images[a + 1], None, **FARNEBACK)
                stats.append(flow_statistics(flow, dt, self.grid, self.moving_px))
            if stats:
                out[step] = np.mean(stats, axis=0)
        return out
