"""Training batches streamed from WebDataset shards (`videotext.data.shards`): local paths, HTTP(S),
`s3://` and other fsspec URLs, or `pipe:COMMAND`, named by a brace pattern (`data.shards`).

In stages, one module each: `urls` (open a URL, read `shards.json`), `tar` (a tar stream's
samples), `shard` (one shard read whole, retried), `slot` (a reader's share of the shards, its
shuffle buffer and resume), `batches` (the trainer's batches over loader workers); `decoders`
(samples to features or clips) apart from them, and `training` (the method glue the trainer asks).

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

Every name is exported here as before the split (`from videotext.data.streaming import ShardBatches`).
"""
from __future__ import annotations

from videotext.data.streaming.batches import ShardBatches, as_is, samples_in
from videotext.data.streaming.decoders import FeatureDecoder, FrameDecoder, SampleStore, decode_sample, sample_video
from videotext.data.streaming.shard import Retry, ShardFailed, read_shard
from videotext.data.streaming.slot import SlotStream, WorkerBatches, check_replay, slot_shards
from videotext.data.streaming.tar import tar_samples
from videotext.data.streaming.training import ClipShards, ImageShards, clip_training_batches, shard_training_batches
from videotext.data.streaming.urls import READ_BUFFER, expand, open_url, read_index

__all__ = [
    "READ_BUFFER", "ClipShards", "FeatureDecoder", "FrameDecoder", "ImageShards", "Retry", "SampleStore", "ShardBatches",
    "ShardFailed", "SlotStream", "WorkerBatches", "as_is", "check_replay", "clip_training_batches", "decode_sample",
    "expand", "open_url", "read_index", "read_shard", "sample_video", "samples_in", "shard_training_batches",
    "slot_shards", "tar_samples",
]
