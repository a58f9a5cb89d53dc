"""Training batches streamed from WebDataset shards (`videotext.data.shards`): local paths, HTTP(S),
`s3://` and other fsspec URLs, or `pipe:COMMAND`, named by a brace pattern (`data.shards`).

How the samples are dealt (every choice a pure function of the seed, the epoch and the slot, so a
resumed run reads exactly what an uninterrupted one would have):
- Each rank runs `data.workers` loader workers; the slots are (rank, worker), `world × workers` of
  them. Each epoch the shard list is permuted (seeded by the epoch) and slot s takes shards s, s+S, …:
  slots never share a shard, so ranks and workers see disjoint samples.
- A slot reads its shards in turn, through a shuffle buffer of `data.shuffle_buffer` samples,
  and starts over on a new permutation of them when they run out (resampling): an epoch is a fixed
  `data.samples_per_epoch`, whatever the shards hold.
- Worker w of a rank yields that rank's batches w, w + W, …; torch's DataLoader hands them out in
  turn, so batch i of an epoch comes from one known worker.
- The position is (epoch, batch), as for data on disk. Resuming at batch i, each worker replays
  its stream from the start of the epoch and drops the samples of its batches before i without
  decoding them. The checkpoint also records each worker's position (shard and sample offset); a
  resumed worker checks that its replay arrived there, so shards changed since are an error, not
  other data.

Faults: a shard that cannot be opened, breaks off (dropped connection, HTTP 5xx, a read slower
than `data.shard_timeout`), or ends short of the samples its index lists, is read again after a
backoff of 1, 2, 4 … s (`data.shard_retries` times), continuing after the samples already taken.
Then it is skipped: one line in the run's `failures.jsonl`, and training goes on.
"""
from __future__ import annotations

import io
import json
import os
import random
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from videotext.data.narration import SpanStore, has_narration, window_of
from videotext.data.schema import Video
from videotext.data.shards import INDEX
from videotext.errors import VideoTextError
from videotext.io import FailureLog


READ_BUFFER = 1 << 20  # bytes read from a shard at a time


class ShardFailed(VideoTextError):
    """A shard could not be read whole after its retries."""


def expand(pattern: str | Sequence[str]) -> list[str]:
    """`https://host/data/shard-{000000..000099}.tar` → the shard URLs (also `a.tar::b.tar`)."""
    from webdataset.shardlists import expand_urls

    urls = [u for p in ([pattern] if isinstance(pattern, str) else pattern) for u in expand_urls(p)]
    if not urls:
        raise VideoTextError(f"data.shards {pattern!r}: names no shard")
    return urls


def open_url(url: str, timeout: float) -> tuple[Any, Callable[[], None]]:
    """A readable binary stream of `url`, and how to close it."""
    if url.startswith(("http://", "https://")):
        import urllib.request

        # urllib follows redirects and the proxy settings; its response reads straight from the socket,
        # which measured faster here than requests' (bench/streaming.py). HTTP errors raise.
        response = urllib.request.urlopen(urllib.request.Request(url, headers={"User-Agent": "videotext"}),
                                          timeout=timeout)
        # tarfile reads a member header at a time: buffered, those are copies, not socket reads. (A
        # read-ahead thread was slower: it waits for the GIL while the samples are decoded.)
        return io.BufferedReader(response, 4 * READ_BUFFER), response.close
    if url.startswith("pipe:"):
        process = subprocess.Popen(url[len("pipe:"):], shell=True, stdout=subprocess.PIPE)

        def close() -> None:
            process.stdout.close()
            process.wait()
        return process.stdout, close
    if "://" in url and not url.startswith("file://"):
        import fsspec

        handle = fsspec.open(url, "rb").open()  # s3://, gs://, … through their fsspec packages
        return handle, handle.close
    handle = open(url.removeprefix("file://"), "rb", buffering=READ_BUFFER)
    return handle, handle.close


