"""QVHighlights (Lei et al., NeurIPS 2021): queries with their moments and per-clip saliency in 150-s YouTube clips.

Official layout (jayleicn/moment_detr ``data/``): ``highlight_train_release.jsonl``,
``highlight_val_release.jsonl``, ``highlight_test_release.jsonl``, one query per line::

    {"qid": 8737, "query": "A family is playing basketball together on a green court outside.",
     "duration": 126, "vid": "bP5KfdFJzC4_660.0_810.0", "relevant_windows": [[0, 16]],
     "relevant_clip_ids": [0, 1, 2, 3, 4, 5, 6, 7],
     "saliency_scores": [[4, 1, 1], [4, 1, 1], [4, 2, 1], [4, 3, 2], [4, 3, 2], [4, 3, 3], [4, 3, 3], [4, 3, 2]]}

``relevant_windows`` are the query's moments in seconds (one or more); ``relevant_clip_ids`` the
2-second clips (numbered from 0) inside them, each scored 0 ("Very Bad") to 4 ("Very Good") by three
annotators in ``saliency_scores``. The test file holds qid, query, duration and vid only. Each line
becomes a `Moment` (id = the qid) of the video ``vid`` (media ``<vid>.mp4``, as in the released
video archive); a video's queries are gathered on it.

Protocols (`protocol=`): ``"val-as-test"`` (default): the released validation file is the test set
(``"test"``) and a seeded ``"val"`` of 10 % of the training videos is carved from train
(`val_fraction` / `val_count` / `val_seed`), so that model selection never sees it; the released test
file, whose answers are withheld, becomes ``"test_release"``. ``"official"``: splits ``"train"``,
``"val"``, ``"test"`` as released.

Bad records (`on_bad=`), each named by file and line (``line 12``): a window reversed, of zero
length, or past ``duration``; saliency clips past the video's end; a query whose video has no media
file under `video_dir`; an exact duplicate of an earlier query of the same video. The released files
hold none (train 7,218 queries, val 1,550, test 1,542, counted).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from videotext.data.readers._common import MediaIndex, annotation_files, build, carve, expect, field, number, span
from videotext.data.readers.records import BadRecords
from videotext.data.schema import Video, VideoTextDataset
from videotext.errors import DataFormatError

FILES = {"highlight_train_release.jsonl": "train", "highlight_val_release.jsonl": "val",
         "highlight_test_release.jsonl": "test"}
PROTOCOLS = ("val-as-test", "official")
RELEASED_TEST = "test_release"  # under val-as-test: the released test file (no answers)
CLIP_SECONDS = 2.0  # the clips of relevant_clip_ids (Lei et al. 2021, §3)


def read_qvhighlights(
    path: str | Path, *, protocol: str = "val-as-test", video_dir: str | Path | None = None,
    val_fraction: float | None = 0.1, val_count: int | None = None, val_seed: int = 0, on_bad: str = "repair",
) -> VideoTextDataset:
    """Read QVHighlights from its folder (or one of its jsonl files)."""
    if protocol not in PROTOCOLS:
        raise DataFormatError(path, "protocol", f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    records = BadRecords(on_bad, path)
    files = annotation_files(path, FILES, "QVHighlights")
    media = MediaIndex(video_dir)
    videos: dict[str, Video] = {}
    splits: dict[str, list[str]] = {}
    for split, file in files.items():
        splits[split] = _read_file(file, media, records, videos)
    if protocol == "val-as-test" and "val" in splits:
        if "test" in splits:  # the released test split, whose answers are withheld
            splits[RELEASED_TEST] = splits.pop("test")
        splits["test"] = splits.pop("val")
    dataset = build("qvhighlights", videos.values(), splits, next(iter(files.values())), media,
                    {"protocol": protocol}, records)
    if protocol == "val-as-test" and len(splits.get("train", [])) > 1 and (val_fraction or val_count):
        carve(dataset, val_fraction, val_count, val_seed)
    return dataset


def _lines(path: Path) -> list[tuple[str, Any]]:
    out = []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataFormatError(path, None, f"not UTF-8 text: {exc}") from None
    for number_, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                out.append((f"line {number_}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise DataFormatError(path, f"line {number_}", f"not valid JSON: {exc}") from None
    return out


def _read_file(path: Path, media: MediaIndex, records: BadRecords, videos: dict[str, Video]) -> list[str]:
    """Add the file's queries to `videos`; return the ids of its videos, in file order."""
    ids: dict[str, None] = {}
    for key, entry in _lines(path):
        vid = field(entry, "vid", path, key, str)
        query = field(entry, "query", path, key, str)
        qid = str(field(entry, "qid", path, key, (int, str)))
        duration = number(field(entry, "duration", path, key), path, f"{key}.duration")
        windows = field(entry, "relevant_windows", path, key, list, default=[])
        spans = [(f"{key}.relevant_windows[{i}]", *span(w, path, f"{key}.relevant_windows[{i}]"))
                 for i, w in enumerate(windows)]
        clip_ids = [expect(c, int, path, f"{key}.relevant_clip_ids")
                    for c in field(entry, "relevant_clip_ids", path, key, list, default=[])]
        scores = field(entry, "saliency_scores", path, key, list, default=[])
        if len(scores) != len(clip_ids):
            raise DataFormatError(path, f"{key}.saliency_scores",
                                  f"{len(scores)} rows of scores for {len(clip_ids)} relevant_clip_ids")
        saliency = [[number(x, path, f"{key}.saliency_scores") for x in expect(row, list, path, f"{key}.saliency_scores")]
                    for row in scores]
        default = f"{vid}.mp4"
        if not media.found(vid, default):
            records.missing_video(path, key, vid, f"no media file under {media.root}")
            continue
        moment = records.moment(query, spans, path, key, vid, duration, (CLIP_SECONDS, clip_ids, saliency), qid)
        if moment is None:
            continue
        video = videos.get(vid)
        if video is None:
            video = videos[vid] = Video(id=vid, path=media.path(vid, default), duration=duration)
        elif video.duration != duration:
            raise DataFormatError(path, f"{key}.duration", f"video {vid} has duration {video.duration} in an "
                                                            f"earlier line, {duration} here")
        video.moments.append(moment)
        ids[vid] = None
    return list(ids)
