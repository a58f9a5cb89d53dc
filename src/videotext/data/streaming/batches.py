"""A run's training batches from shards (`ShardBatches`): the trainer's `batch(epoch, index)` over
loader workers that each read their slot (`streaming.slot`), with the readers' positions saved
in checkpoints; and the samples an epoch holds (`samples_in`)."""
from __future__ import annotations

import os
from typing import Any, Callable, Iterator, Sequence

import torch

from videotext.data.streaming.shard import Retry
from videotext.data.streaming.slot import WorkerBatches
from videotext.data.streaming.urls import expand
from videotext.errors import VideoTextError


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