def read_index(pattern: str, timeout: float = 30.0) -> dict[str, Any] | None:
    """The `shards.json` beside the first shard, when there is one (local or over HTTP)."""
    first = expand(pattern)[0]
    url = first.rsplit("/", 1)[0] + "/" + INDEX if "/" in first else INDEX
    try:
        stream, close = open_url(url, timeout)
        try:
            return json.loads(stream.read().decode("utf-8"))
        finally:
            close()
    except Exception:  # noqa: BLE001 - absent, unreachable or not JSON: an index is optional
        return None


def tar_samples(stream: Any) -> Iterator[dict[str, bytes]]:
    """Samples of a tar stream in order: {"__key__": key, extension: bytes, …}. A sample's files
    are consecutive members named KEY.EXTENSION."""
    sample: dict[str, Any] = {}
    with tarfile.open(fileobj=stream, mode="r|*") as archive:
        for member in archive:
            if not member.isreg():
                continue
            name = member.name.rsplit("/", 1)[-1]
            key, _, extension = name.partition(".")
            data = archive.extractfile(member).read()
            if sample and sample["__key__"] != key:
                yield sample
                sample = {}
            sample.setdefault("__key__", key)
            sample[extension] = data
    if sample:
        yield sample


@dataclass
class Retry:
    """How a shard is read again: attempts, first backoff (doubled each time), read timeout."""

    retries: int = 3
    backoff: float = 1.0
    timeout: float = 60.0


def read_shard(url: str, needs: Sequence[str], expected: int | None = None, retry: Retry = Retry(),
               sleep: Callable[[float], None] = time.sleep) -> Iterator[tuple[int, dict[str, bytes]]]:
    """(offset, sample) of every complete sample of one shard. A break, a sample missing one of
    `needs` (cut off), or fewer than `expected` samples is retried from where it stopped; after
    `retry.retries` retries, ShardFailed."""
    taken, last_error = 0, None
    for attempt in range(retry.retries + 1):
        if attempt:
            sleep(retry.backoff * 2 ** (attempt - 1))
        try:
            stream, close = open_url(url, retry.timeout)
        except Exception as exc:  # noqa: BLE001 - the network's and the file system's errors alike
            last_error = exc
            continue
        try:
            seen = 0
            for sample in tar_samples(stream):
                if any(extension not in sample for extension in needs):
                    raise OSError(f"sample {sample['__key__']} is missing {[e for e in needs if e not in sample]}")
                if seen >= taken:
                    yield seen, sample
                    taken += 1
                seen += 1
            if expected is not None and seen < expected:
                raise OSError(f"ended after {seen} of its {expected} samples")
            return
        except GeneratorExit:
            raise
        except Exception as exc:  # noqa: BLE001 - truncated tar, dropped connection, read timeout
            last_error = exc
        finally:
            close()
    raise ShardFailed(f"{url}: {type(last_error).__name__}: {last_error} (after {retry.retries} retries)")


def sample_video(sample: dict[str, bytes], record: dict[str, Any] | None = None) -> Video:
    """The sample's Video, from its JSON (`record`, when already parsed)."""
    record = json.loads(sample["json"].decode("utf-8")) if record is None else record
    return Video.from_dict({k: v for k, v in record.items() if k not in ("split", "missing")}, source=sample["__key__"])


class FeatureDecoder:
    """A features sample → (Video, {expert: (features, times, missing)}), in a loader worker."""

    def __init__(self, experts: Sequence[str]):
        self.experts = list(experts)
        self.needs = ["json", *[f"{e}.npy" for e in self.experts], *[f"{e}.times.npy" for e in self.experts]]

    def __call__(self, sample: dict[str, bytes], epoch: int) -> tuple[Video, Any]:
        return decode_sample(sample, self.experts)


