"""A reader's slot: which shards a (rank, loader worker) reads in an epoch (`slot_shards`), its
endless shuffled sample stream (`SlotStream`: shuffle buffer, resampling, its position), and what
one loader worker yields (`WorkerBatches`: its share of a rank's batches, replayed and checked
against the checkpoint on resume, `check_replay`). See `videotext.data.streaming`."""
from __future__ import annotations

import json
import os
import random
from typing import Any, Iterator, Sequence

import torch

from videotext.data.narration import has_narration
from videotext.data.streaming.shard import Retry, ShardFailed, read_shard
from videotext.errors import VideoTextError
from videotext.io import FailureLog


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
