"""Training on several datasets in one run: one batch always comes from one dataset.

`MixtureBatches(sources, mode, weights)` combines the training batches of several
sources (each anything with `len()` and `batch(epoch, index)`, at its own batch size):

- ``alternate``: round robin — batch k is the next batch of source k mod S while every
  source lasts, then the sources that still have batches continue in turn (Frozen §3.2
  image + video training: video and image batches alternate; `frames.AlternatingBatches`);
- ``weighted``: each source gets a share of the epoch's batches proportional to its
  weight (largest-remainder rounding of weight × total), in an order shuffled per
  (seed, epoch); a source asked for more batches than it has starts its order again.

The batch at (epoch, index) depends only on (seed, epoch, index), so resume is exact.
`training_batches` builds a run's training batches from its config (`data.mixture`,
`data.text: narration` windows); the trainer calls it in place of `method.train_batches`.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from videotext.data.features import FeatureStore
from videotext.data.loaders import VideoFeatures, epoch_length
from videotext.data.narration import NarrationWindows, SpanStore, text_dataset
from videotext.data.schema import VideoTextDataset
from videotext.errors import VideoTextError

MODES = ("alternate", "weighted")


class MixtureBatches:
    """Batches of several sources in one epoch (see the module docstring)."""

    def __init__(self, sources: Sequence[Any], mode: str = "alternate", weights: Sequence[float] | None = None,
                 seed: int = 0):
        if mode not in MODES:
            raise VideoTextError(f"data.mixture_mode: expected one of {list(MODES)}, got {mode!r}")
        if not sources:
            raise VideoTextError("data.mixture: no training sources")
        weights = list(weights) if weights is not None else [1.0] * len(sources)
        if len(weights) != len(sources) or any(w < 0 for w in weights) or sum(weights) <= 0:
            raise VideoTextError(f"data.mixture: weights must be ≥ 0, one per source, not all 0; got {weights}")
        self.sources, self.mode, self.weights, self.seed = tuple(sources), mode, weights, seed
        self.lengths = [len(s) for s in self.sources]

    def lengths_at(self, epoch: int) -> list[int]:
        return [epoch_length(s, epoch) for s in self.sources]

    def epoch_length(self, epoch: int) -> int:
        return sum(self.lengths_at(epoch))

    def __len__(self) -> int:
        return sum(self.lengths)

    @functools.lru_cache(maxsize=4)
    def _plan(self, epoch: int) -> tuple[tuple[int, int], ...]:
        """(source, index in that source) of every batch of `epoch`."""
        lengths = self.lengths_at(epoch)
        if self.mode == "alternate":
            plan, taken = [], [0] * len(self.sources)
            while len(plan) < sum(lengths):
                for which, length in enumerate(lengths):
                    if taken[which] < length:
                        plan.append((which, taken[which]))
                        taken[which] += 1
            return tuple(plan)
        total = sum(lengths)
        exact = [total * w / sum(self.weights) for w in self.weights]
        counts = [int(x) for x in exact]
        for i in sorted(range(len(exact)), key=lambda i: (-(exact[i] - counts[i]), i))[: total - sum(counts)]:
            counts[i] += 1
        labels = torch.tensor([i for i, c in enumerate(counts) for _ in range(c)])
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch + 7_919)
        labels = labels[torch.randperm(total, generator=generator)].tolist()
        plan, taken = [], [0] * len(self.sources)
        for which in labels:
            plan.append((which, taken[which] % max(1, lengths[which])))
            taken[which] += 1
        return tuple(plan)

    def locate(self, index: int, epoch: int = 0) -> tuple[int, int]:
        """Batch position → (source, index in that source)."""
        return self._plan(epoch)[index]

    def batch(self, epoch: int, index: int) -> dict[str, Any]:
        which, inner = self.locate(index, epoch)
        return self.sources[which].batch(epoch, inner)

    def epoch(self, epoch: int, start_batch: int = 0) -> Iterator[dict[str, Any]]:
        for index in range(start_batch, self.epoch_length(epoch)):
            yield self.batch(epoch, index)


def source_data(source: Any, experts: Sequence[str], max_steps: int, narration: Any) -> tuple[Any, Any]:
    """(dataset split, feature reader) of one `data.mixture` entry; experts must match the run's."""
    if not source.manifest:
        raise VideoTextError("data.mixture[].manifest: every mixture entry needs a manifest")
    dataset = text_dataset(VideoTextDataset.load(source.manifest), source.text, narration)
    if source.split not in dataset.splits:
        raise VideoTextError(f"{source.manifest}: no split {source.split!r} (have {sorted(dataset.splits)})")
    split = dataset.split(source.split)
    if not experts:
        return split, None
    folder = source.features or str(Path(source.manifest).parent / "features")
    store = FeatureStore(folder)
    missing = [e for e in experts if e not in store.experts]
    if missing:
        raise VideoTextError(f"{folder}: no features for expert(s) {missing} (have {store.experts}); the run's "
                             f"data.experts must exist in every data.mixture entry")
    return split, VideoFeatures(SpanStore(store), experts, max_steps)


def training_batches(method: Any, data: Any, config: Any, train_set: Any) -> Any:
    """The training batches of a run: the method's batches of `train_set`, wrapped in
    narration windows (`data.narration.window_words`) and mixed with `data.mixture`."""
    cfg = config.data
    seed, batch_size = config.train.seed, config.train.batch_size
    texts = [cfg.text] + [source.text for source in cfg.mixture]
    if "narration" in texts and getattr(method, "video_inputs", "features") != "features":
        raise VideoTextError(f"data.text: narration clips are time spans of expert features; method "
                             f"{config.method!r} reads {method.video_inputs}, which narration does not cut yet")

    def batches_of(dataset: Any, reader: Any, size: int, source_seed: int, text: str) -> Any:
        out = method.train_batches(dataset, reader, size, source_seed)
        if text == "narration" and cfg.narration.window_words > 0:
            out = NarrationWindows(out, cfg.narration, source_seed)
        return out

    main = batches_of(train_set, data.read_features, batch_size, seed, cfg.text)
    if config.train.group_batches:
        video_ids = getattr(main, "video_ids", None)
        if video_ids is None or not hasattr(main, "group_by"):
            raise VideoTextError(f"train.group_batches: the training batches of method {config.method!r} "
                                 f"(data.text {cfg.text!r}) are not one row per video; it cannot group them")
        main.group_by([train_set[v].meta.get("group") for v in video_ids])
    if not cfg.mixture:
        return main
    sources, weights = [main], [cfg.mixture_main_weight]
    for k, source in enumerate(cfg.mixture, start=1):
        split, reader = source_data(source, cfg.experts, cfg.max_steps_per_expert, cfg.narration)
        if reader is not None and data.read_features is not None and reader.dims != data.read_features.dims:
            raise VideoTextError(f"data.mixture[{k - 1}] ({source.manifest}): expert dims {reader.dims} differ "
                                 f"from the run's {data.read_features.dims}")
        size = source.batch_size or batch_size
        made = batches_of(split, reader, size, seed + k, source.text)
        if len(made) == 0:
            raise VideoTextError(f"data.mixture[{k - 1}].batch_size={size} is larger than split "
                                 f"{source.split!r} of {source.manifest} ({len(split)} videos)")
        sources.append(made)
        weights.append(source.weight)
    return MixtureBatches(sources, cfg.mixture_mode, weights, seed)
