"""A dataset as WebDataset shards: tar archives of samples, for training data beyond one disk.

`videotext dataset shard MANIFEST -o DIR` writes `DIR/shard-000000.tar, …` and `DIR/shards.json`.
Each sample is one video (or image) of the manifest, its files named by a sample key:

    <key>.json                {"id", "split", "captions", "segments", "speech", "duration", "kind",
                               "meta", "missing": [experts with nothing for this video]}
    <key>.mp4 / .jpg …        the media file's bytes, as stored          (content "media")
    <key>.<expert>.npy        the expert's [T, D] features, as stored    (content "features")
    <key>.<expert>.times.npy  their step start times, float64 [T]

This is the layout open_clip, clip-retrieval and video2dataset read, so any WebDataset reader
streams these shards. The shards hold at most `target_size` bytes each (a sample larger than that
gets a shard alone); the assignment of samples to shards is computed from the manifest and file
sizes alone, so a killed job run again writes the same shards and skips those already written
(each is written beside its place and renamed in). A video whose file or features cannot be read is
recorded in `DIR/failures.jsonl` and left out; the job goes on.

`shards.json` is the shard index: format, content, experts and their dims, the sample count of
every shard and in all, and the split counts. Readers (`videotext.data.streaming`) use it to
check what they read.
"""
from __future__ import annotations

import io
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from videotext.data.features import FeatureStore
from videotext.data.schema import Video, VideoTextDataset
from videotext.errors import DataFormatError, VideoTextError
from videotext.io import FailureLog, atomic_path, write_json

FORMAT = "videotext-shards"
INDEX = "shards.json"
CONTENTS = ("media", "features")
SIZE_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 2**10, "KIB": 2**10, "M": 2**20, "MB": 2**20, "MIB": 2**20,
              "G": 2**30, "GB": 2**30, "GIB": 2**30}
TAR_BLOCK, TAR_RECORD = 512, 10240  # each member: a 512-byte header, its data padded to 512; the archive
# ends with two zero blocks and is padded to a whole 10 KiB record
SHARD_MTIME = 946684800  # every member's time (2000-01-01): shards written twice are the same bytes, and a
# whole-second time needs no PAX header per member
NPY_HEADER = 128  # numpy's header of a 2-d or 1-d array (format 1.0)


def member_bytes(size: int) -> int:
    """Bytes one file of `size` bytes takes in a tar archive."""
    return TAR_BLOCK + -(-size // TAR_BLOCK) * TAR_BLOCK


def parse_size(text: str | int) -> int:
    """`512MB`, `1.5G`, `4096` → bytes."""
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(text))
    if not match or match.group(2).upper() not in SIZE_UNITS:
        raise VideoTextError(f"--target-size {text!r}: expected a size such as 512MB, 1.5GB or 4096")
    size = int(float(match.group(1)) * SIZE_UNITS[match.group(2).upper()])
    if size <= 0:
        raise VideoTextError(f"--target-size {text!r}: must be more than 0 bytes")
    return size


def sample_key(number: int) -> str:
    """Keys are sample numbers: a video id may hold dots or slashes, which WebDataset's file
    naming (key.extension) cannot carry; the id travels in the sample's JSON."""
    return f"{number:09d}"


@dataclass
class Planned:
    """One shard of the plan: its file name and the samples (number, video) it holds."""

    name: str
    samples: list[tuple[int, Video]] = field(default_factory=list)
    size: int = 0


def split_of(dataset: VideoTextDataset) -> dict[str, str]:
    return {video_id: name for name, ids in dataset.splits.items() for video_id in ids}


def plan_shards(sized: Sequence[tuple[Video, int]], target_size: int, prefix: str = "shard",
                max_samples: int = 0) -> list[Planned]:
    """Samples in order, a new shard whenever the next would pass `target_size` (`sized` gives each
    sample's bytes in the archive, headers included), or once it holds `max_samples` (0: no limit)."""
    shards: list[Planned] = []
    room = target_size - 2 * TAR_BLOCK - TAR_RECORD  # the archive's end and its padding, at most
    for number, (video, size) in enumerate(sized):
        full = bool(max_samples) and len(shards[-1].samples) >= max_samples if shards else False
        if not shards or full or (shards[-1].samples and shards[-1].size + size > room):
            shards.append(Planned(f"{prefix}-{len(shards):06d}.tar"))
        shards[-1].samples.append((number, video))
        shards[-1].size += size
    return shards