class FrameDecoder:
    """A media sample → (Video, (drawn caption, clip [F, 3, S, S])), decoded in a loader worker as
    `FrameBatches` decodes a file (`frame_item`): the media is written to a scratch file first."""

    needs = ["json"]

    def __init__(self, spec: Any, seed: int, frames: dict[int, int], paragraphs: bool = False):
        import dataclasses

        # as the files' source reads: "off" decodes the clip's frames, a cache decodes the video at
        # cache_fps and picks the nearest (in memory here: a sample is read once per epoch)
        self.spec = dataclasses.replace(spec, cache="off" if spec.cache == "off" else "memory")
        self.seed, self.frames, self.paragraphs = seed, dict(frames), paragraphs

    def __call__(self, sample: dict[str, bytes], epoch: int) -> tuple[Video, Any]:
        import tempfile

        from videotext.data.frames import FrameSource, frame_item
        from videotext.data.schema import VideoTextDataset

        video = sample_video(sample)
        media = next((k for k in sample if k not in ("json", "__key__")), None)
        if media is None:
            raise VideoTextError(f"shard sample {sample['__key__']} ({video.id}) holds no media file: frames need "
                                 f"media shards (`videotext dataset shard --content media`)")
        with tempfile.TemporaryDirectory(prefix="videotext-frames-") as scratch:
            path = Path(scratch) / f"clip.{media}"
            path.write_bytes(sample[media])
            video.path = str(path)
            source = FrameSource(VideoTextDataset("shard", [video]), self.spec)
            return video, frame_item(source, video, self.seed, epoch, self.frames.get(epoch, max(self.frames.values())),
                                     self.paragraphs)


def decode_sample(sample: dict[str, bytes], experts: Sequence[str]) -> tuple[Video, dict[str, Any]]:
    """The sample's Video (its JSON) and {expert: (features [T, D], times [T])}."""
    record = json.loads(sample["json"].decode("utf-8"))
    video = sample_video(sample, record)
    features = {}
    for expert in experts:
        values = np.load(io.BytesIO(sample[f"{expert}.npy"]), allow_pickle=False)
        times = np.load(io.BytesIO(sample[f"{expert}.times.npy"]), allow_pickle=False)
        features[expert] = (values, times, expert in (record.get("missing") or []))
    return video, features


class SampleStore:
    """The features of the samples in hand, read as a FeatureStore is (`has`, `get`, `dim`,
    `is_missing`), so the method's own feature reader and collation build the batch."""

    def __init__(self, dims: dict[str, int], samples: Sequence[tuple[Video, dict[str, Any]]]):
        self.dims = dims
        self.by_key = {video.key: features for video, features in samples}

    def dim(self, expert: str) -> int:
        return self.dims[expert]

    def has(self, expert: str, key: str) -> bool:
        return expert in self.by_key.get(key, {})

    def get(self, expert: str, key: str, rows: slice | None = None) -> tuple[np.ndarray, np.ndarray]:
        values, times, _ = self.by_key[key][expert]
        rows = slice(None) if rows is None else rows
        return np.asarray(values[rows], dtype=np.float32), times[rows]

    def is_missing(self, expert: str, key: str) -> bool:
        return bool(self.by_key[key][expert][2])


def slot_shards(urls: Sequence[str], seed: int, epoch: int, slot: int, slots: int) -> list[str]:
    """The shards slot `slot` of `slots` reads in `epoch`: every S-th of the epoch's permutation."""
    if len(urls) < slots:
        raise VideoTextError(f"data.shards: {len(urls)} shards for {slots} readers (ranks × data.workers); "
                             f"write more, smaller shards (`videotext dataset shard --target-size`) or use fewer workers")
    order = list(urls)
    random.Random(f"shards/{seed}/{epoch}").shuffle(order)
    return order[slot::slots]


