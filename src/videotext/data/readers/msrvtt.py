"""MSR-VTT (Xu et al., CVPR 2016): 10 000 YouTube clips with 20 captions each.

Official layout: ``MSRVTT_data.json`` (as shipped in CLIP4Clip's ``msrvtt_data.zip``;
the original release splits the same content into ``train_val_videodatainfo.json`` +
``test_videodatainfo.json``)::

    {"videos":    [{"video_id": "video0", "split": "train"|"validate"|"test",
                    "start time": 137.72, "end time": 149.44, "category": 9, "url": ..., "id": 0}, ...],
     "sentences": [{"video_id": "video0", "caption": "...", "sen_id": 0}, ...]}

Split protocols (`protocol=`):

- ``"full"``: the official 6513 / 497 / 2990 split from the json → train / val / test.
- ``"1k-A"`` (JSFusion, Yu et al. 2018; CE's ``train_list_jsfusion.txt`` 9000 ids and
  ``val_list_jsfusion.txt`` 1000 ids, or CLIP4Clip's ``MSRVTT_train.9k.csv`` and
  ``MSRVTT_JSFUSION_test.csv``). The 1000-id "val" list *is the test set*: it becomes
  split ``"test"``, and a seeded ``"val"`` split is carved from the 9000 training
  videos (`val_fraction`, default 10 %, or `val_count`; `val_seed`), so that model
  selection never sees test. When ``MSRVTT_JSFUSION_test.csv`` is found, each test
  video's single 1k-A query sentence is recorded in ``video.meta["query_caption"]``
  (and its position among the 20 captions in ``meta["query_caption_index"]``).
- ``"1k-B"`` (Miech et al. 2018; ``train_list_miech.txt`` 6656 ids, ``test_list_miech.txt``
  1000 ids): test list → ``"test"``, ``"val"`` carved from train the same way.

Split lists are looked for in `splits_dir`, else beside the json and in its
``high-quality/structured-symlinks/`` folder (the Frozen-in-Time layout). Every video
of the json is kept; videos a protocol does not list belong to no split. Media:
``video0.mp4`` … (found by stem under `video_dir` when given).
"""
from __future__ import annotations

from pathlib import Path

from videotext.data.readers._common import (
    MediaIndex, build, carve, existing_file, field, find_first, load_json, number, read_id_list, read_table,
)
from videotext.data.readers.records import BadRecords
from videotext.data.schema import Video, VideoTextDataset
from videotext.errors import DataFormatError

OFFICIAL_SPLITS = {"train": "train", "validate": "val", "test": "test"}
PROTOCOLS = {"full": "full", "1k-a": "1k-A", "jsfusion": "1k-A", "1k-b": "1k-B", "miech": "1k-B"}
# protocol → (train list candidates, test list candidates)
LIST_FILES = {
    "1k-A": (("train_list_jsfusion.txt", "MSRVTT_train.9k.csv"), ("val_list_jsfusion.txt", "MSRVTT_JSFUSION_test.csv")),
    "1k-B": (("train_list_miech.txt",), ("test_list_miech.txt",)),
}
LIST_SUBFOLDER = Path("high-quality") / "structured-symlinks"  # Frozen in Time's copy of CE's lists
QUERY_FILE = "MSRVTT_JSFUSION_test.csv"  # key,vid_key,video_id,sentence: the one 1k-A query per test video


def read_msrvtt(
    path: str | Path, *, protocol: str = "full", video_dir: str | Path | None = None,
    splits_dir: str | Path | None = None, val_fraction: float | None = 0.1, val_count: int | None = None,
    val_seed: int = 0, on_bad: str = "repair",
) -> VideoTextDataset:
    """Read MSR-VTT annotations (a json file or the folder holding it) under one split protocol."""
    records = BadRecords(on_bad, path)
    chosen = PROTOCOLS.get(protocol.lower())
    if chosen is None:
        raise DataFormatError(path, "protocol", f"unknown MSR-VTT protocol {protocol!r}; known: full, 1k-A, 1k-B")
    json_files = _json_files(Path(path))
    media = MediaIndex(video_dir)
    videos: dict[str, Video] = {}
    official: dict[str, list[str]] = {name: [] for name in OFFICIAL_SPLITS.values()}
    for json_path in json_files:
        _read_json(json_path, videos, official, media, records)

    source = json_files[0]
    meta: dict = {"protocol": chosen}
    if chosen == "full":
        splits = official
    else:
        folders = [Path(splits_dir)] if splits_dir else [source.parent, source.parent / LIST_SUBFOLDER]
        splits, meta["split_lists"] = _list_splits(chosen, folders, videos)
    dataset = build("msrvtt", videos.values(), splits, source, media, meta, records)
    if chosen != "full":
        carve(dataset, val_fraction, val_count, val_seed)
    return dataset