class SampleSource:
    """What goes into each sample besides its JSON: the media bytes, or the stored features."""

    def __init__(self, dataset: VideoTextDataset, content: str, features: str | os.PathLike | None = None,
                 experts: Sequence[str] = ()):
        if content not in CONTENTS:
            raise VideoTextError(f"--content {content!r}: expected one of {', '.join(CONTENTS)}")
        self.dataset, self.content, self.experts = dataset, content, list(experts)
        self.store = None
        if content == "features":
            if not self.experts:
                raise VideoTextError("--content features needs --experts (e.g. appearance,motion,audio)")
            self.store = FeatureStore(features or Path(dataset.root or ".") / "features")
            missing = [e for e in self.experts if e not in self.store.experts]
            if missing:
                raise VideoTextError(f"{self.store.root}: no features for expert(s) {missing} (have {self.store.experts})")

    def size(self, video: Video, split: str | None) -> int:
        """Bytes the sample takes in a shard, headers included (raises VideoTextError when its
        files cannot be read)."""
        total = member_bytes(len(sample_json(video, split, self.missing(video))))
        if self.content == "media":
            path = self.dataset.media_path(video)
            if path is None or not path.is_file():
                raise VideoTextError(f"{path or video.id}: media file not found")
            return total + member_bytes(path.stat().st_size)
        for expert in self.experts:
            if not self.store.has(expert, video.key):
                raise VideoTextError(f"{self.store.path(expert)}: no {expert!r} features for {video.key!r}")
            features, times = self.store.stored_nbytes(expert, video.key)
            total += member_bytes(NPY_HEADER + features) + member_bytes(NPY_HEADER + times)
        return total

    def files(self, video: Video) -> dict[str, bytes]:
        if self.content == "media":
            path = self.dataset.media_path(video)
            return {path.suffix.lstrip(".").lower() or "bin": path.read_bytes()}
        out = {}
        for expert in self.experts:
            values, times = self.store.stored(expert, video.key)
            out[f"{expert}.npy"] = npy_bytes(values)
            out[f"{expert}.times.npy"] = npy_bytes(np.asarray(times, dtype=np.float64))
        return out

    def missing(self, video: Video) -> list[str]:
        """Experts that had nothing for this video (no audio track, no speech)."""
        if self.store is None:
            return []
        return [e for e in self.experts if self.store.has(e, video.key) and self.store.is_missing(e, video.key)]

    def dims(self) -> dict[str, int]:
        return {e: self.store.dim(e) for e in self.experts} if self.store is not None else {}


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def sample_json(video: Video, split: str | None, missing: list[str]) -> bytes:
    record = {"id": video.id, "split": split, **{k: v for k, v in video.to_dict().items() if k not in ("id", "path")},
              "missing": missing}
    return json.dumps(record, ensure_ascii=False).encode("utf-8")


def shard_dataset(manifest: str | os.PathLike, out: str | os.PathLike, target_size: int | str = "512MB",
                  content: str = "media", features: str | os.PathLike | None = None, experts: Sequence[str] = (),
                  splits: Sequence[str] | None = None, max_samples: int = 0, progress: bool = True) -> dict[str, Any]:
    """Write the shards and their index (see the module docstring); returns the index."""
    import webdataset as wds

    dataset = VideoTextDataset.load(manifest)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    source = SampleSource(dataset, content, features, experts)
    failures = FailureLog(out / "failures.jsonl")
    splits_by_id = split_of(dataset)
    chosen: Iterable[Video] = dataset
    if splits:
        unknown = [s for s in splits if s not in dataset.splits]
        if unknown:
            raise VideoTextError(f"--splits: {dataset.name} has no split {unknown} (has {sorted(dataset.splits)})")
        chosen = (v for v in dataset if splits_by_id.get(v.id) in splits)
    sized = []
    for video in chosen:
        try:
            sized.append((video, source.size(video, splits_by_id.get(video.id))))
        except (VideoTextError, OSError) as exc:
            failures.record(video.id, exc, stage="shard")
    plan = plan_shards(sized, parse_size(target_size), max_samples=max_samples)
    from tqdm import tqdm

    written = 0
    for shard in tqdm(plan, desc="shards", unit="shard", disable=not progress):
        if (out / shard.name).is_file():
            continue  # written by an earlier run of the same plan
        with atomic_path(out / shard.name) as tmp, open(tmp, "wb") as handle:
            writer = wds.TarWriter(handle, encoder=False, mtime=SHARD_MTIME)
            for number, video in shard.samples:
                sample = {"__key__": sample_key(number), **source.files(video),
                          "json": sample_json(video, splits_by_id.get(video.id), source.missing(video))}
                writer.write(sample)
            writer.close()
            handle.flush()
            os.fsync(handle.fileno())
        written += 1
    failures.compact()
    index = {"format": FORMAT, "dataset": dataset.name, "content": content, "experts": list(source.experts),
             "dims": source.dims(), "target_size": parse_size(target_size), "samples": sum(len(s.samples) for s in plan),
             "splits": _split_counts(plan, splits_by_id),
             "shards": [{"name": s.name, "samples": len(s.samples), "bytes": (out / s.name).stat().st_size}
                        for s in plan]}
    write_json(out / INDEX, index)
    return {**index, "written": written, "failed": failures.count}


def _split_counts(plan: list[Planned], splits_by_id: dict[str, str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for shard in plan:
        for _, video in shard.samples:
            name = splits_by_id.get(video.id) or "none"
            counts[name] = counts.get(name, 0) + 1
    return counts


def read_index(path: str | os.PathLike) -> dict[str, Any]:
    """A shard folder's `shards.json` (a local path)."""
    path = Path(path)
    path = path / INDEX if path.is_dir() else path
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise VideoTextError(f"{path}: no shard index (write shards with `videotext dataset shard`)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataFormatError(path, None, f"damaged shard index ({exc}); run `videotext dataset shard` again: "
                              f"it rewrites the index and keeps the shards") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise DataFormatError(path, "format", f"not a {FORMAT} index")
    return index