class SlotStream:
    """The endless, shuffled sample stream of one slot in one epoch (see the module docstring)."""

    def __init__(self, urls: Sequence[str], counts: dict[str, int], needs: Sequence[str], seed: int, epoch: int,
                 slot: int, slots: int, buffer: int, retry: Retry, failures: str | os.PathLike | None,
                 split: str | None = None, narrated: bool = False):
        self.shards = slot_shards(urls, seed, epoch, slot, slots)
        self.split, self.narrated = split, narrated
        self.counts, self.needs, self.retry = counts, list(needs), retry
        self.seed, self.epoch, self.slot, self.buffer = seed, epoch, slot, max(1, buffer)
        self.failures = FailureLog(failures) if failures else None
        self.position: dict[str, Any] = {"slot": slot, "shard": None, "offset": None, "samples": 0}

    def _raw(self) -> Iterator[tuple[str, int, dict[str, bytes]] | None]:
        for cycle in range(1 << 30):
            order = list(self.shards)
            if cycle:  # resampling: the slot's shards again, in a new order
                random.Random(f"cycle/{self.seed}/{self.epoch}/{self.slot}/{cycle}").shuffle(order)
            produced = 0
            for url in order:
                try:
                    for offset, sample in read_shard(url, self.needs, self.counts.get(url), self.retry):
                        if self.split or self.narrated:
                            record = json.loads(sample["json"])
                            if self.split and record.get("split") not in (None, self.split):
                                continue  # shards of every split: only the training split is trained on
                            if self.narrated and not has_narration(record.get("speech") or []):
                                continue  # narration windows need narration (as data.text=narration drops it)
                        produced += 1
                        yield url, offset, sample
                except ShardFailed as exc:
                    if self.failures is not None:
                        self.failures.record(url, exc, stage="stream", epoch=self.epoch, slot=self.slot)
            if not produced:
                raise VideoTextError(f"data.shards: none of the shards {order[:3]}… of reader {self.slot} could be "
                                     f"read (see failures.jsonl)")
            yield None  # the end of a pass over the slot's shards

    def __iter__(self) -> Iterator[dict[str, bytes]]:
        """Samples through the shuffle buffer, drained at the end of each pass over the slot's shards
        (so a pass gives each sample once); `position` follows the last one given out."""
        rng = random.Random(f"buffer/{self.seed}/{self.epoch}/{self.slot}")
        pool: list[tuple[str, int, dict[str, bytes]]] = []
        for item in self._raw():
            if item is None:
                while pool:
                    yield self._give(pool.pop(rng.randrange(len(pool))))
                continue
            if len(pool) < self.buffer:
                pool.append(item)
                continue
            pick = rng.randrange(len(pool))
            pool[pick], item = item, pool[pick]
            yield self._give(item)

    def _give(self, item: tuple[str, int, dict[str, bytes]]) -> dict[str, bytes]:
        url, offset, sample = item
        self.position = {"slot": self.slot, "shard": url, "offset": offset, "samples": self.position["samples"] + 1}
        return sample


class WorkerBatches(torch.utils.data.IterableDataset):
    """What one loader worker yields: its batches of one rank's epoch, each sample decoded by
    `spec["decoder"]` (features, or a clip decoded from media)."""

    def __init__(self, spec: dict[str, Any], epoch: int, start: int, length: int, batch_size: int,
                 expect: dict[int, dict[str, Any]] | None = None):
        super().__init__()
        self.spec, self.epoch, self.start, self.length, self.batch_size = spec, epoch, start, length, batch_size
        self.expect = expect or {}  # worker role -> the position the checkpoint recorded (this epoch)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        spec, workers = self.spec, self.spec["workers"]
        loader_worker = info.id if info is not None else 0
        role = (loader_worker + self.start) % workers  # batch `start` comes from loader worker 0
        slot = spec["rank"] * workers + role
        decoder = spec["decoder"]
        stream = SlotStream(spec["urls"], spec["counts"], decoder.needs, spec["seed"], self.epoch, slot,
                            spec["world"] * workers, spec["buffer"], spec["retry"], spec["failures"], spec["split"],
                            spec.get("narrated", False))
        samples = iter(stream)
        for index in range(role, self.length, workers):
            batch = [next(samples) for _ in range(self.batch_size)]  # raw bytes: batches before `start` are not decoded
            if index < self.start:
                recorded = self.expect.get(role)
                if recorded is not None and recorded.get("batch") == index:
                    check_replay(stream.position, recorded)
                continue
            yield {"index": index, "samples": [decoder(s, self.epoch) for s in batch], "position": dict(stream.position)}


