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
    return flow_statistics_batch(flow[None], np.array([dt]), grid, moving_px)[0]


def flow_statistics_batch(flows: np.ndarray, dts: np.ndarray, grid: int = 3, moving_px: float = 0.5) -> np.ndarray:
    """`flow_statistics` of P flow fields [P, h, w, 2] over their Δt [P] at once: [P, D] float32
    (one pass of numpy calls for a video's frame pairs instead of one per pair)."""
    count, height, width = flows.shape[:3]
    pixels = height * width
    # velocity in frame widths per second; the divisor rounded to float32 as a scalar would be
    velocity = flows / (width * np.asarray(dts, dtype=np.float64)).astype(np.float32)[:, None, None, None]
    vx, vy = velocity[..., 0].reshape(count, -1), velocity[..., 1].reshape(count, -1)  # [P, h·w]
    speed = np.hypot(vx, vy)  # [P, h·w]
    moving = (np.hypot(flows[..., 0], flows[..., 1]) > moving_px).reshape(count, -1)  # [P, h·w]
    moved = moving.sum(1)  # [P]
    share = np.maximum(moved, 1)
    out = np.empty((count, N_GLOBAL + N_BINS * grid * grid), np.float64)
    out[:, 0], out[:, 1] = vx.mean(1), vy.mean(1)
    out[:, 2], out[:, 3] = speed.mean(1), speed.std(1)
    out[:, 4] = moved / pixels
    out[:, 5] = np.where(moved > 0, (vx * moving).sum(1) / share, 0.0)
    out[:, 6] = np.where(moved > 0, (vy * moving).sum(1) / share, 0.0)
    out[:, 7] = np.where(moved > 0, (speed * moving).sum(1) / share, 0.0)
    angle = np.arctan2(vy, vx)  # [P, h·w] radians, y down
    bins = np.round(angle / (2 * np.pi / N_BINS)).astype(np.int64) % N_BINS
    rows = np.minimum(np.arange(height) * grid // height, grid - 1)
    cols = np.minimum(np.arange(width) * grid // width, grid - 1)
    cell = (rows[:, None] * grid + cols[None, :]).reshape(-1)  # [h·w]
    cells = grid * grid
    slots = (np.arange(count)[:, None] * cells + cell[None, :]) * N_BINS + bins  # [P, h·w]
    hist = np.bincount(slots.ravel(), weights=speed.ravel(), minlength=count * cells * N_BINS)
    per_cell = np.bincount(cell, minlength=cells).astype(np.float64)  # pixels per cell
    out[:, N_GLOBAL:] = (hist.reshape(count, cells, N_BINS) / per_cell[None, :, None]).reshape(count, -1)
    return out.astype(np.float32)


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
        flows, dts, owner = [], [], []  # every frame pair of the video, its Δt and its step
        for step, (images, times) in enumerate(zip(grey, shown)):
            for a in range(m - 1):
                dt = float(times[a + 1] - times[a])
                if dt <= 0:  # the same decoded frame twice: no motion observable
                    continue
                flows.append(cv2.calcOpticalFlowFarneback(images[a], images[a + 1], None, **FARNEBACK))
                dts.append(dt)
                owner.append(step)
        if flows:
            stats = flow_statistics_batch(np.stack(flows), np.array(dts), self.grid, self.moving_px)  # [P, D]
            owner_steps = np.array(owner)
            for step in np.unique(owner_steps):
                out[step] = stats[owner_steps == step].mean(axis=0)
        return out
