"""Tux Paint stamps (Debian ``tuxpaint-stamps-default``): real images with one English caption each.

Layout (``/usr/share/tuxpaint/stamps``, fetched by ``scripts/fetch_debian_assets.sh``
into ``~/.cache/videotext/debian/tuxpaint/stamps``): a folder tree where a stamp
``NAME`` is ``NAME.png`` (and/or ``NAME.svg``) with ``NAME.txt`` beside it. The
``.txt`` holds the English description as its plain first line, followed by
translations as ``<locale>.utf8=<text>`` lines; the caption is the first line that is
not a translation. ``NAME_mirror.png`` / ``NAME_flip.png`` are pre-rendered variants of
stamp ``NAME``, not stamps of their own.

Kept: stamps with a PNG and a caption (kind ``"image"``, id = path relative to the
stamps folder without extension, e.g. ``animals/birds/cardinal``). Skipped and counted
in ``meta["skipped"]``: SVG-only stamps (``no_png``), PNGs without a caption
(``no_caption``) and the mirror/flip variants (``variants``). Splits: seeded
``"train"`` / ``"val"`` / ``"test"`` = 80 / 10 / 10 % (`fractions`, `seed`), drawn over
the sorted ids so they are the same on every machine.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from videotext.data.readers._common import MediaIndex, build, existing_dir, seeded_split
from videotext.data.readers.records import BadRecords
from videotext.data.schema import Video, VideoTextDataset

TRANSLATION = re.compile(r"^[A-Za-z]{2,3}(?:_[A-Za-z]{2,3})?(?:@\w+)?\.(?:utf8|UTF-8)=")
VARIANT = re.compile(r"_(?:mirror|flip)$")
DEFAULT_FRACTIONS = {"train": 0.8, "val": 0.1, "test": 0.1}


def default_stamps_dir() -> Path:
    """Where ``make assets`` puts the stamps (``$VIDEOTEXT_ASSETS`` overrides the cache folder)."""
    cache = os.environ.get("VIDEOTEXT_ASSETS") or Path.home() / ".cache" / "videotext" / "debian"
    return Path(cache) / "tuxpaint" / "stamps"


def read_tuxpaint(
    path: str | Path | None = None, *, fractions: dict[str, float] | None = None, seed: int = 0,
    on_bad: str = "repair",
) -> VideoTextDataset:
    """Read a Tux Paint stamps folder into an image-caption dataset with seeded splits."""
    records = BadRecords(on_bad, path)
    root = existing_dir(path if path is not None else default_stamps_dir(), "Tux Paint stamps folder").resolve()
    media = MediaIndex(root, scan=False)
    skipped = {"no_png": 0, "no_caption": 0, "variants": 0}
    videos = []
    for txt in sorted(root.rglob("*.txt")):
        if not txt.with_suffix(".png").is_file():
            skipped["no_png"] += 1
    for png in sorted(root.rglob("*.png")):
        if VARIANT.search(png.stem) and png.with_name(VARIANT.sub("", png.stem) + ".png").is_file():
            skipped["variants"] += 1
            continue
        caption = stamp_caption(png.with_suffix(".txt"))
        if caption is None:
            skipped["no_caption"] += 1
            continue
        rel = png.relative_to(root).as_posix()
        stamp = rel[: -len(".png")]
        captions = records.captions([(f"{stamp}.txt", caption)], png.with_suffix(".txt"), stamp)
        videos.append(Video(id=stamp, path=rel, duration=0.0, kind="image", captions=captions))
    splits = seeded_split([v.id for v in videos], fractions or DEFAULT_FRACTIONS, seed)
    return build("tuxpaint", videos, splits, root, media, {"skipped": skipped, "seed": seed}, records)


def stamp_caption(txt: Path) -> str | None:
    """The English caption of a stamp's ``.txt`` (None when missing or empty)."""
    if not txt.is_file():
        return None
    for line in txt.read_text(encoding="utf-8", errors="replace").splitlines():
        line = line.strip().lstrip("\ufeff")
        if line and not TRANSLATION.match(line):
            return line
    return None