def check_replay(position: dict[str, Any], recorded: dict[str, Any]) -> None:
    """A resumed reader must stand where the checkpoint says it stood: else the shards (or the
    settings that deal them) changed since, and the run would not continue the same data."""
    keys = ("slot", "shard", "offset", "samples")
    if any(position.get(key) != recorded.get(key) for key in keys):
        raise VideoTextError(
            f"data.shards: resuming reader {position.get('slot')} arrived at shard {position.get('shard')} sample "
            f"{position.get('offset')} ({position.get('samples')} read), but the checkpoint recorded shard "
            f"{recorded.get('shard')} sample {recorded.get('offset')} ({recorded.get('samples')}): the shards or "
            f"data.num_workers / shuffle_buffer / samples_per_epoch changed since; resume with those of the run")


def as_is(item: Any) -> Any:
    """A loader's collate function that leaves the worker's batch as it is."""
    return item


class ShardBatches:
    """A run's training batches from shards, with the same `batch(epoch, index)` / `epoch_length`
    as batches from disk. Workers decode each sample with `decoder`; `assemble(items, epoch)` makes
    the method's own batch of them in the trainer's process. `batch_size` may change per epoch
    (a callable: Frozen's curriculum stages, §4.3)."""

    def __init__(self, pattern: str | Sequence[str], decoder: Any, assemble: Callable[[list[Any], int], dict[str, Any]],
                 batch_size: int | Callable[[int], int], samples_per_epoch: int, seed: int, workers: int = 2,
                 buffer: int = 1000, retry: Retry = Retry(), failures: str | os.PathLike | None = None,
                 index: dict[str, Any] | None = None, split: str | None = None, narrated: bool = False):
        self.urls = expand(pattern)
        counts = {}
        if index:  # sample counts let a reader see a shard that ended early
            by_name = {s["name"]: int(s["samples"]) for s in index.get("shards", [])}
            counts = {u: by_name[u.rsplit("/", 1)[-1]] for u in self.urls if u.rsplit("/", 1)[-1] in by_name}
        self.batch_size_at = batch_size if callable(batch_size) else (lambda epoch, size=batch_size: size)
        self.samples_per_epoch, self.world, self.assemble = samples_per_epoch, 1, assemble
        self.workers = max(1, workers)
        self.loader_workers = workers  # 0: read in this process
        self.spec = {"urls": self.urls, "counts": counts, "decoder": decoder, "seed": seed, "rank": 0, "world": 1,
                     "workers": self.workers, "buffer": buffer, "retry": retry,
                     "failures": str(failures) if failures else None, "split": split, "narrated": narrated}
        self._iterator: Iterator[dict[str, Any]] | None = None
        self._next: tuple[int, int] | None = None
        self.positions: dict[int, dict[str, Any]] = {}  # worker role -> its last position
        self.expected: list[dict[str, Any]] = []  # the positions a resumed run's checkpoint recorded

    def expect(self, positions: list[dict[str, Any]] | None) -> None:
        """On resume: the readers' positions the checkpoint recorded, checked as they replay."""
        self.expected = list(positions or [])

    def shard(self, rank: int, world: int) -> None:
        """This rank's readers take slots rank × workers … (the trainer calls this under torchrun)."""
        self.world = world
        self.spec.update(rank=rank, world=world)
        self._iterator = None

    def rank_batch_size(self, epoch: int) -> int:
        size = self.batch_size_at(epoch)
        if size % self.world:
            raise VideoTextError(f"a batch of {size} (train.batch_size, or the stage's) does not split over {self.world} ranks")
        return size // self.world

    def epoch_length(self, epoch: int) -> int:
        return self.samples_per_epoch // self.batch_size_at(epoch)

    def __len__(self) -> int:
        return self.epoch_length(0)

    def _open(self, epoch: int, start: int) -> Iterator[dict[str, Any]]:
        expect = {int(p["batch"]) % self.workers: p for p in self.expected if p.get("epoch") == epoch}
        dataset = WorkerBatches(self.spec, epoch, start, self.epoch_length(epoch), self.rank_batch_size(epoch), expect)
        if self.loader_workers == 0:
            return iter(dataset)
        # its own generator: a loader draws its workers' base seed from the one it is given, and a
        # draw from torch's global generator would shift the dropout masks of a resumed run
        # as they are (`collate_fn`): torch's default would turn each array into a tensor in its own
        # shared-memory segment, thousands a batch, 5x slower than pickling the batch whole
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=self.loader_workers,
                                             prefetch_factor=2, persistent_workers=False, collate_fn=as_is,
                                             generator=torch.Generator().manual_seed(self.spec["seed"] + epoch))
        return iter(loader)

    def batch(self, epoch: int, index: int) -> dict[str, Any]:
        if self._iterator is None or self._next != (epoch, index):
            self._iterator = self._open(epoch, index)
        item = next(self._iterator)
        if item["index"] != index:
            raise VideoTextError(f"shard stream: batch {item['index']} arrived where {index} was due")
        self._next = (epoch, index + 1)
        self.positions[index % self.workers] = {"epoch": epoch, "batch": index, **item["position"]}
        out = self.assemble(item["samples"], epoch)
        out["video_ids"] = [video.id for video, _ in item["samples"]]
        return out

    def position(self) -> list[dict[str, Any]]:
        """Where each worker's stream stands (shard and sample offset): saved with the checkpoint."""
        return [self.positions[role] for role in sorted(self.positions)]


