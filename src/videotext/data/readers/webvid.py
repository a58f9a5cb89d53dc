"""WebVid-2M / 10M (Bain et al., ICCV 2021): stock-footage videos with their alt-text captions.

Official layout: CSV files with a header row, e.g. ``results_2M_train.csv``,
``results_2M_val.csv`` (``results_10M_*.csv`` for WebVid-10M)::

    videoid,contentUrl,duration,page_dir,name
    21179416,https://.../1.mp4,PT00H00M11S,006001_006050,Aerial shot winter forest

Each row is one video with one caption (``name``); ``duration`` is ISO 8601 and is
converted to seconds; media live at ``{page_dir}/{videoid}.mp4`` (the Frozen-in-Time
download layout) relative to `video_dir`. Splits: a file whose name contains
``train`` → ``"train"``, ``val`` → ``"val"``, else the file stem. Given a folder, every
``*.csv`` in it (and in its ``metadata/`` subfolder) is read. WebVid is a pre-training
set: there is no official test split. ``meta["protocol"]`` is ``"2M"`` or ``"10M"``
after the file names (``results_10M_*`` → ``"10M"``), so that ``videotext dataset check``
compares with the right release.
"""
from __future__ import annotations

from pathlib import Path

from videotext.data.readers._common import MediaIndex, build, existing_file, iso8601_duration, read_table
from videotext.data.readers.records import BadRecords
from videotext.data.schema import Video, VideoTextDataset
from videotext.errors import DataFormatError

COLUMNS = ("videoid", "contentUrl", "duration", "page_dir", "name")


def read_webvid(path: str | Path, *, video_dir: str | Path | None = None, on_bad: str = "repair") -> VideoTextDataset:
    """Read WebVid metadata CSV files (a file, or a folder of them).

    A row is one video with one caption: a row whose caption is empty is dropped (and
    reported) under ``on_bad="repair"`` or ``"drop"``.
    """
    records = BadRecords(on_bad, path)
    files = _csv_files(Path(path))
    media = MediaIndex(video_dir, scan=False)  # the layout fixes the paths; never scan millions of files
    videos: list[Video] = []
    splits: dict[str, list[str]] = {}
    for file in files:
        ids = splits.setdefault(_split_name(file), [])
        for key, row in read_table(file, columns=COLUMNS):
            vid = row["videoid"].strip()
            if not vid:
                raise DataFormatError(file, f"{key}.videoid", "empty video id")
            captions = records.captions([(f"{key}.name", row["name"])], file, vid)
            if not captions:
                continue
            videos.append(Video(
                id=vid, path=f"{row['page_dir'].strip()}/{vid}.mp4",
                duration=iso8601_duration(row["duration"], file, f"{key}.duration"),
                captions=captions, meta={"url": row["contentUrl"].strip()},
            ))
            ids.append(vid)
    sizes = {"10M" if "10m" in f.name.lower() else "2M" for f in files}
    meta = {"protocol": sizes.pop()} if len(sizes) == 1 else {}
    return build("webvid", videos, splits, files[0], media, meta, records)


def _csv_files(path: Path) -> list[Path]:
    if not path.is_dir():
        return [existing_file(path)]
    files = sorted(path.glob("*.csv")) + sorted((path / "metadata").glob("*.csv"))
    if not files:
        raise DataFormatError(path, None, "no WebVid *.csv metadata files here")
    return files


def _split_name(file: Path) -> str:
    stem = file.stem.lower()
    return "train" if "train" in stem else "val" if "val" in stem else file.stem
