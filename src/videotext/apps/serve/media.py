"""The media the page shows: JPEG thumbnails at clip starts (an LRU in memory) and the checks of a
Range header before a file is streamed (Starlette answers well-formed ranges with 206)."""
from __future__ import annotations

import io
import re
import threading
from collections import OrderedDict
from pathlib import Path

from fastapi import HTTPException

from videotext.data.video import probe, read_frames
from videotext.search.entries import Entry

THUMBNAIL_CACHE = 1024  # JPEGs kept in memory (~5 KB each at 160 px)
THUMBNAIL_SIZE = 240
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp")
_RANGE_PART = re.compile(r"(\d{0,18})-(\d{0,18})", re.ASCII)  # 18 digits: any real file size, no huge ints


class Thumbnails:
    """JPEG frames at clip starts, an LRU of `capacity` entries (decoding costs ~20 ms)."""

    def __init__(self, capacity: int = THUMBNAIL_CACHE, size: int = THUMBNAIL_SIZE):
        self.capacity, self.size = capacity, size
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, entry: Entry, at: float | None = None) -> bytes:
        """The JPEG of `entry` at its start, or at `at` seconds into its video (a moment's start)."""
        key = entry.id if at is None else f"{entry.id}\n{round(at, 2)}"
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        data = self._render(entry, at)
        with self._lock:
            self._cache[key] = data
            while len(self._cache) > self.capacity:
                self._cache.popitem(last=False)
        return data

    def _render(self, entry: Entry, at: float | None = None) -> bytes:
        from PIL import Image

        path = Path(entry.path)  # type: ignore[arg-type]
        if path.suffix.lower() in IMAGE_SUFFIXES:
            with Image.open(path) as img:
                img = img.convert("RGB")
        else:
            info = probe(path)
            start = (entry.start or 0.0) if at is None else at
            end = entry.end if entry.end is not None and at is None else info.duration
            t = min(start + 0.1, (start + end) / 2, max(info.duration - 1e-3, 0.0))  # a frame inside the clip
            img = Image.fromarray(read_frames(path, [t])[0])
        img.thumbnail((self.size, self.size))
        out = io.BytesIO()
        img.save(out, format="JPEG", quality=85)
        return out.getvalue()


def check_range(header: str, size: int) -> None:
    """Reject a malformed or unsatisfiable Range header with a JSON 4xx (Starlette would
    answer those in plain text); well-formed ones are served by FileResponse."""
    units, sep, spec = header.partition("=")
    if not sep or units.strip().lower() != "bytes" or len(header) > 512:
        raise HTTPException(400, f"Range {header[:80]!r}: only 'bytes=start-end' ranges are supported")
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts or len(parts) > 16:
        raise HTTPException(400, f"Range {header[:80]!r}: expected 1 to 16 byte ranges")
    for part in parts:
        match = _RANGE_PART.fullmatch(part.replace(" ", ""))
        if not match or not any(match.groups()):
            raise HTTPException(400, f"Range {header[:80]!r}: {part[:40]!r} is not start-end")
        first, last = match.groups()
        if first and last and int(first) > int(last):
            raise HTTPException(400, f"Range {header[:80]!r}: start after end in {part!r}")
        if (first and int(first) >= size) or (not first and int(last) == 0):
            raise HTTPException(416, f"Range {header[:80]!r}: nothing of the file's {size} bytes is in range",
                                headers={"Content-Range": f"bytes */{size}"})
