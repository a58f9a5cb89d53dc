"""Parsing helpers shared by every reader: one place for file checks and error messages.

Every helper raises `DataFormatError(path, key, problem)` naming the file and the key
(or CSV row) at fault, so a reader never lets a bare KeyError/JSONDecodeError escape.
"""
from __future__ import annotations

import csv
import json
import random
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from videotext.data.readers.records import BadRecords
from videotext.data.schema import Video, VideoTextDataset
from videotext.errors import DataFormatError

VIDEO_EXTENSIONS = (".mp4", ".avi", ".mkv", ".webm", ".mov", ".m4v", ".mpg", ".mpeg", ".flv", ".3gp")

_MISSING = object()


# --- files ---------------------------------------------------------------------------
def existing_file(path: str | Path, what: str = "annotation file") -> Path:
    """`path` as a Path, or DataFormatError when it is not an existing file."""
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(path, None, f"{what} not found")
    return path


def existing_dir(path: str | Path, what: str = "folder") -> Path:
    path = Path(path)
    if not path.is_dir():
        raise DataFormatError(path, None, f"{what} not found")
    return path


def find_first(folders: Iterable[Path], names: Sequence[str]) -> Path | None:
    """The first `folder/name` that exists, trying every name in every folder in order."""
    for folder in folders:
        for name in names:
            candidate = Path(folder) / name
            if candidate.is_file():
                return candidate
    return None


def annotation_files(path: str | Path, names: dict[str, str], fmt: str) -> dict[str, Path]:
    """Map split name → official file for a multi-file format.

    `path` is either the folder holding the official files (those present are used) or
    one of them (only its split is read). `names` maps official file name → split name.
    """
    path = Path(path)
    if path.is_dir():
        found = {split: path / name for name, split in names.items() if (path / name).is_file()}
        if not found:
            raise DataFormatError(path, None, f"no {fmt} annotation file here; expected one of {sorted(names)}")
        return found
    existing_file(path)
    split = names.get(path.name, path.stem)
    return {split: path}


def load_json(path: str | Path) -> Any:
    """Parse a JSON file; a missing file or bad JSON is a DataFormatError naming the file."""
    path = existing_file(path)
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except json.JSONDecodeError as exc:
        raise DataFormatError(path, None, f"not valid JSON: {exc}") from None
    except UnicodeDecodeError as exc:
        raise DataFormatError(path, None, f"not UTF-8 text: {exc}") from None


def read_id_list(path: str | Path) -> list[str]:
    """One id per line (blank lines and surrounding spaces ignored), as in the split lists."""
    path = existing_file(path, "split list")
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def read_table(
    path: str | Path, *, delimiter: str = ",", header: bool = True, columns: Sequence[str] | None = None,
) -> Iterator[tuple[str, dict[str, str] | list[str]]]:
    """Yield `(row key, row)` from a CSV/TSV file.

    With `header`, rows are dicts and every name in `columns` must be in the header;
    without, rows are lists of cells. The row key (``"row 3"``, counting lines from 1)
    is what error messages name.
    """
    path = existing_file(path)
    with open(path, encoding="utf-8-sig", newline="") as handle:  # tolerate a BOM (Excel exports)
        quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
        reader = csv.reader(handle, delimiter=delimiter, quoting=quoting)
        try:
            if header:
                names = next(reader, None)
                if names is None:
                    raise DataFormatError(path, "header", "empty file: expected a header row")
                names = [n.strip() for n in names]
                missing = [c for c in columns or () if c not in names]
                if missing:
                    raise DataFormatError(path, missing[0], f"column missing from header {names}")
            for row in reader:
                key = f"row {reader.line_num}"
                if not row or not any(cell.strip() for cell in row):
                    continue
                if header:
                    if len(row) != len(names):
                        raise DataFormatError(path, key, f"expected {len(names)} columns, got {len(row)}")
                    yield key, dict(zip(names, row))
                else:
                    yield key, row
        except csv.Error as exc:
            raise DataFormatError(path, f"row {reader.line_num}", f"bad CSV: {exc}") from None
        except UnicodeDecodeError as exc:
            raise DataFormatError(path, None, f"not UTF-8 text: {exc}") from None