def samples_in(index: dict[str, Any] | None, split: str, given: int, key: str) -> int:
    """Samples per epoch: `given`, else the shard index's count of `split`."""
    samples = given or int(((index or {}).get("splits") or {}).get(split, 0))
    if samples <= 0:
        raise VideoTextError(f"{key}: set it (the shards have no shards.json beside them to count their "
                             f"{split!r} samples)")
    return samples


def shard_training_batches(method: Any, config: Any, dims: dict[str, int], failures: str | os.PathLike | None) -> Any:
    """The run's training batches from `data.shards`: expert features assembled by the method's own
    `stream_batch`, or, for a method on pixels, the clip batches of its `shard_batches`."""
    from videotext.data.loaders import VideoFeatures

    cfg = config.data
    if not getattr(method, "streams_shards", False):
        raise VideoTextError(f"data.shards: method {config.method!r} does not train from shards yet (its batches "
                             f"are neither one caption with one video's features nor clips); use data.manifest")
    windows = cfg.text == "narration" and cfg.narration.window_words > 0  # MMT §4.2 pre-training
    if cfg.mixture or cfg.text not in ("captions", "narration") or (cfg.text == "narration" and not windows):
        raise VideoTextError(f"data.shards: streams captions, or narration windows (data.narration.window_words "
                             f"> 0); data.mixture, data.text {cfg.text!r} and narration clips are for data on disk")
    index = read_index(cfg.shards, cfg.shard_timeout)
    samples = samples_in(index, cfg.train_split, cfg.samples_per_epoch, "data.samples_per_epoch")
    seed = config.train.seed
    common = {"seed": seed, "workers": cfg.num_workers, "buffer": cfg.shuffle_buffer, "failures": failures,
              "retry": Retry(cfg.shard_retries, 1.0, cfg.shard_timeout)}
    if getattr(method, "video_inputs", "features") == "frames":
        return method.shard_batches(cfg.shards, samples, index, config, common)
    if index is not None:
        stored = index.get("dims") or {}
        wrong = {e: (stored.get(e), d) for e, d in dims.items() if stored.get(e) != d}
        if wrong:
            raise VideoTextError(f"data.shards: expert dims (shards, run) {wrong} differ")
    experts = list(cfg.experts)

    def assemble(items: list[Any], epoch: int) -> dict[str, Any]:
        videos = [video for video, _ in items]
        store: Any = SampleStore(dims, items)
        if windows:  # each video's narration window of (seed, epoch, video), its features cut to it
            videos, store = [window_of(video, seed, epoch, cfg.narration) for video in videos], SpanStore(store)
        reader = VideoFeatures(store, experts, cfg.max_steps_per_expert)
        return method.stream_batch(videos, reader, epoch, seed)

    return ShardBatches(cfg.shards, FeatureDecoder(experts), assemble, config.train.batch_size, samples,
                        index=index, split=cfg.train_split, narrated=windows, **common)
