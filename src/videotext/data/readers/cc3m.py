"""Conceptual Captions 3M (Sharma et al., ACL 2018): web images with cleaned alt-text captions.

Official layout: ``Train_GCC-training.tsv`` and ``Validation_GCC-1.1.0-Validation.tsv``,
tab-separated, no header, two columns: ``<caption>\t<image url>``. The images are
not part of the release, so their file names come from how they were downloaded
(`naming=`):

- ``"crc32"`` (default): ``<folder>/<crc32(url)>`` — what the widely used
  ``DownloadConceptualCaptions`` script writes (folders ``training`` / ``validation``)
  and what Frozen in Time reads;
- ``"index"``: ``<folder>/<row index>`` (0-based row of the TSV).

Two other row shapes are accepted: three columns ``caption, url, file`` (an explicit
relative file name, as in converted/re-downloaded copies) and the downloader's
five-column report ``caption, url, folder, status, file`` (rows whose status is not
200 are skipped and counted in ``meta["skipped"]``).

Images are videos of kind ``"image"``; the id is the relative image path. Rows sharing
an image (duplicate URLs) give one image with several captions. Splits: ``"train"``
and ``"val"`` (there is no public test split).
"""
from __future__ import annotations

import zlib
from pathlib import Path

from videotext.data.readers._common import MediaIndex, add_captions, annotation_files, build, read_table
from videotext.data.readers.records import BadRecords
from videotext.data.schema import Video, VideoTextDataset
from videotext.errors import DataFormatError

FILES = {"Train_GCC-training.tsv": "train", "Validation_GCC-1.1.0-Validation.tsv": "val"}
FOLDERS = {"train": "training", "val": "validation"}


def read_cc3m(path: str | Path, *, video_dir: str | Path | None = None, naming: str = "crc32",
              on_bad: str = "repair") -> VideoTextDataset:
    """Read Conceptual Captions TSV files (the folder holding them, or one file)."""
    records = BadRecords(on_bad, path)
    if naming not in ("crc32", "index"):
        raise DataFormatError(path, "naming", f"unknown naming {naming!r}; known: crc32, index")
    files = annotation_files(path, FILES, "Conceptual Captions")
    media = MediaIndex(video_dir, scan=False)
    videos: dict[str, Video] = {}
    splits: dict[str, list[str]] = {}
    skipped = 0
    for split, file in files.items():
        members: dict[str, None] = {}
        folder = FOLDERS.get(split, split)
        for index, (key, row) in enumerate(read_table(file, delimiter="\t", header=False)):
            image = _image_path(row, index, folder, naming, file, key)
            if image is None:
                skipped += 1
                continue
            video = add_captions(videos, image, lambda: Video(id=image, path=image, duration=0.0, kind="image",
                                                              meta={"url": row[1].strip()}),
                                 [(f"{key}.caption", row[0])], records, file)
            if video is not None:
                members[image] = None
        splits[split] = list(members)
    return build("cc3m", videos.values(), splits, next(iter(files.values())), media,
                 {"naming": naming, "skipped": skipped}, records)


def _image_path(row: list[str], index: int, folder: str, naming: str, file: Path, key: str) -> str | None:
    """The relative image file of a row, or None for a failed download in a report."""
    if len(row) == 2:
        url = row[1].strip()
        name = str(zlib.crc32(url.encode("utf-8")) & 0xFFFFFFFF) if naming == "crc32" else str(index)
        return f"{folder}/{name}"
    if len(row) == 3:
        return row[2].strip()
    if len(row) == 5:
        ok = row[3].strip() in ("200", "200.0")  # pandas may write the status as a float
        return row[4].strip() if ok and row[4].strip() else None
    raise DataFormatError(file, key, f"expected 2 columns (caption, url), 3 or 5; got {len(row)}")
