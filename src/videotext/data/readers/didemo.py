"""DiDeMo (Hendricks et al., ICCV 2017): Flickr videos with moment descriptions.

Official layout (LisaAnne/LocalizingMoments ``data/``): ``train_data.json``,
``val_data.json``, ``test_data.json``, each a list of moment annotations::

    [{"video": "<flickr video name>", "times": [[3, 3], [3, 4], [3, 3], [2, 3]],
      "description": "...", "annotation_id": 0, "download_link": ..., "num_segments": 6}, ...]

``times`` holds one ``[first, last]`` pair of 5-second chunks per annotator: chunk
``k`` covers seconds ``5k`` to ``5(k+1)``, so ``[1, 4]`` is 5 s → 25 s (the official
README's definition). The segment of a description uses the *consensus* pair — the
pair most annotators chose, ties going to the one listed first. Videos were cut at
30 s for annotation, so ends are capped at 30 s (the true end of a short last chunk is
unknown until the video is decoded).

Each video gathers its descriptions as `captions` (in annotation_id order) and as
timed `segments`; their concatenation is the paragraph of the paragraph → video
protocol (CE, ClipBERT, Frozen in Time). Splits ``"train"`` / ``"val"`` / ``"test"``
come from the three files (a real validation set). The video id is the ``video``
field; media default to ``<video>.mp4`` (what LocalizingMoments' AWS download script
writes) or whatever is found under `video_dir`.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from videotext.data.readers._common import MediaIndex, annotation_files, build, field, load_json, number, read_split_files
from videotext.data.readers.records import BadRecords
from videotext.data.schema import Video, VideoTextDataset
from videotext.errors import DataFormatError

FILES = {"train_data.json": "train", "val_data.json": "val", "test_data.json": "test"}
CHUNK_SECONDS = 5.0
ANNOTATED_SECONDS = 30.0


def read_didemo(path: str | Path, *, video_dir: str | Path | None = None, on_bad: str = "repair") -> VideoTextDataset:
    """Read DiDeMo from its folder (or one of its json files)."""
    records = BadRecords(on_bad, path)
    files = annotation_files(path, FILES, "DiDeMo")
    media = MediaIndex(video_dir)
    videos, splits = read_split_files(files, lambda split, file: _read_file(file, media, records))
    return build("didemo", videos, splits, next(iter(files.values())), media, records=records)


def _read_file(path: Path, media: MediaIndex, records: BadRecords) -> list[Video]:
    data = load_json(path)
    if not isinstance(data, list):
        raise DataFormatError(path, None, "expected a list of moment annotations")
    moments: dict[str, list[tuple[int, tuple[str, str, float, float, str]]]] = {}
    for i, entry in enumerate(data):
        where = f"[{i}]"
        name = field(entry, "video", path, where, str)
        description = field(entry, "description", path, where, str)
        order = field(entry, "annotation_id", path, where, int, default=i)
        start, end = consensus_span(field(entry, "times", path, where, list), path, f"{where}.times")
        moments.setdefault(name, []).append((order, (f"{where}.times", f"{where}.description", start, end, description)))
    out = []
    for name, items in moments.items():
        segments = records.segments([item for _, item in sorted(items, key=lambda item: item[0])], path, name)
        out.append(Video(
            id=name, path=media.path(name, f"{name}.mp4"),
            captions=[s.sentence for s in segments], segments=segments,
        ))
    return out


def consensus_span(times: list, path: Path, key: str) -> tuple[float, float]:
    """Seconds of the chunk pair most annotators chose (ties: the first listed)."""
    pairs = []
    for j, pair in enumerate(times):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise DataFormatError(path, f"{key}[{j}]", f"expected [first chunk, last chunk], got {pair!r}")
        first, last = (int(number(t, path, f"{key}[{j}]")) for t in pair)
        if last < first or first < 0:
            raise DataFormatError(path, f"{key}[{j}]", f"bad chunk pair {pair!r}")
        pairs.append((first, last))
    if not pairs:
        raise DataFormatError(path, key, "no annotator times")
    counts = Counter(pairs)
    first, last = max(pairs, key=lambda p: (counts[p], -pairs.index(p)))
    return first * CHUNK_SECONDS, min((last + 1) * CHUNK_SECONDS, ANNOTATED_SECONDS)
