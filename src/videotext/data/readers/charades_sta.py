"""Charades-STA (Gao et al., ICCV 2017, "TALL"): sentences with their start and end in Charades videos.

Official layout (jiyanggao/TALL README): ``charades_sta_train.txt`` and ``charades_sta_test.txt``,
one query per line, "[video name] [start time] [end time]##[sentence]"::

    AO8RW 0.0 6.9##a person is putting a book on a shelf.
    AO8RW 1.5 8.2##person begins to play on a phone.

Times are seconds. The files give no durations: they are Charades' own, the ``length`` column
of ``Charades_v1_train.csv`` / ``Charades_v1_test.csv`` (the Charades release; option
``durations``: one of those files or their folder, found beside the annotations by default).
Without them spans are checked for order and length only. Each line becomes a `Moment` of its
video; a video is named by the Charades id and its media default to ``<id>.mp4``.

Protocol: ``charades_sta_train.txt`` → ``"train"``, ``charades_sta_test.txt`` → ``"test"``, and a
seeded ``"val"`` (10 % of the training videos, `val_fraction` / `val_count` / `val_seed`) is carved
from train, so that model selection never sees test (the papers that select on test do not).

Bad records (`on_bad=`, see `videotext.data.readers.records`), each named by file and line: a span
reversed, of zero length, or past its video's duration; a line whose video has no duration in the
Charades files given, or no media file under `video_dir`; an exact duplicate of an earlier line.
"""
from __future__ import annotations

from pathlib import Path

from videotext.data.readers._common import (
    MediaIndex, annotation_files, build, carve, existing_file, number, read_split_files, read_table,
)
from videotext.data.readers.records import BadRecords
from videotext.data.schema import Video, VideoTextDataset
from videotext.errors import DataFormatError

FILES = {"charades_sta_train.txt": "train", "charades_sta_test.txt": "test"}
DURATION_FILES = ("Charades_v1_train.csv", "Charades_v1_test.csv")
SEPARATOR = "##"


def read_charades_sta(
    path: str | Path, *, video_dir: str | Path | None = None, durations: str | Path | None = None,
    val_fraction: float | None = 0.1, val_count: int | None = None, val_seed: int = 0, on_bad: str = "repair",
) -> VideoTextDataset:
    """Read Charades-STA from its folder (or one of its two files)."""
    records = BadRecords(on_bad, path)
    files = annotation_files(path, FILES, "Charades-STA")
    media = MediaIndex(video_dir)
    lengths, length_files = read_durations(durations, next(iter(files.values())).parent, explicit=durations is not None)
    videos, splits = read_split_files(files, lambda split, file: _read_file(file, media, lengths, records))
    meta = {"protocol": "official"}
    if length_files:
        meta["durations"] = [str(f) for f in length_files]
    dataset = build("charades_sta", videos, splits, next(iter(files.values())), media, meta, records)
    if "train" in splits and len(splits["train"]) > 1 and (val_fraction or val_count):
        carve(dataset, val_fraction, val_count, val_seed)
    return dataset


def read_durations(source: str | Path | None, beside: Path, explicit: bool) -> tuple[dict[str, float], list[Path]]:
    """Video id → seconds from Charades' ``Charades_v1_{train,test}.csv`` (``id`` and ``length`` columns):
    the file `source`, the files in folder `source`, else those found in `beside`."""
    if source is not None and Path(source).is_file():
        files = [existing_file(source, "Charades durations file")]
    else:
        folder = Path(source) if source is not None else beside
        files = [folder / name for name in DURATION_FILES if (folder / name).is_file()]
        if explicit and not files:
            raise DataFormatError(folder, "durations", f"no Charades durations file here; expected {DURATION_FILES}")
    lengths: dict[str, float] = {}
    for file in files:
        for key, row in read_table(file, columns=("id", "length")):
            lengths[row["id"].strip()] = number(row["length"], file, f"{key}.length")
    return lengths, files


def _read_file(path: Path, media: MediaIndex, lengths: dict[str, float], records: BadRecords) -> list[Video]:
    videos: dict[str, Video] = {}
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as exc:
        raise DataFormatError(path, None, f"not UTF-8 text: {exc}") from None
    for number_, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        key = f"line {number_}"
        head, separator, sentence = line.partition(SEPARATOR)
        fields = head.split()
        if not separator or len(fields) != 3:
            raise DataFormatError(path, key, f"expected '[video] [start] [end]##[sentence]', got {line!r}")
        vid = fields[0]
        start, end = number(fields[1], path, key), number(fields[2], path, key)
        duration = lengths.get(vid)
        default = f"{vid}.mp4"
        if lengths and duration is None:
            records.missing_video(path, key, vid, "no length in the Charades durations files")
            continue
        if not media.found(vid, default):
            records.missing_video(path, key, vid, f"no media file under {media.root}")
            continue
        moment = records.moment(sentence, [(key, start, end)], path, key, vid, duration)
        if moment is None:
            continue
        video = videos.get(vid)
        if video is None:
            video = videos[vid] = Video(id=vid, path=media.path(vid, default), duration=duration)
        video.moments.append(moment)
    return list(videos.values())
