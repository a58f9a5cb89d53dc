"""LSMDC 2016 (Rohrbach et al.): movie clips with audio-description sentences.

Official layout: tab-separated, no header, six columns per row::

    <CLIP_ID>\t<START_ALIGNED>\t<END_ALIGNED>\t<START_EXTRACTED>\t<END_EXTRACTED>\t<SENTENCE>
    0001_American_Beauty_00.00.51.926-00.00.54.129\t00.00.51.926\t00.00.54.129\t00.00.51.000\t00.00.55.000\tSOMEONE ...

Files → splits: ``LSMDC16_annos_training.csv`` → ``"train"``, ``LSMDC16_annos_val.csv``
→ ``"val"`` (a real validation set), ``LSMDC16_challenge_1000_publictect.csv`` →
``"test"`` (the 1000-clip retrieval test set of CE, MMT, Frozen in Time, CLIP4Clip),
``LSMDC16_annos_test.csv`` → ``"test_full"`` when present. A clip id may repeat on
several rows (several sentences): they become one video with several captions; a clip
listed in two files is one video in both splits. The four times (movie seconds) go to
`meta`; duration is the aligned span. Media: ``<movie>/<clip_id>.avi`` where
``<movie>`` is the clip id without its time suffix (found anywhere under `video_dir`).
"""
from __future__ import annotations

from pathlib import Path

from videotext.data.readers._common import MediaIndex, add_captions, annotation_files, build, clock_time, read_table
from videotext.data.readers.records import BadRecords
from videotext.data.schema import Video, VideoTextDataset
from videotext.errors import DataFormatError

FILES = {
    "LSMDC16_annos_training.csv": "train",
    "LSMDC16_annos_val.csv": "val",
    "LSMDC16_challenge_1000_publictect.csv": "test",
    "LSMDC16_annos_test.csv": "test_full",
}
COLUMNS = ("clip_id", "start_aligned", "end_aligned", "start_extracted", "end_extracted", "sentence")


def read_lsmdc(path: str | Path, *, video_dir: str | Path | None = None, on_bad: str = "repair") -> VideoTextDataset:
    """Read LSMDC 2016 from its folder (or one of its csv files)."""
    records = BadRecords(on_bad, path)
    files = annotation_files(path, FILES, "LSMDC")
    media = MediaIndex(video_dir)
    videos: dict[str, Video] = {}
    splits: dict[str, list[str]] = {}
    for split, file in files.items():
        members: dict[str, None] = {}
        for key, row in read_table(file, delimiter="\t", header=False):
            if len(row) != len(COLUMNS):
                raise DataFormatError(
                    file, key, f"expected {len(COLUMNS)} tab-separated columns ({', '.join(COLUMNS)}), got {len(row)}"
                )
            clip_id = row[0].strip()
            if add_captions(videos, clip_id, lambda: _video(file, key, row, media), [(f"{key}.sentence", row[5])],
                            records, file) is not None:
                members[clip_id] = None
        splits[split] = list(members)
    return build("lsmdc", videos.values(), splits, next(iter(files.values())), media, records=records)


def _video(file: Path, key: str, row: list[str], media: MediaIndex) -> Video:
    clip_id = row[0].strip()
    times = {name: clock_time(value, file, f"{key}.{name}") for name, value in zip(COLUMNS[1:5], row[1:5])}
    movie = clip_id.rsplit("_", 1)[0]
    return Video(
        id=clip_id, path=media.path(clip_id, f"{movie}/{clip_id}.avi"),
        duration=round(times["end_aligned"] - times["start_aligned"], 3),
        meta={"movie": movie, **times},
    )
