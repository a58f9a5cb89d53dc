"""MMT's video inputs: every expert's features with their timestamps and pooled vectors.

MMT (Gabeur et al. 2020, §3.1) tags each feature with the second it covers and starts each
expert's aggregated token from the max- or mean-pool of all its features, so its reader keeps
what the shared `VideoFeatures` drops: per-step timestamps, the pooled vectors over every step
(before sub-sampling), and a per-expert "missing" reading for test-time expert removal.

    MMTFeatures         one video → {"features", "times", "max", "mean"} per expert
    collate_mmt         pad per expert into a batch ([B, T, D] features, [B, T] masks and times)
    MMTCaptionBatches   the shared seeded caption-video batches, with timestamps
"""
from __future__ import annotations

import zlib
from typing import Any, Sequence

import numpy as np
import torch

from videotext.data.loaders import CaptionVideoBatches, VideoFeatures, caption_video_batch, subsample_steps


class MMTFeatures:
    """One video's expert features, timestamps and pooled (max / mean) vectors.

    The pooled vectors cover every step of the video, before sub-sampling to
    `max_steps` (as the official loader's max-pool). A store entry flagged `missing`
    (no audio, no speech) or absent gives zero steps. With `shuffle`, features are
    permuted against their timestamps by a fixed per-video permutation (Table 3a
    "shuffled feats"): the temporal embedding then carries no order.
    """

    def __init__(self, store: Any, experts: Sequence[str], max_steps: int, shuffle: bool = False,
                 missing: Sequence[str] = ()):
        self.store, self.experts, self.max_steps, self.shuffle = store, list(experts), max_steps, shuffle
        self.missing = set(missing)  # experts read as missing for every video (test-time removal)
        self.dims = {e: int(store.dim(e)) for e in self.experts}

    @classmethod
    def wrap(cls, reader: VideoFeatures, shuffle: bool = False) -> "MMTFeatures":
        if isinstance(reader, MMTFeatures):
            return reader
        return cls(reader.store, reader.experts, reader.max_steps, shuffle)

    def __call__(self, key: str) -> dict[str, dict[str, np.ndarray]]:
        out: dict[str, dict[str, np.ndarray]] = {"features": {}, "times": {}, "max": {}, "mean": {}}
        for expert in self.experts:
            dim = self.dims[expert]
            values, times = np.zeros((0, dim), np.float32), np.zeros(0, np.float64)
            if expert not in self.missing and self.store.has(expert, key) and not self.store.is_missing(expert, key):
                values, times = self.store.get(expert, key)
                values = np.asarray(values, dtype=np.float32).reshape(-1, dim)
                times = np.asarray(times, dtype=np.float64).reshape(-1)
            out["max"][expert] = values.max(0) if len(values) else np.zeros(dim, np.float32)
            out["mean"][expert] = values.mean(0) if len(values) else np.zeros(dim, np.float32)
            keep = subsample_steps(len(values), self.max_steps)
            times = times[keep] if len(times) == len(values) else np.full(len(keep), np.nan)  # no stamps: T_unk
            values = values[keep]
            if self.shuffle and len(values) > 1:
                perm = np.random.default_rng(zlib.crc32(f"{expert}/{key}".encode())).permutation(len(values))
                values = values[perm]
            out["features"][expert], out["times"][expert] = values, times
        return out


def collate_mmt(items: list[dict[str, dict[str, np.ndarray]]], experts: Sequence[str]) -> dict[str, Any]:
    """Pad per expert: {"features" {e: [B, T, D]}, "masks" {e: [B, T] bool}, "times" {e: [B, T]}
    (NaN = unknown / padding), "pooled_max" / "pooled_mean" {e: [B, D]}}."""
    batch: dict[str, Any] = {"features": {}, "masks": {}, "times": {}, "pooled_max": {}, "pooled_mean": {}}
    for expert in experts:
        seqs = [item["features"][expert] for item in items]
        length = max(1, max(len(s) for s in seqs))
        padded = np.zeros((len(seqs), length, seqs[0].shape[1]), np.float32)
        mask = np.zeros((len(seqs), length), bool)
        times = np.full((len(seqs), length), np.nan, np.float32)
        for i, (seq, item) in enumerate(zip(seqs, items)):
            padded[i, : len(seq)], mask[i, : len(seq)] = seq, True
            times[i, : len(seq)] = item["times"][expert]
        batch["features"][expert] = torch.from_numpy(padded)
        batch["masks"][expert] = torch.from_numpy(mask)
        batch["times"][expert] = torch.from_numpy(times)
        batch["pooled_max"][expert] = torch.from_numpy(np.stack([it["max"][expert] for it in items]))
        batch["pooled_mean"][expert] = torch.from_numpy(np.stack([it["mean"][expert] for it in items]))
    return batch


class MMTCaptionBatches(CaptionVideoBatches):
    """The shared caption-video batches (same seeded order and caption choice), with timestamps."""

    def batch(self, epoch: int, index: int) -> dict[str, Any]:
        ids = [self.video_ids[i] for i in self.positions(epoch, index)]
        return caption_video_batch([self.dataset[i] for i in ids], self.read_features, self.prepare_text, self.seed,
                                   epoch, collate=collate_mmt)