def _list_splits(protocol: str, folders: list[Path], videos: dict[str, Video]) -> tuple[dict, dict]:
    """Train and test ids of a list-based protocol, plus the list files used."""
    train_names, test_names = LIST_FILES[protocol]
    train_file, test_file = find_first(folders, train_names), find_first(folders, test_names)
    if train_file is None or test_file is None:
        missing = train_names if train_file is None else test_names
        where = ", ".join(str(f) for f in folders)
        raise DataFormatError(folders[0], missing[0], f"split list for protocol {protocol} not found in {where}")
    query_file = find_first(folders, [QUERY_FILE]) if protocol == "1k-A" else None
    if query_file is not None:
        _mark_queries(query_file, videos)
    splits = {"train": _read_ids(train_file, videos), "test": _read_ids(test_file, videos)}
    return splits, {"train": str(train_file), "test": str(test_file)}


def _json_files(path: Path) -> list[Path]:
    if path.is_dir():
        single = path / "MSRVTT_data.json"
        if single.is_file():
            return [single]
        pair = [path / "train_val_videodatainfo.json", path / "test_videodatainfo.json"]
        found = [p for p in pair if p.is_file()]
        if not found:
            raise DataFormatError(path, None, "no MSRVTT_data.json (or train_val_videodatainfo.json) here")
        return found
    return [existing_file(path)]


def _read_json(path: Path, videos: dict[str, Video], official: dict[str, list[str]], media: MediaIndex,
               records: BadRecords) -> None:
    data = load_json(path)
    entries = field(data, "videos", path, "", list)
    sentences = field(data, "sentences", path, "", list)
    for i, entry in enumerate(entries):
        where = f"videos[{i}]"
        vid = field(entry, "video_id", path, where, str)
        split = field(entry, "split", path, where, str)
        if split not in OFFICIAL_SPLITS:
            raise DataFormatError(path, f"{where}.split", f"expected one of {sorted(OFFICIAL_SPLITS)}, got {split!r}")
        start = number(field(entry, "start time", path, where), path, f"{where}.start time")
        end = number(field(entry, "end time", path, where), path, f"{where}.end time")
        videos[vid] = Video(
            id=vid, path=media.path(vid, f"{vid}.mp4"), duration=round(end - start, 3),
            meta={"category": entry.get("category"), "url": entry.get("url"), "start": start, "end": end},
        )
        official[OFFICIAL_SPLITS[split]].append(vid)
    ordered: dict[str, list[tuple[int, str, str]]] = {}
    for i, sentence in enumerate(sentences):
        where = f"sentences[{i}]"
        vid = field(sentence, "video_id", path, where, str)
        caption = field(sentence, "caption", path, where, str)
        sen_id = field(sentence, "sen_id", path, where, int, default=i)
        if vid not in videos:
            raise DataFormatError(path, f"{where}.video_id", f"unknown video {vid!r}")
        ordered.setdefault(vid, []).append((sen_id, f"{where}.caption", caption))
    for vid, items in ordered.items():
        kept = records.captions([(key, text) for _, key, text in sorted(items)], path, vid, videos[vid].captions)
        videos[vid].captions.extend(kept)


def _read_ids(path: Path, videos: dict[str, Video]) -> list[str]:
    """Ids of a split list: CE's one-id-per-line .txt or CLIP4Clip's csv with a video_id column."""
    if path.suffix == ".csv":
        ids = list(dict.fromkeys(row["video_id"].strip() for _, row in read_table(path, columns=["video_id"])))
    else:
        ids = read_id_list(path)
    unknown = [i for i in ids if i not in videos]
    if unknown:
        raise DataFormatError(path, unknown[0], f"{len(unknown)} listed ids are not in the annotation json")
    return ids


def _mark_queries(path: Path, videos: dict[str, Video]) -> None:
    """Record the single 1k-A query sentence of each test video (MSRVTT_JSFUSION_test.csv)."""
    for key, row in read_table(path, columns=["video_id", "sentence"]):
        video = videos.get(row["video_id"].strip())
        if video is None:
            raise DataFormatError(path, f"{key}.video_id", f"unknown video {row['video_id']!r}")
        sentence = row["sentence"].strip()
        video.meta["query_caption"] = sentence
        if sentence in video.captions:
            video.meta["query_caption_index"] = video.captions.index(sentence)
