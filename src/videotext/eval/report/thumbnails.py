"""Thumbnails of the report's qualitative examples, copied into `report/thumbs/`.

Files or arrays are saved as downscaled PNGs inside the report folder, so the page never
points outside it. A thumbnail that cannot be read becomes a placeholder and a warning; it
never stops the report.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from videotext.eval.report.plots import make_readable
from videotext.io import atomic_path

THUMB_MAX_SIDE = 320


def save_thumbnail(thumbnail: Any, path: Path) -> str | None:
    """Copy or save one thumbnail as a downscaled PNG; the name relative to report/."""
    from PIL import Image

    if thumbnail is None:
        return None
    try:
        if isinstance(thumbnail, (str, os.PathLike)):
            with Image.open(thumbnail) as opened:
                image = opened.convert("RGB")
        else:
            image = Image.fromarray(_as_uint8_image(np.asarray(thumbnail)))
        image.thumbnail((THUMB_MAX_SIDE, THUMB_MAX_SIDE))
        with atomic_path(path) as tmp:
            image.save(tmp, format="PNG")
        make_readable(path)
    except (OSError, ValueError, TypeError) as error:
        where = thumbnail if isinstance(thumbnail, (str, os.PathLike)) else "array"
        warnings.warn(f"report thumbnail {where}: {error}; shown as a placeholder", stacklevel=4)
        return None
    return f"{path.parent.name}/{path.name}"


def _as_uint8_image(array: np.ndarray) -> np.ndarray:
    if array.ndim == 3 and array.shape[0] in (1, 3) and array.shape[-1] not in (1, 3, 4):
        array = array.transpose(1, 2, 0)  # [C, H, W] -> [H, W, C]
    if array.ndim == 3 and array.shape[-1] == 1:
        array = array[..., 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[-1] not in (3, 4)):
        raise ValueError(f"expected an image array [H, W, 3], got shape {tuple(array.shape)}")
    if array.dtype != np.uint8:
        array = array.astype(np.float64)
        if array.size and np.nanmax(array) <= 1.0:
            array = array * 255.0
        array = np.clip(np.nan_to_num(array), 0, 255).round().astype(np.uint8)
    return np.ascontiguousarray(array)


def remove_stale_thumbnails(thumbs: Path, page: str) -> None:
    """Drop thumbnails of an earlier report in the same folder that this page does not use."""
    if not thumbs.is_dir():
        return
    for file in thumbs.glob("q*_r*.png"):
        if f'src="thumbs/{file.name}"' not in page:
            file.unlink(missing_ok=True)