# --- typed access ----------------------------------------------------------------------
def field(obj: Any, key: str, path: Path | str, where: str, kind: type | tuple[type, ...] | None = None,
          default: Any = _MISSING) -> Any:
    """`obj[key]`, checked: the error names `where.key` in `path`."""
    name = f"{where}.{key}" if where else key
    if not isinstance(obj, dict):
        raise DataFormatError(path, where or key, f"expected an object, got {type(obj).__name__}")
    if key not in obj:
        if default is not _MISSING:
            return default
        raise DataFormatError(path, name, "required key is missing")
    return obj[key] if kind is None else expect(obj[key], kind, path, name)


def expect(value: Any, kind: type | tuple[type, ...], path: Path | str, key: str) -> Any:
    """`value` if it has type `kind`, else a DataFormatError naming `key`."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise DataFormatError(path, key, f"expected {expected}, got {type(value).__name__}")
    return value


def number(value: Any, path: Path | str, key: str) -> float:
    """A float from a JSON number or a numeric string."""
    if isinstance(value, bool):
        raise DataFormatError(path, key, f"expected a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise DataFormatError(path, key, f"expected a number, got {value!r}") from None


def span(value: Any, path: Path | str, key: str) -> tuple[float, float]:
    """A `[start, end]` pair of seconds, as written (a reversed pair is left to `BadRecords`)."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise DataFormatError(path, key, f"expected [start, end], got {value!r}")
    return number(value[0], path, key), number(value[1], path, key)


