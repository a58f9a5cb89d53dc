"""The one training loop, for every method.

    run_dir/config.yaml            the resolved config
    run_dir/checkpoints/last/      weights + optimizer/scheduler/RNG state (resume point)
    run_dir/checkpoints/best/      weights selected on the VALIDATION split
    run_dir/metrics.jsonl          {"kind": "train" | "val" | "test", "step", "epoch", ...} per line
    run_dir/tb/                    TensorBoard events
    run_dir/test_metrics.json      the test split, evaluated once, with the best checkpoint

Resume is exact: the batch order and caption choice are functions of (seed, epoch,
position) and every RNG is saved, so a run killed at any point and resumed from its
last checkpoint ends with the same weights as an uninterrupted run.

Under `torchrun` (WORLD_SIZE > 1) the method is wrapped in DistributedDataParallel and
rank r trains on its contiguous rows of each global batch `index` (the same global
batches as one process with the same seed, at any world size); losses see the global
batch (`train.global_negatives`). Rank 0 alone logs, validates, checkpoints and tests;
the checkpoint does not depend on the world size, so a run resumes on any number of
processes. See `videotext.distributed`.
"""
from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path
from typing import Any, Callable

import torch

from videotext.config import RunConfig, save_config, to_plain
from videotext.data.loaders import epoch_length
from videotext.data.streaming import shard_training_batches
from videotext.data.mixtures import training_batches
from videotext.data.run_data import RunData
from videotext.errors import VideoTextError
from videotext.eval.evaluate import metric_directions
from videotext.eval.protocols import evaluate_split
from videotext.digests import json_line
from videotext.io import atomic_open, read_json_lines, write_json
from videotext.models.base import Method
from videotext.models.registry import build_method
from videotext.runtime import (network_precision, pin_batch, resolve_device, resolve_precision, retain_freed_memory,
                               to_device)
from videotext.text.encoder import CachedTextEncoder
from videotext import distributed as dist
from videotext.train.checkpoint import (
    load_state, load_weights, recover_checkpoint, rng_state, save_checkpoint, seed_everything, set_rng_state,
)
from videotext.train.grad_cache import average_gradients, chunked_backward
from videotext.train.init_from import apply_init
from videotext.train.schedules import build_optimizer, build_scheduler, depends_on_budget, param_groups
from videotext.train.stopping import improves


class TrainingDiverged(VideoTextError, RuntimeError):
    """The loss became NaN or infinite; no checkpoint is written from that state."""


def metric_value(metrics: dict[str, Any], name: str) -> float:
    """`t2v.geometric_mean` → metrics["t2v"]["geometric_mean"]; a key with a dot of its own is found
    whole (`moments.R1@0.5` → metrics["moments"]["R1@0.5"])."""
    node: Any = metrics
    parts = name.split(".")
    while parts:
        for length in range(len(parts), 0, -1):  # the longest key first
            key = ".".join(parts[:length])
            if isinstance(node, dict) and key in node:
                node, parts = node[key], parts[length:]
                break
        else:
            raise VideoTextError(f"train.select_metric: {name!r} is not in the validation metrics")
    return float(node)


def frozen_text_caches(method: torch.nn.Module, dtype: torch.dtype | None, splits: list[Any],
                       progress: bool = False) -> int:
    """Frozen text towers compute their cached vectors at `dtype` (the method's measured inference
    precision: the tower is a fixed feature extractor, run once per text, as an expert is; on the
    demo's captions MiniLM ran 2.6x faster under bf16 than at fp32), all of them before the first
    step and in one fixed order, so a resumed run trains on the same vectors. `progress`: a bar
    with the count of captions (bench/text_cache.py times a 200 000-caption manifest). Returns the
    count."""
    texts = [t for split in splits for video in split
             for t in [*video.captions, *(s.sentence for s in video.segments), video.paragraph] if t]
    encoded = 0
    for module in method.modules():
        if isinstance(module, CachedTextEncoder) and module.freeze:
            module.cache_dtype = dtype
            encoded += module.prefill(texts, progress=progress)
    return encoded


