"""Extraction from media shards (`videotext dataset shard --content media`), streamed from a folder,
HTTP(S), fsspec URLs or a pipe, as training reads them (`videotext.data.streaming`).

One shard at a time: its videos are written to a scratch folder inside the store's folder and
extracted from there as from any folder (`extract_features`), then the scratch folder goes, so the
disk holds one shard beside the store. The store's own resume applies: a video whose features are
there for every expert is neither written out nor decoded again. A shard that cannot be read after
its retries goes to `failures.jsonl` and the job goes on. Under torchrun, rank r takes shards r::R.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Sequence

from videotext import distributed as dist
from videotext.data.experts.extract import extract_features
from videotext.data.features import FeatureStore
from videotext.data.schema import Video, VideoTextDataset
from videotext.data.streaming import Retry, ShardFailed, expand, read_index, read_shard, sample_video
from videotext.io import FailureLog

SUMMED = ("videos", "done", "skipped", "failed")


def is_shard_source(source: str | os.PathLike) -> bool:
    """A brace pattern or URL of tar shards rather than a manifest or a folder."""
    text = str(source)
    return text.endswith(".tar") or ".tar::" in text or text.startswith(("http://", "https://", "s3://", "gs://", "pipe:"))


def extract_from_shards(pattern: str, experts: Sequence[str], out_dir: str | os.PathLike, settings: Any = None,
                        retry: Retry = Retry(), **values: Any) -> dict[str, Any]:
    """Extract `experts` for every video of the shards into the FeatureStore at `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    urls = expand(pattern)
    index = read_index(pattern) or {}
    counts = {s["name"]: int(s["samples"]) for s in index.get("shards", [])}
    rank, world = dist.env_rank(), dist.env_world_size()
    failures = FailureLog(out_dir / "failures.jsonl")
    names = [str(e) for e in experts]
    totals: dict[str, Any] = {"shards": 0, "shards_failed": 0, **{k: 0 for k in SUMMED}}
    for url in urls[rank::world]:
        store = FeatureStore(out_dir)
        done = set.intersection(*[set(store.keys(e)) if store.has_expert(e) else set() for e in names])
        store.close()
        with tempfile.TemporaryDirectory(prefix=".shard-", dir=out_dir) as scratch:
            try:
                videos = _write_videos(url, counts.get(url.rsplit("/", 1)[-1]), retry, Path(scratch), done)
            except ShardFailed as exc:
                failures.record(url, exc, stage="shard")
                totals["shards_failed"] += 1
                continue
            totals["shards"] += 1
            if not videos:
                continue
            summary = extract_features(VideoTextDataset(Path(url).stem, videos, root=scratch), experts, out_dir,
                                       settings, **{**values, "shard": (0, 1)})
            for key in SUMMED:
                totals[key] += int(summary.get(key, 0) or 0)
    failures.compact()
    return totals


def _write_videos(url: str, expected: int | None, retry: Retry, folder: Path, done: set[str]) -> list[Video]:
    """The shard's videos not yet extracted, written into `folder`; each as its JSON describes it."""
    videos = []
    for _, sample in read_shard(url, ["json"], expected, retry):
        video = sample_video(sample)
        if video.key in done:
            continue
        media = next((k for k in sample if k not in ("json", "__key__")), None)
        if media is None:
            continue  # a features shard: nothing to decode
        path = folder / f"{sample['__key__']}.{media}"
        path.write_bytes(sample[media])
        video.path = str(path)
        videos.append(video)
    return videos


def extract_source(source: str | os.PathLike, experts: Sequence[str], out_dir: str | os.PathLike,
                   settings: Any = None) -> dict[str, Any]:
    """`videotext extract`'s source, whatever it is: media shards (a brace pattern of .tar paths or URLs,
    streamed one shard at a time) or a manifest / folder of videos."""
    if is_shard_source(source):
        return extract_from_shards(str(source), experts, out_dir, settings)

    return extract_features(Path(source), experts, out_dir, settings)
