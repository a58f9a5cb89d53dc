"""MSVD / YouTube2Text (Chen & Dolan, 2011): 1970 short YouTube clips with ~40 English captions each.

Two common layouts, read from a folder (or the caption file itself):

- CE / CLIP4Clip (``msvd_data.zip``): ``raw-captions.pkl`` — a pickled dict
  ``{"<clip>": [["a", "man", "is", ...], ...]}`` of tokenised captions (joined with
  spaces here; plain strings are accepted too) — plus the standard split lists
  ``train_list.txt`` (1200), ``val_list.txt`` (100), ``test_list.txt`` (670).
- The original corpus file ``AllVideoDescriptions.txt``: ``#`` comment lines, then one
  caption per line as ``<clip> <caption words>``.

Clip ids are the YouTubeClips file names, e.g. ``-4wsuPCjDBc_5_15`` → ``-4wsuPCjDBc_5_15.avi``.
With the split lists present the splits are ``"train"`` / ``"val"`` / ``"test"`` (a
real validation set; ``meta["protocol"]`` = ``"standard"``); without them, one split
``"all"`` (``meta["protocol"]`` = ``"all"``).

Security note: unpickling runs code, so ``raw-captions.pkl`` is only ever read from the
path the user passes (their own copy of the dataset), never fetched.
"""
from __future__ import annotations

import pickle
from pathlib import Path

from videotext.data.readers._common import MediaIndex, build, existing_file, read_id_list
from videotext.data.readers.records import BadRecords
from videotext.data.schema import Video, VideoTextDataset
from videotext.errors import DataFormatError

CAPTION_FILES = ("raw-captions.pkl", "AllVideoDescriptions.txt")
SPLIT_LISTS = {"train": "train_list.txt", "val": "val_list.txt", "test": "test_list.txt"}


def read_msvd(path: str | Path, *, video_dir: str | Path | None = None, on_bad: str = "repair") -> VideoTextDataset:
    """Read MSVD captions and, when present beside them, the standard split lists."""
    records = BadRecords(on_bad, path)
    path = Path(path)
    if path.is_dir():
        file = next((path / n for n in CAPTION_FILES if (path / n).is_file()), None)
        if file is None:
            raise DataFormatError(path, None, f"no MSVD caption file here; expected one of {list(CAPTION_FILES)}")
    else:
        file = existing_file(path)
    raw = _read_pickle(file) if file.suffix == ".pkl" else _read_descriptions(file)
    captions = {vid: records.captions(items, file, vid) for vid, items in raw.items()}
    media = MediaIndex(video_dir)
    videos = [Video(id=vid, path=media.path(vid, f"{vid}.avi"), captions=caps) for vid, caps in captions.items()]
    lists = {name: file.parent / list_name for name, list_name in SPLIT_LISTS.items()}
    if all(p.is_file() for p in lists.values()):
        splits, protocol = {name: read_id_list(p) for name, p in lists.items()}, "standard"
        for name, ids in splits.items():
            unknown = [i for i in ids if i not in captions]
            if unknown:
                raise DataFormatError(lists[name], unknown[0], f"{len(unknown)} listed clips have no captions")
    else:
        splits, protocol = {"all": list(captions)}, "all"
    return build("msvd", videos, splits, file, media, {"protocol": protocol}, records)


def _read_pickle(path: Path) -> dict[str, list[tuple[str, str]]]:
    """Clip id → ``(record key, caption)`` items."""
    try:
        with open(path, "rb") as handle:
            data = pickle.load(handle)  # the user's own file; see the module note
    except Exception as exc:  # unpickling can fail in many ways; all mean "not this format"
        raise DataFormatError(path, None, f"not a readable pickle: {exc!r}") from None
    if not isinstance(data, dict):
        raise DataFormatError(path, None, f"expected a dict of clip id → captions, got {type(data).__name__}")
    out = {}
    for vid, caps in data.items():
        if not isinstance(caps, (list, tuple)):
            raise DataFormatError(path, str(vid), "expected a list of captions")
        out[str(vid)] = [(f"{vid}[{j}]", _caption(cap, path, str(vid))) for j, cap in enumerate(caps)]
    return out


def _caption(cap: object, path: Path, key: str) -> str:
    if isinstance(cap, str):
        return cap.strip()
    if isinstance(cap, (list, tuple)) and all(isinstance(t, str) for t in cap):
        return " ".join(cap)
    raise DataFormatError(path, key, f"expected a caption string or a list of tokens, got {cap!r}")


def _read_descriptions(path: Path) -> dict[str, list[tuple[str, str]]]:
    """Clip id → ``(line key, caption)`` items of ``AllVideoDescriptions.txt``."""
    out: dict[str, list[tuple[str, str]]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        vid, _, caption = line.partition(" ")
        if not caption.strip():
            raise DataFormatError(path, f"line {number}", f"expected '<clip id> <caption>', got {line!r}")
        out.setdefault(vid, []).append((f"line {number}", caption))
    return out