class Trainer:
    """Fit a method: train on `data.train_split`, select on `data.val_split`, test once."""

    def __init__(self, config: RunConfig, run_dir: str | Path | None = None, resume: bool = False,
                 progress: bool = True, stop_after_steps: int | None = None,
                 on_step: Callable[[int, dict], None] | None = None):
        self.config = config
        self.run_dir = Path(run_dir or config.out_dir)
        self.resume = resume
        self.progress = progress
        self.stop_after_steps = stop_after_steps  # for tests and time-boxed runs: stop (as if killed)
        self.on_step = on_step
        self.device = resolve_device(config.train.device)
        self.amp = resolve_precision(config.train.amp, self.device, training=True)
        self.rank, self.world = 0, 1
        # batches made (decoded, pinned) ahead on a thread while the step runs: on a GPU the host is
        # otherwise idle during a step; on a CPU the step takes every core (videotext.train.trainer.BatchPrefetcher)
        self.prefetch_batches = 2 if self.device.type == "cuda" else 0

    # --- setup -----------------------------------------------------------------------
    @property
    def expert_dims(self) -> dict[str, int] | None:
        return self.data.read_features.dims if self.data.read_features is not None else None

    def build(self) -> None:
        cfg = self.config
        if cfg.train.threads > 0:
            torch.set_num_threads(cfg.train.threads)
        retain_freed_memory()  # the demo's training: 90.8 -> 80.3 s (system time 8.9 -> 6.1 s)
        rank_device = dist.init_distributed(cfg.train.device, timeout_minutes=cfg.train.dist_timeout_minutes)
        if rank_device is not None:  # under torchrun: this rank's device (cuda:LOCAL_RANK or cpu)
            self.device = rank_device
            self.amp = resolve_precision(cfg.train.amp, self.device, training=True)
        self.rank, self.world = dist.rank(), dist.world()
        seed_everything(cfg.train.seed)
        if cfg.train.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
        self.data = RunData(cfg)
        self.method: Method = build_method(cfg.method, cfg.model, expert_dims=self.expert_dims,
                                           gather=dist.LossGather(cfg.train.global_negatives))
        self._check_chunk(self.method)
        # the run pins its whole model config, defaults included: a later change of a default
        # cannot reload this run as another model (config.yaml and every checkpoint's meta)
        cfg.model = self.method.config_dict()
        apply_init(self.method, cfg.train, self.run_dir, self.rank, cfg.method)
        self.method.to(self.device)
        self.train_set = self.data.split(cfg.data.train_split)
        self.val_set = self.data.split(cfg.data.val_split) if cfg.data.val_split in self.data.dataset.splits else None
        cpu = time.process_time()
        frozen_text_caches(self.method, network_precision(cfg.method, cfg.inference.precision, self.device),
                           [s for s in (self.train_set, self.val_set) if s is not None],
                           progress=self.progress and self.rank == 0)
        self.text_cache_cpu_s = time.process_time() - cpu  # part of the training cost, outside the steps
        if cfg.data.shards:  # streamed from WebDataset shards (videotext.data.streaming)
            self.prefetch_batches = 0  # a stream's readers advance as they are read: its position is the step's
            self.batches = shard_training_batches(self.method, cfg, self.expert_dims or {}, self.run_dir / "failures.jsonl")
        else:
            self.batches = training_batches(self.method, self.data, cfg, self.train_set)
        empty = [e for e in range(cfg.train.epochs) if epoch_length(self.batches, e) == 0]
        if empty:  # per epoch: a curriculum stage may have its own batch size (Frozen §4.3)
            raise VideoTextError(
                f"the batch size of epoch {empty[0] + 1} (train.batch_size={cfg.train.batch_size}, or the "
                f"stage's model.frame_batch_sizes) is larger than the number of training examples in split "
                f"{cfg.data.train_split!r} ({len(self.train_set)} videos)"
            )
        if self.world > 1:
            if cfg.train.batch_size < self.world:
                raise VideoTextError(f"train.batch_size={cfg.train.batch_size} is smaller than the world size "
                                     f"{self.world}: every rank needs at least one row of each global batch")
            shard_batches(self.batches, self.rank, self.world)
        # the batch count may change per epoch (Frozen's per-stage batch sizes, §4.3)
        self.total_steps = sum(math.ceil(epoch_length(self.batches, e) / cfg.train.accumulate)
                               for e in range(cfg.train.epochs))
        self.optimizer = build_optimizer(param_groups(self.method, cfg.optim.weight_decay, cfg.optim.lr, cfg.optim.lr_scale), cfg.optim)
        self.scheduler = build_scheduler(self.optimizer, cfg.schedule, self.total_steps)
        self.scaler = torch.amp.GradScaler(enabled=self.amp is torch.float16 and self.device.type == "cuda")
        self.model: torch.nn.Module = self.method
        if self.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            self.model = DistributedDataParallel(
                LossForward(self.method), device_ids=[self.device.index] if self.device.type == "cuda" else None,
                find_unused_parameters=cfg.train.find_unused_parameters)
            self._seed_rank()

    def _check_chunk(self, method: Method) -> None:
        chunk = self.config.train.chunk
        if chunk < 0:
            raise VideoTextError(f"train.chunk={chunk}: expected 0 (off) or a positive number of rows")
        if chunk and not method.chunks_contrastive_step:
            raise VideoTextError(f"train.chunk={chunk}: chunks the towers of a contrastive loss over two towers "
                                 f"(dual, frozen, clip4clip, toco); method {self.config.method!r} has none")

    def _seed_rank(self) -> None:
        """Ranks > 0 draw their own dropout masks (as open_clip: seed + rank); rank 0 keeps the
        single-process stream, whose state the checkpoint saves."""
        if self.rank > 0:
            seed_everything(self.config.train.seed + 1_000_003 * self.rank + self.state_step())

    def state_step(self) -> int:
        return int(getattr(self, "state", {}).get("step", 0))

    # --- the loop --------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        """Train (or resume), keep the best validation checkpoint, evaluate test once."""
        self.build()
        cfg = self.config
        ckpt = self.run_dir / "checkpoints"
        self.state = {"epoch": 0, "batch": 0, "step": 0, "best": None, "best_step": None, "log_lines": 0}
        for name in ("last", "best"):
            recover_checkpoint(ckpt / name)
        if self.resume and (ckpt / "last").exists():
            self._restore(ckpt / "last")
            if hasattr(self.batches, "expect"):  # shards: each reader's replay must arrive where it stood
                self.batches.expect(self.state.get("data_position"))
        elif (ckpt / "last").exists() and not self.resume:
            raise VideoTextError(f"{self.run_dir}: already has checkpoints; pass --resume to continue it "
                                 f"or choose another out_dir")
        # the frozen text caches' CPU time of the run's first start (a resume fills them again, uncounted)
        self.state.setdefault("text_cache_cpu_s", round(self.text_cache_cpu_s, 2))
        # the budget this run's lr schedule is planned for; a larger train.epochs continues the run
        # as if planned so only where the schedule does not depend on it (`depends_on_budget`)
        self.state["total_steps"] = self.total_steps
        if self.rank == 0:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            save_config(cfg, self.run_dir / "config.yaml")
            self.log = MetricsLog(self.run_dir, keep_lines=self.state["log_lines"], purge_step=self.state["step"])
        else:
            self.log = NullLog(self.state["log_lines"])
        try:
            finished = self._train_epochs(ckpt)
        finally:
            self.log.close()
        if not finished:
            return {"stopped_at_step": self.state["step"]}
        dist.barrier()  # the last checkpoints are written
        if self.rank > 0:
            return {"rank": self.rank, "note": "rank 0 evaluates the test split"}
        return self.test(ckpt)

    def _train_epochs(self, ckpt: Path) -> bool:
        cfg = self.config
        accumulate = cfg.train.accumulate
        self.method.train()
        if self._patience_exhausted():  # early-stopped before this resume: a larger budget trains no further
            return True
        for epoch in range(self.state["epoch"], cfg.train.epochs):
            start = self.state["batch"]
            batches_in_epoch = epoch_length(self.batches, epoch)
            bar = _progress(range(start, batches_in_epoch), self.progress and self.rank == 0,
                            f"epoch {epoch + 1}/{cfg.train.epochs}")
            ahead = BatchPrefetcher(self.batches, epoch, start, batches_in_epoch, self.prefetch_batches)
            try:
                for index in bar:
                    wall, cpu = time.perf_counter(), time.process_time()
                    batch = to_device(ahead.next(index), self.device, non_blocking=self.device.type == "cuda")
                    last_of_epoch = index + 1 == batches_in_epoch
                    sync = (index + 1) % accumulate == 0 or last_of_epoch
                    parts = self._forward_backward(batch, accumulate, sync)
                    if sync:
                        if self.world > 1:  # log the mean over ranks (equal on every rank with global negatives)
                            parts = dist.all_reduce_mean(parts)
                        self._optimizer_step()
                    self._add_train_time(time.perf_counter() - wall, time.process_time() - cpu)
                    if sync:
                        self.state["step"] += 1
                        step = self.state["step"]
                        self.state["epoch"], self.state["batch"] = epoch, index + 1
                        if step % cfg.train.log_every == 0 or last_of_epoch:
                            self.log.write({"kind": "train", "step": step,
                                            "epoch": epoch + (index + 1) / batches_in_epoch,
                                            "lr": self.scheduler.last_lr, **parts, **self._train_time()})
                        if hasattr(bar, "set_postfix"):
                            bar.set_postfix(loss=f"{parts['loss']:.4f}", lr=f"{self.scheduler.last_lr:.2e}")
                        if self.on_step:
                            self.on_step(step, parts)
                        if (cfg.train.checkpoint_every and step % cfg.train.checkpoint_every == 0
                                and not last_of_epoch):
                            self._save(ckpt / "last")
                        if self.stop_after_steps is not None and step >= self.stop_after_steps:
                            return False
            finally:
                ahead.close()
            self.state["epoch"], self.state["batch"] = epoch + 1, 0
            if self.val_set is not None and ((epoch + 1) % cfg.train.eval_every == 0 or epoch + 1 == cfg.train.epochs):
                self._validate(ckpt, epoch + 1)
            self._save(ckpt / "last")
            if self._patience_exhausted():
                break
        if self.val_set is None and self.rank == 0:  # no validation split: the last weights are the selected ones
            save_checkpoint(ckpt / "best", self.method, self._meta(selected_by="last epoch (no validation split)"))
        return True

    def _add_train_time(self, wall: float, cpu: float) -> None:
        """Count one batch's seconds (loading it included, validation not) in the resumable state."""
        self.state["train_s"] = self.state.get("train_s", 0.0) + wall
        self.state["train_cpu_s"] = self.state.get("train_cpu_s", 0.0) + cpu

    def _train_time(self) -> dict[str, float]:
        """Training seconds so far, wall and this process's CPU (all its threads), for the log: the
        cost of a schedule (e.g. Frozen's frame curriculum, Table 3's pre-training hours)."""
        return {"train_s": round(self.state.get("train_s", 0.0), 2),
                "train_cpu_s": round(self.state.get("train_cpu_s", 0.0), 2)}

    def _forward_backward(self, batch: dict[str, Any], accumulate: int, sync: bool = True) -> dict[str, float]:
        if self.config.train.chunk:
            return self._chunked_forward_backward(batch, accumulate, sync)
        autocast = (torch.autocast(self.device.type, dtype=self.amp) if self.amp is not None
                    else contextlib.nullcontext())
        # DDP: no gradient all-reduce on accumulation steps, only on the step that updates
        no_sync = self.model.no_sync() if self.world > 1 and not sync else contextlib.nullcontext()
        with no_sync:
            with autocast:
                out = self.model(batch) if self.world > 1 else self.method.loss(batch)
            loss = out["loss"]
            self._check_finite(loss)
            self.scaler.scale(loss / accumulate).backward()
        return {k: float(v.detach()) for k, v in out.items() if isinstance(v, torch.Tensor) and v.numel() == 1}

    def _chunked_forward_backward(self, batch: dict[str, Any], accumulate: int, sync: bool) -> dict[str, float]:
        """The step of `train.chunk`: the towers `chunk` rows at a time (videotext.train.grad_cache).
        Under torchrun the method runs outside DDP (several forward passes make one step) and the
        gradients are averaged over the ranks on the step that updates, as DDP would."""
        def autocast() -> Any:
            return (torch.autocast(self.device.type, dtype=self.amp) if self.amp is not None
                    else contextlib.nullcontext())

        out = chunked_backward(self.method, batch, self.config.train.chunk,
                               lambda loss: self.scaler.scale(loss / accumulate), autocast)
        self._check_finite(out["loss"])
        if sync and self.world > 1:
            average_gradients(self.method.parameters())
        return {k: float(v) for k, v in out.items() if v.numel() == 1}

    def _check_finite(self, loss: torch.Tensor) -> None:
        if not torch.isfinite(loss.detach()).all():
            raise TrainingDiverged(
                f"step {self.state['step'] + 1} (epoch {self.state['epoch'] + 1}): loss is {loss.item()}; "
                f"stopping before it corrupts a checkpoint (lower optim.lr or enable train.grad_clip)"
            )

    def _optimizer_step(self) -> None:
        clip = self.config.train.grad_clip
        if clip > 0:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.method.parameters(), clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()

    def _validate(self, ckpt: Path, epoch: int) -> None:
        metrics, value = None, None
        if self.rank == 0:  # the other ranks wait for the selection value
            metrics = evaluate_split(self.method, self.val_set, self.data.read_features, device=self.device)
            self.method.train()
            value = metric_value(metrics, self.config.train.select_metric)
        value = dist.broadcast_object(value)
        self.scheduler.step_metric(value)
        best = self.state["best"]
        selected = best is None or value > best
        if self.rank == 0:
            self.log.write({"kind": "val", "step": self.state["step"], "epoch": epoch, "selected": selected,
                            **self._train_time(),
                            **metric_directions(metrics)})
        self._count_stale(metrics, value, best)
        if selected:
            self.state["best"], self.state["best_step"] = value, self.state["step"]
            if self.rank == 0:
                save_checkpoint(ckpt / "best", self.method, self._meta(val=metrics, epoch=epoch))

    def _count_stale(self, metrics: dict[str, Any] | None, value: float, best: float | None) -> None:
        """Validations in a row without an improvement of `train.early_stop_metric` (default: the
        selection metric) by more than `train.early_stop_min_delta` (`videotext.train.stopping`)."""
        train = self.config.train
        if train.early_stop_metric and train.early_stop_metric != train.select_metric:
            stop_value = metric_value(metrics, train.early_stop_metric) if self.rank == 0 else None
            stop_value = dist.broadcast_object(stop_value)
            reference = self.state.get("stop_reference")
        else:  # a run saved before the reference was kept: the best so far is its reference
            stop_value, reference = value, self.state.get("stop_reference", best)
        if improves(stop_value, reference, train.early_stop_min_delta):
            self.state["stop_reference"], self.state["stale"] = stop_value, 0
        else:
            self.state["stale"] = self.state.get("stale", 0) + 1

    def _patience_exhausted(self, state: dict[str, Any] | None = None) -> bool:
        """Early stop: `train.early_stop_patience` validations in a row without a new best."""
        patience = self.config.train.early_stop_patience
        return patience > 0 and (self.state if state is None else state).get("stale", 0) >= patience

    def _meta(self, **extra: Any) -> dict[str, Any]:
        return {"method": self.config.method, "model": to_plain(self.config.model),
                "expert_dims": self.expert_dims, "step": self.state["step"],
                "epoch": self.state["epoch"], "time": time.strftime("%Y-%m-%dT%H:%M:%S"), **extra}

    def _save(self, folder: Path) -> None:
        """Rank 0 writes the (world-size independent) checkpoint; the others only keep count."""
        self.state["log_lines"] = self.log.lines
        if self.rank > 0:
            return
        if hasattr(self.batches, "position"):  # shards: where each reader stands (shard, sample offset)
            self.state["data_position"] = self.batches.position()
        state = {"trainer": dict(self.state), "optimizer": self.optimizer.state_dict(),
                 "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict(), "rng": rng_state()}
        save_checkpoint(folder, self.method, self._meta(), state)

    def _restore(self, folder: Path) -> None:
        load_weights(folder, self.method)
        state = load_state(folder)
        planned = state["trainer"].get("total_steps")
        stopped = self._patience_exhausted(state["trainer"])  # trains no further whatever the budget
        if planned not in (None, self.total_steps) and depends_on_budget(self.config.schedule) and not stopped:
            raise VideoTextError(
                f"{self.run_dir}: trained for a budget of {planned} optimizer steps under "
                f"schedule.decay={self.config.schedule.decay!r}, whose learning rate depends on the budget; "
                f"train.epochs={self.config.train.epochs} now gives {self.total_steps}. Resume it with its own "
                f"train.epochs, or start a new run in another out_dir")
        self.state = dict(state["trainer"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        set_rng_state(state["rng"])
        if self.world > 1:
            self._seed_rank()

    # --- test, once --------------------------------------------------------------------
    def test(self, ckpt: Path) -> dict[str, Any]:
        split = self.config.data.test_split
        load_weights(ckpt / "best", self.method)
        if split not in self.data.dataset.splits:
            return {"note": f"no {split!r} split; nothing tested"}
        metrics = evaluate_split(self.method, self.data.split(split), self.data.read_features, device=self.device)
        result = {"split": split, "best_step": self.state["best_step"],
                  **{k: v for k, v in metrics.items() if k != "ranks"}}
        write_json(self.run_dir / "test_metrics.json", result)
        with MetricsLog(self.run_dir, keep_lines=None) as log:
            log.write({"kind": "test", "step": self.state["step"], **result})
        return result


class BatchPrefetcher:
    """Batches `start` … `end - 1` of one epoch, made `depth` ahead on a thread and pinned (`pin_batch`),
    so a GPU step never waits for decoding while the host has time. Batches are pure functions of
    (seed, epoch, index) and draw from no global random state, so the thread changes no result.
    `depth` 0 makes each batch when it is asked for, in the caller's thread."""

    def __init__(self, batches: Any, epoch: int, start: int, end: int, depth: int):
        self.batches, self.epoch, self.depth = batches, epoch, depth
        self.thread = None
        if depth > 0 and end > start:
            import queue
            import threading

            self.queue: Any = queue.Queue(maxsize=depth)
            self.stop = threading.Event()
            self.thread = threading.Thread(target=self._fill, args=(start, end), daemon=True,
                                           name="videotext-batches")
            self.thread.start()

    def _fill(self, start: int, end: int) -> None:
        import queue

        for index in range(start, end):
            try:
                item: Any = (index, pin_batch(self.batches.batch(self.epoch, index)))
            except BaseException as exc:  # noqa: BLE001 - raised in the training thread
                item = (index, exc)
            while not self.stop.is_set():
                try:
                    self.queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if self.stop.is_set() or isinstance(item[1], BaseException):
                return

    def next(self, index: int) -> dict[str, Any]:
        if self.thread is None:
            return self.batches.batch(self.epoch, index)
        made, batch = self.queue.get()
        if isinstance(batch, BaseException):
            raise batch
        assert made == index, (made, index)
        return batch

    def close(self) -> None:
        if self.thread is not None:
            self.stop.set()
            self.thread.join()


class LossForward(torch.nn.Module):
    """DDP calls `forward`; a method trains through `loss(batch)`: this shim forwards to it."""

    def __init__(self, method: Method):
        super().__init__()
        self.method = method

    def forward(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        return self.method.loss(batch)


def shard_batches(batches: Any, rank: int, world: int) -> None:
    """Make `batches.batch(epoch, index)` return rank `rank`'s rows of global batch `index`."""
    if hasattr(batches, "shard"):
        batches.shard(rank, world)
    elif hasattr(batches, "sources"):  # e.g. Frozen's alternating video / image batches
        for source in batches.sources:
            shard_batches(source, rank, world)
    else:
        raise VideoTextError(f"{type(batches).__name__}: these training batches cannot be sharded over "
                             f"{world} processes (they need a `shard(rank, world)` method)")


class NullLog:
    """The metrics log of ranks > 0: counts lines as rank 0 does, writes nothing."""

    def __init__(self, lines: int = 0):
        self.lines = lines

    def write(self, entry: dict[str, Any]) -> None:
        self.lines += 1

    def close(self) -> None:
        pass


class MetricsLog:
    """Appends JSON lines to metrics.jsonl and scalars to TensorBoard.

    On resume, lines written after the checkpoint being resumed are dropped first, so
    the log reads as if the run had never stopped.
    """

    def __init__(self, run_dir: Path, keep_lines: int | None = 0, purge_step: int | None = None):
        self.path = run_dir / "metrics.jsonl"
        existing = self.path.read_bytes().split(b"\n") if self.path.exists() else []
        existing = existing[:-1] if existing and not existing[-1] else existing
        if keep_lines is not None:
            existing = existing[:keep_lines]
            with atomic_open(self.path, "wb") as handle:  # cut back whole or not at all: a kill keeps the old log
                handle.writelines(line + b"\n" for line in existing)
        self.lines = len(existing)
        self.handle = open(self.path, "ab")
        self.tb = _tensorboard(run_dir / "tb", purge_step)

    def write(self, entry: dict[str, Any]) -> None:
        self.handle.write(json_line(entry, default=float))  # with its digest (`videotext.digests`)
        self.handle.flush()
        self.lines += 1
        if self.tb is not None:
            for key, value in _flatten(entry).items():
                if key not in ("step", "epoch") and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.tb.add_scalar(f"{entry['kind']}/{key}", value, entry["step"])

    def close(self) -> None:
        self.handle.close()
        if self.tb is not None:
            self.tb.close()

    def __enter__(self) -> "MetricsLog":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _flatten(entry: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in entry.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _tensorboard(folder: Path, purge_step: int | None):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # pragma: no cover - tensorboard is a dependency
        return None
    return SummaryWriter(str(folder), purge_step=purge_step or None)


def _progress(iterable: Any, enabled: bool, desc: str) -> Any:
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, leave=False, dynamic_ncols=True)


def read_metrics_log(run_dir: str | Path) -> list[dict[str, Any]]:
    """A run's metrics.jsonl lines (a torn last line, from a killed run, is skipped)."""
    return read_json_lines(Path(run_dir) / "metrics.jsonl")
