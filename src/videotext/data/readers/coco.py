"""COCO Captions (Chen et al., 2015): images with five human captions each.

Two official layouts, told apart by their content:

- COCO annotation files ``captions_train2017.json`` / ``captions_val2017.json`` (also
  the 2014 ones)::

      {"images": [{"id": 391895, "file_name": "000000391895.jpg", ...}, ...],
       "annotations": [{"image_id": 391895, "id": 770337, "caption": "..."}, ...]}

  Split = the file's set name (``captions_train2017.json`` → ``"train"``,
  ``captions_val2017.json`` → ``"val"``); image path ``<set>/<file_name>``
  (``train2017/000000391895.jpg``, the layout of the official zip files).
- Karpathy's split file ``dataset_coco.json`` (the retrieval protocol of almost every
  paper: 5000 val, 5000 test)::

      {"images": [{"filepath": "val2014", "filename": "COCO_val2014_000000391895.jpg",
                   "split": "train"|"restval"|"val"|"test", "cocoid": 391895,
                   "sentences": [{"raw": "...", "tokens": [...]}, ...]}, ...]}

  ``restval`` is merged into ``"train"`` (as in VSE++ and CLIP-style work); the path
  is ``<filepath>/<filename>``. ``dataset_flickr30k.json`` (no ``filepath``) reads the same way.

Images are videos of kind ``"image"``, id = the image file name without extension.
"""
from __future__ import annotations

from pathlib import Path

from videotext.data.readers._common import MediaIndex, build, existing_file, field, load_json
from videotext.data.readers.records import BadRecords
from videotext.data.schema import Video, VideoTextDataset
from videotext.errors import DataFormatError

KARPATHY_SPLITS = {"train": "train", "restval": "train", "val": "val", "test": "test"}
COCO_FILES = ("captions_train2017.json", "captions_val2017.json", "captions_train2014.json", "captions_val2014.json")


def read_coco(path: str | Path, *, video_dir: str | Path | None = None, on_bad: str = "repair") -> VideoTextDataset:
    """Read COCO captions: official ``captions_*.json`` files or Karpathy's ``dataset_*.json``."""
    records = BadRecords(on_bad, path)
    path = Path(path)
    if path.is_dir():
        karpathy = path / "dataset_coco.json"
        files = [karpathy] if karpathy.is_file() else [path / n for n in COCO_FILES if (path / n).is_file()]
        if not files:
            raise DataFormatError(path, None, f"no COCO caption file here; expected dataset_coco.json or {COCO_FILES}")
    else:
        files = [existing_file(path)]
    media = MediaIndex(video_dir, scan=False)
    videos: list[Video] = []
    splits: dict[str, list[str]] = {}
    layouts = []
    for file in files:
        data = load_json(file)
        images = field(data, "images", file, "", list)
        if _is_karpathy(images):
            videos.extend(_karpathy(file, images, splits, records))
            layouts.append("karpathy")
        else:
            videos.extend(_official(file, data, images, splits, records))
            layouts.append(file.stem.split("_", 1)[-1][-4:])  # captions_train2017 → 2017
    protocol = layouts[0] if len(set(layouts)) == 1 else "+".join(dict.fromkeys(layouts))
    return build("coco", videos, splits, files[0], media, {"protocol": protocol}, records)


def _is_karpathy(images: list) -> bool:
    return bool(images) and isinstance(images[0], dict) and "sentences" in images[0]


def _official(file: Path, data: dict, images: list, splits: dict[str, list[str]], records: BadRecords) -> list[Video]:
    image_set = file.stem.split("_", 1)[-1]  # captions_train2017 → train2017
    split = image_set.rstrip("0123456789") or image_set
    by_id: dict[int, Video] = {}
    for i, image in enumerate(images):
        name = field(image, "file_name", file, f"images[{i}]", str)
        by_id[field(image, "id", file, f"images[{i}]", int)] = Video(
            id=Path(name).stem, path=f"{image_set}/{name}", duration=0.0, kind="image",
        )
    for i, note in enumerate(field(data, "annotations", file, "", list)):
        where = f"annotations[{i}]"
        image_id = field(note, "image_id", file, where, int)
        if image_id not in by_id:
            raise DataFormatError(file, f"{where}.image_id", f"no image with id {image_id}")
        video = by_id[image_id]
        video.captions.extend(records.captions([(f"{where}.caption", field(note, "caption", file, where, str))],
                                               file, video.id, video.captions))
    splits.setdefault(split, []).extend(v.id for v in by_id.values())
    return list(by_id.values())


def _karpathy(file: Path, images: list, splits: dict[str, list[str]], records: BadRecords) -> list[Video]:
    out = []
    for i, image in enumerate(images):
        where = f"images[{i}]"
        name = field(image, "filename", file, where, str)
        split = field(image, "split", file, where, str)
        if split not in KARPATHY_SPLITS:
            raise DataFormatError(file, f"{where}.split", f"expected one of {sorted(KARPATHY_SPLITS)}, got {split!r}")
        sentences = field(image, "sentences", file, where, list)
        raw = [(f"{where}.sentences[{j}].raw", field(s, "raw", file, f"{where}.sentences[{j}]", str))
               for j, s in enumerate(sentences)]
        captions = records.captions(raw, file, Path(name).stem)
        folder = image.get("filepath")
        out.append(Video(id=Path(name).stem, path=f"{folder}/{name}" if folder else name, duration=0.0,
                         kind="image", captions=captions, meta={"cocoid": image.get("cocoid")}))
        splits.setdefault(KARPATHY_SPLITS[split], []).append(out[-1].id)
    return out