def strings(value: Any, path: Path | str, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise DataFormatError(path, key, "expected a list of strings")
    return [s.strip() for s in value]


_ISO_DURATION = re.compile(
    r"^P(?:(?P<d>\d+(?:\.\d+)?)D)?(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)


def iso8601_duration(text: str, path: Path | str, key: str) -> float:
    """Seconds of an ISO 8601 duration such as WebVid's ``PT00H00M11S``."""
    match = _ISO_DURATION.match(text.strip())
    if not match or not any(match.groupdict().values()):
        raise DataFormatError(path, key, f"expected an ISO 8601 duration like PT00H00M11S, got {text!r}")
    parts = {k: float(v) if v else 0.0 for k, v in match.groupdict().items()}
    return parts["d"] * 86400 + parts["h"] * 3600 + parts["m"] * 60 + parts["s"]


def clock_time(text: str, path: Path | str, key: str) -> float:
    """Seconds of ``HH.MM.SS.mmm`` / ``HH:MM:SS.mmm`` (LSMDC) or of a plain number."""
    text = text.strip()
    parts = re.split(r"[.:]", text)
    try:
        if len(parts) == 4:  # HH.MM.SS.mmm
            hours, minutes, seconds, millis = parts
            return int(hours) * 3600 + int(minutes) * 60 + int(seconds) + float(f"0.{millis}")
        if len(parts) == 3 and ":" in text:  # HH:MM:SS
            hours, minutes, seconds = parts
            return int(hours) * 3600 + int(minutes) * 60 + float(seconds)
        return float(text)
    except ValueError:
        raise DataFormatError(path, key, f"expected a time like 00.01.02.345, got {text!r}") from None


# --- media files -----------------------------------------------------------------------
class MediaIndex:
    """Where each item's media file lives under `video_dir`.

    Without a `video_dir` every item gets the conventional relative name
    (``f"{id}{extension}"``); with one, the folder is scanned once (recursively) and an
    item whose file is found by stem gets its real relative path, so `.avi`, `.mkv`,
    nested `training/101/x.mp4` layouts and the like work without configuration. Items
    not found keep the conventional name and are counted in `missing`. With
    ``scan=False`` (layouts that fix the path, such as WebVid's millions of files) the
    folder only becomes the dataset root.
    """

    def __init__(self, video_dir: str | Path | None, extensions: Sequence[str] = VIDEO_EXTENSIONS, scan: bool = True):
        self.root = None if video_dir is None else existing_dir(video_dir, "video_dir").resolve()
        self.scanned = scan and self.root is not None
        self._missing: set[str] = set()
        self._by_name: dict[str, str] = {}
        if self.scanned:
            for file in sorted(self.root.rglob("*")):
                if file.suffix.lower() in extensions and file.is_file():
                    rel = file.relative_to(self.root).as_posix()
                    self._by_name.setdefault(rel, rel)
                    self._by_name.setdefault(file.stem, rel)
                    self._by_name.setdefault(file.name, rel)

    def path(self, name: str, default: str) -> str:
        """The relative media path of item `name` (a stem, a file name, or a relative path)."""
        if not self.scanned:
            return default
        found = self._by_name.get(default) or self._by_name.get(name)
        if found is None:
            self._missing.add(default)
            return default
        return found

    def found(self, name: str, default: str) -> bool:
        """Whether item `name`'s media file is under `video_dir` (True when no folder was scanned:
        nothing to check against)."""
        return not self.scanned or bool(self._by_name.get(default) or self._by_name.get(name))

    @property
    def missing(self) -> int:
        """How many items' media files were not found under `video_dir`."""
        return len(self._missing)

    def describe(self) -> dict[str, Any]:
        if self.root is None:
            return {}
        return {"video_dir": str(self.root), **({"missing_media": self.missing} if self.scanned else {})}


# --- datasets --------------------------------------------------------------------------
def read_split_files(files: dict[str, Path], read_one: Callable[[str, Path], list[Video]]
                     ) -> tuple[list[Video], dict[str, list[str]]]:
    """Read one annotation file per split: all videos in file order, and each split's ids."""
    videos: list[Video] = []
    splits: dict[str, list[str]] = {}
    for split, file in files.items():
        batch = read_one(split, file)
        videos.extend(batch)
        splits[split] = [v.id for v in batch]
    return videos, splits


def add_captions(videos: dict[str, Video], video_id: str, make: Callable[[], Video],
                 captions: Iterable[tuple[str, str]], records: BadRecords, file: Path | str) -> Video | None:
    """Get-or-create video `video_id` and append its new ``(record key, caption)`` items.

    Used where an official file repeats an id on several rows (LSMDC, CC3M). Captions go
    through `records` (empty ones and duplicates are dropped and reported); a video is
    only created when at least one caption is kept, so a row whose only caption is
    dropped adds nothing (None).
    """
    video = videos.get(video_id)
    kept = records.captions(captions, file, video_id, video.captions if video else None)
    if video is None:
        if not kept:
            return None
        video = videos[video_id] = make()
    video.captions.extend(kept)
    return video


def build(
    name: str, videos: Iterable[Video], splits: dict[str, list[str]], source: Path | str,
    media: MediaIndex | None = None, meta: dict[str, Any] | None = None, records: BadRecords | None = None,
) -> VideoTextDataset:
    """Assemble and validate a dataset.

    `meta` records the source file and protocol choices; `records` (the read's
    `BadRecords`) adds its report as ``meta["bad_records"]``.
    """
    info = {"source": str(source), **(media.describe() if media else {}), **(meta or {})}
    if records is not None:
        info["bad_records"] = records.report()
    dataset = VideoTextDataset(name, videos, splits, root=media.root if media else None, meta=info)
    dataset.validate(source)
    return dataset


def carve(dataset: VideoTextDataset, val_fraction: float | None, val_count: int | None, val_seed: int,
          source: str = "train") -> None:
    """Carve a seeded validation split out of `source` (see `VideoTextDataset.carve_validation`)."""
    dataset.carve_validation(source, fraction=val_fraction, count=val_count, seed=val_seed, name="val")


def seeded_split(ids: Sequence[str], fractions: dict[str, float], seed: int) -> dict[str, list[str]]:
    """Split ids into named parts by fraction, drawn with `random.Random(seed)` over sorted ids.

    The last part takes the remainder, so every id lands in exactly one part.
    """
    order = sorted(ids)
    random.Random(seed).shuffle(order)
    names = list(fractions)
    out: dict[str, list[str]] = {}
    start = 0
    for i, part in enumerate(names):
        stop = len(order) if i == len(names) - 1 else start + round(len(order) * fractions[part])
        out[part] = sorted(order[start:stop])
        start = stop
    return out

