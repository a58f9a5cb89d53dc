"""Tensor transforms of decoded frames [T, C, H, W]: resize, crops, flip, normalisation.

Pure tensor operations on what `videotext.data.video` decodes; the same transform is
applied to every frame of a clip, so a clip keeps its geometry.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from videotext.data.video import output_size


def to_tensor(frames: np.ndarray):
    """uint8 frames [T, H, W, 3] → uint8 torch tensor [T, 3, H, W] (shares memory)."""
    return torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2)


def resize_short(video, size: int, antialias: bool = True):
    """Resize so the shorter side is `size` (bilinear), keeping aspect and dtype."""
    height, width = video.shape[-2:]
    out_hw = output_size(width, height, size)
    if (height, width) == out_hw:
        return video
    x = video.float() if not video.is_floating_point() else video
    x = F.interpolate(x, size=out_hw, mode="bilinear", align_corners=False, antialias=antialias)
    if video.dtype == torch.uint8:
        return x.round_().clamp_(0, 255).to(torch.uint8)
    return x.to(video.dtype)


def center_crop(video, size: int | tuple[int, int]):
    """The central `size` (int or (H, W)) crop of [T, C, H, W]."""
    crop_h, crop_w = (size, size) if isinstance(size, int) else size
    height, width = video.shape[-2:]
    if crop_h > height or crop_w > width:
        raise ValueError(f"crop {crop_h}x{crop_w} larger than frames {height}x{width}")
    top, left = (height - crop_h) // 2, (width - crop_w) // 2
    return video[..., top : top + crop_h, left : left + crop_w]


def random_crop(video, size: int | tuple[int, int], generator=None):
    """A random `size` crop, the same for every frame (a clip keeps its geometry)."""
    crop_h, crop_w = (size, size) if isinstance(size, int) else size
    height, width = video.shape[-2:]
    if crop_h > height or crop_w > width:
        raise ValueError(f"crop {crop_h}x{crop_w} larger than frames {height}x{width}")
    top = int(torch.randint(0, height - crop_h + 1, (1,), generator=generator))
    left = int(torch.randint(0, width - crop_w + 1, (1,), generator=generator))
    return video[..., top : top + crop_h, left : left + crop_w]


def hflip(video):
    """Mirror frames left-right."""
    return video.flip(-1)


def normalize(video, mean: Sequence[float], std: Sequence[float]):
    """uint8 [T, C, H, W] (0..255) or float (0..1) → float32 (x/255 − mean) / std per channel."""
    x = video.float() / 255.0 if video.dtype == torch.uint8 else video.float()
    mean_t = torch.as_tensor(mean, dtype=x.dtype, device=x.device).view(-1, 1, 1)
    std_t = torch.as_tensor(std, dtype=x.dtype, device=x.device).view(-1, 1, 1)
    return (x - mean_t) / std_t
