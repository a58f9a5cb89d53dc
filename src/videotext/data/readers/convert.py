"""An official annotation format read into a manifest (`videotext dataset convert`), and a dataset's
counts compared with the published ones (`videotext dataset check`)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from videotext.data.readers import canonical_format, read_dataset
from videotext.data.readers.counts import check_lines, compare, is_manifest
from videotext.data.readers.records import examples, report_path, summary
from videotext.data.schema import VideoTextDataset
from videotext.errors import VideoTextError
from videotext.io import write_json


def convert_dataset(format: str, path: str | os.PathLike, out: str | os.PathLike,
                    **options: Any) -> tuple[VideoTextDataset, Path, str]:
    """Read `path` in `format` (reader `options`, `on_bad` among them) and write the manifest `out` and its
    bad-record report beside it; returns the dataset, the report's path and its one-line summary."""
    dataset = read_dataset(format, path, **options)
    dataset.save(out)
    report = report_path(out)
    write_json(report, dataset.meta.get("bad_records"))
    return dataset, report, summary(dataset.meta.get("bad_records"))


def check_dataset(name: str, path: str | os.PathLike, **options: Any) -> tuple[list[str], bool | None]:
    """The lines comparing the dataset at `path` (its official files, or a manifest made by convert) with
    the published counts of `name`, then its bad records; and whether every count matches (None when
    nothing is published to compare with)."""
    name = canonical_format(name)
    fmt = "manifest" if is_manifest(path) and name != "manifest" else name
    dataset = read_dataset(fmt, path, **options)
    if fmt == "manifest" and dataset.name != name:
        raise VideoTextError(f"{path}: the manifest holds {dataset.name!r}, not {name!r}")
    entry, rows = compare(dataset, name)
    lines = [*check_lines(name, entry, rows, dataset), summary(dataset.meta.get("bad_records")),
             *examples(dataset.meta.get("bad_records"))]
    return lines, (all(row.ok for row in rows) if rows else None)
