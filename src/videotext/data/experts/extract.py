"""Run feature experts over many videos into a FeatureStore: batched, parallel, resumable.

`extract_features(source, experts, out_dir, settings)` accepts a manifest JSON, a
`VideoTextDataset`, or any folder of video files (searched recursively; key = path
relative to the folder without extension), so features can be made for new videos,
not only for the datasets a paper's authors pre-extracted. `settings` is an
`ExtractionSettings` (`videotext.data.experts.settings`).

The run is a pipeline of steps, each usable alone:

1. `plan_extraction`: which experts each video still needs, from the keys the store
   already holds (sharded by rank under torchrun), without decoding anything;
2. `open_store`: each expert's crash-safe `FeatureWriter` (parts a killed run left are
   merged first) and the chunk stage of long videos (`videotext.data.experts.chunks`);
3. `run_extraction`: worker processes (`workers` of them, through a torch DataLoader)
   decode each video once and prepare every expert on it (`videotext.data.experts.decode`);
   the main process batches frames of several videos for experts with a network
   (`finish_batch`: appearance; with `networks_in_workers` each worker does this for its
   own few videos instead) and hands every result to that expert's writer: videos already
   stored are not redone, and a killed run loses at most the last `flush_every` videos
   per expert;
4. the writers' commit (under torchrun: every rank flushes its parts, rank 0 merges them,
   `merge_ranks`).

A video longer than `chunk_seconds` streams through in chunks of that many seconds: the
worker decodes and prepares one chunk (in `window`-second pieces, audio included), the
main process embeds it and writes each expert's rows to a chunk file (`<out_dir>/.chunks/`,
temp + rename), and once the last chunk is written the chunk files become the video's
entry, read back one at a time. Memory stays that of one chunk however long the video, and
a run killed in the middle of a long video resumes at its first unfinished chunk.

A broken video is skipped and recorded in `out_dir/failures.jsonl` (one line per
video and distinct error, naming its experts), and the run goes on (a long video that
fails part-way keeps its finished chunks, which the next run does not redo); the next run
retries it, and its record replaces the earlier one (or removes it if the video now
works), so the file names each broken video once.
"""
from __future__ import annotations

import dataclasses
import inspect
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from videotext import distributed as dist
from videotext.data.experts.base import Expert, FrameExpert
from videotext.data.experts.chunks import ChunkStage
from videotext.data.experts.decode import Decoded, Item, decode_chunks, finish_networks
from videotext.data.experts.registry import expert_class, get_expert
from videotext.data.experts.settings import ExtractionSettings, settings_of
from videotext.data.features import FeatureStore, FeatureWriter
from videotext.data.media_files import find_videos
from videotext.data.ocr.reader import ONSCREEN, read_onscreen
from videotext.data.schema import VideoTextDataset
from videotext.data.speech.transcripts import TranscriptStore, transcribe
from videotext.errors import DataFormatError, VideoTextError
from videotext.io import FailureLog
from videotext.runtime import keeps_threads, physical_cores, retain_freed_memory, set_threads


# ------------------------------------------------------------------------------------
# sources
# ------------------------------------------------------------------------------------


def resolve_source(source: Any) -> list[Item]:
    """Items of a manifest path, a `VideoTextDataset`, a folder, a video file or a list of files."""
    if isinstance(source, VideoTextDataset):
        return [Item(v.key, source.media_path(v), list(v.speech)) for v in source]
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            return [Item(key, file) for key, file in find_videos(path).items()]
        if path.suffix.lower() == ".json":
            return resolve_source(VideoTextDataset.load(path))
        if path.is_file():
            return [Item(path.stem, path)]
        raise DataFormatError(path, None, "source not found: expected a manifest, a folder of videos or a video file")
    if isinstance(source, Iterable):
        return [Item(Path(p).stem, Path(p)) for p in source]
    raise TypeError(f"cannot extract features from {type(source).__name__}")


# ------------------------------------------------------------------------------------
# the driver
# ------------------------------------------------------------------------------------


class _ItemStream(IterableDataset):
    """Decoded videos (and long videos' chunks) for torch's DataLoader: worker w of W takes
    videos w::W and yields each as it is decoded (`decode_chunks`)."""

    def __init__(self, items: list[Item], experts: dict[str, Expert], window: float | None,
                 chunk_seconds: float | None, chunk_root: Path | None):
        self.items, self.experts, self.window = items, experts, window
        self.chunk_seconds, self.chunk_root = chunk_seconds, chunk_root

    def __iter__(self) -> Iterator[Decoded]:
        worker = get_worker_info()
        items = self.items if worker is None else self.items[worker.id :: worker.num_workers]
        for item in items:
            yield from decode_chunks(item, self.experts, self.window, self.chunk_seconds, self.chunk_root)


def _identity(batch: Any) -> Any:
    return batch


class _FinishInWorker:
    """collate_fn that runs the networks (`finish_networks`) inside the worker on its few videos:
    with `networks_in_workers`, each worker decodes and embeds, and the main process only stores."""

    def __init__(self, experts: dict[str, Expert]):
        self.experts = experts

    def __call__(self, batch: list[Decoded]) -> list[Decoded]:
        finish_networks(batch, self.experts)
        return batch


# videos a worker embeds together when the networks run in the workers: at one step per second
# and 6 s videos (the demo) that is 24 frames per forward pass, near the fastest batch at 128 px
WORKER_VIDEOS_PER_BATCH = 4


def _init_worker(_: int) -> None:
    import torch

    torch.set_num_threads(1)
    retain_freed_memory()  # a worker that runs a network allocates the same activations every batch
    try:
        import cv2

        cv2.setNumThreads(1)
    except ImportError:  # pragma: no cover
        pass
    try:  # numpy's BLAS too (the audio expert's mel product): its own threads would only contend with the other workers
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:  # pragma: no cover
        pass


def build_experts(names: Sequence[str], *, rate: float | None = None, batch_size: int | None = None,
                  device: str | None = None, options: dict[str, dict[str, Any]] | None = None,
                  precision: str | None = None) -> dict[str, Expert]:
    """Experts by name; `rate`, `batch_size`, `device`, `precision` go to every expert that takes them."""
    built: dict[str, Expert] = {}
    for name in names:
        if isinstance(name, Expert):
            built[name.name] = name
            continue
        cls = expert_class(name)
        accepted = inspect.signature(cls).parameters
        kwargs = dict((options or {}).get(name, {}))
        unknown = sorted(set(kwargs) - set(accepted))
        if unknown:
            raise VideoTextError(f"expert {name!r}: unknown option(s) {unknown}; it takes {sorted(accepted)}")
        for key, value in (("rate", rate), ("batch_size", batch_size), ("device", device), ("precision", precision)):
            if value is not None and key in accepted:
                kwargs.setdefault(key, value)
        built[name] = get_expert(name, **kwargs)
    return built


# ------------------------------------------------------------------------------------
# the pipeline: plan → open the store → extract → close (one process, or torchrun ranks)
# ------------------------------------------------------------------------------------


@dataclass
class ExtractionPlan:
    """What one process extracts: its share of the source's videos and, per video, the
    experts not in the store yet. Made by `plan_extraction` without decoding anything."""

    items: list[Item]  # this process's videos (every world-th one from rank when sharded)
    todo: list[Item]  # the videos with experts left to extract (`Item.experts`: those experts)
    stored: list[tuple[str, str]]  # (expert, key) already stored: nothing to do (staged chunks go)

    def skipped(self, expert: str) -> int:
        """How many of this process's videos already have `expert` stored."""
        return sum(name == expert for name, _ in self.stored)


def plan_extraction(items: Sequence[Item], experts: Sequence[str], done: dict[str, set[str]],
                    shard: tuple[int, int] | None = None) -> ExtractionPlan:
    """Which experts each video still needs, given the keys each expert's store holds
    (`done`, e.g. `FeatureWriter.done_keys()`); `shard=(rank, world)` keeps videos rank::world."""
    mine = list(items) if shard is None else list(items)[shard[0] :: shard[1]]
    todo, stored = [], []
    for item in mine:
        wanted = [name for name in experts if item.key not in done[name]]
        stored += [(name, item.key) for name in experts if item.key in done[name]]
        if wanted:
            todo.append(dataclasses.replace(item, experts=wanted))
    return ExtractionPlan(mine, todo, stored)


def open_writers(store: FeatureStore, built: dict[str, Expert], settings: ExtractionSettings,
                 fresh: bool) -> dict[str, FeatureWriter]:
    """One crash-safe writer per expert (`fresh`: the expert's file and parts are cleared)."""
    return {name: store.writer(name, e.dim, e.config(), dtype="float32" if e.store_float32 else settings.dtype,
                               flush_every=settings.flush_every, overwrite=fresh)
            for name, e in built.items()}


def open_store(out_dir: str | os.PathLike, built: dict[str, Expert],
               settings: ExtractionSettings) -> tuple[FeatureStore, dict[str, FeatureWriter], ChunkStage]:
    """The store, its writers (parts a killed run left are merged first) and the chunk stage
    (cleared of chunks made with other settings)."""
    store = FeatureStore(out_dir)
    writers = open_writers(store, built, settings, settings.overwrite)
    for writer in writers.values():
        writer.commit()  # fold in parts a killed run left behind
    stage = ChunkStage(Path(out_dir) / ".chunks", {n: w.config for n, w in writers.items()}, settings.overwrite)
    return store, writers, stage


def _new_counts(built: dict[str, Expert], plan: ExtractionPlan) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(totals, per-expert stats) of a run before anything is extracted."""
    stats = {name: {"done": 0, "skipped": plan.skipped(name), "failed": 0, "missing": 0, "seconds": 0.0}
             for name in built}
    totals = {"videos": len(plan.items), "done": 0, "skipped": len(plan.items) - len(plan.todo), "failed": 0,
              "decode_seconds": 0.0, "chunks_extracted": 0, "chunks_reused": 0}
    return totals, stats


@dataclass
class _Sink:
    """Where decoded videos go: each expert's writer, the chunk stage, the failure log, the counts."""

    writers: dict[str, FeatureWriter]
    log: FailureLog
    stage: ChunkStage
    stats: dict[str, dict[str, Any]]
    totals: dict[str, Any]

    def __call__(self, decoded: Decoded) -> None:
        _store(decoded, self.writers, self.log, self.stats, self.totals, self.stage)


def run_extraction(todo: list[Item], built: dict[str, Expert], settings: ExtractionSettings, chunk_root: Path,
                   sink: _Sink) -> None:
    """Extract the planned videos: workers decode (and prepare) them, the networks run batched
    over several videos (in the workers with `networks_in_workers`), `sink` stores each result."""
    in_workers = settings.in_workers
    networked = [] if in_workers else [n for n, e in built.items() if isinstance(e, FrameExpert)
                                       and type(e).finish_batch is not FrameExpert.finish_batch]
    pending: list[Decoded] = []

    def drain() -> None:
        batch = pending[:]  # taken first: an interrupted batch is dropped, never half-stored twice
        pending.clear()
        if not in_workers:  # else the workers ran the networks already
            finish_networks(batch, built)
        for decoded in batch:
            sink(decoded)

    bar = _progress(len(todo), settings.progress and bool(todo))
    try:
        if not todo:
            return
        workers = settings.workers
        per_batch = WORKER_VIDEOS_PER_BATCH if in_workers else 1  # videos per item the loader yields
        loader = DataLoader(
            _ItemStream(todo, built, settings.window, settings.chunk_seconds, chunk_root),
            batch_size=per_batch if in_workers else None,
            shuffle=False, num_workers=workers, collate_fn=_FinishInWorker(built) if in_workers else _identity,
            worker_init_fn=_init_worker if workers else None,
            prefetch_factor=max(1, settings.prefetch // per_batch) if workers else None,
            multiprocessing_context=settings.start_method if workers else None,
        )
        for received in loader:
            for decoded in received if in_workers else [received]:
                pending.append(decoded)
                frames = sum(len(d.outputs[n].features) for d in pending for n in networked if n in d.outputs)
                if not networked or frames >= settings.batch_size or len(pending) >= 64 or decoded.final:
                    drain()
                if decoded.chunk is None:  # a whole video (a long one's final message)
                    bar.update(1)
                bar.set_postfix(failed=sink.totals["failed"], refresh=False)
        drain()
    finally:
        bar.close()


def _summary(totals: dict[str, Any], stats: dict[str, dict[str, Any]], started: float, store: FeatureStore,
             log: FailureLog) -> dict[str, Any]:
    wall = time.time() - started
    for entry in stats.values():
        entry["videos_per_s"] = entry["done"] / entry["seconds"] if entry["seconds"] > 0 else None
    return {
        **totals, "seconds": wall, "videos_per_s": totals["done"] / wall if wall > 0 else None,
        "experts": stats, "store": str(store.root), "failures": str(log.path),
    }


def _prepare(experts: Sequence[str | Expert], settings: ExtractionSettings, out_dir: str | os.PathLike
             ) -> tuple[dict[str, Expert], FailureLog]:
    """Threads for the networks, the experts and the failure log."""
    # the decoding workers take a core each: the networks get the rest (with 2 cores and 2 workers,
    # 1 thread ran the demo's extraction 7-10 % faster than 2, whose OpenMP threads spun while
    # the workers held the cores: twice the CPU time for the same frames)
    set_threads(settings.threads or max(1, physical_cores() - settings.workers))
    retain_freed_memory()
    built = build_experts(experts, rate=settings.rate, batch_size=settings.batch_size, device=settings.device,
                          options=settings.options, precision=settings.precision)
    failures = settings.failures
    log = failures if isinstance(failures, FailureLog) else FailureLog(failures or Path(out_dir) / "failures.jsonl")
    return built, log


@keeps_threads
def extract_features(source: Any, experts: Sequence[str | Expert], out_dir: str | os.PathLike,
                     settings: ExtractionSettings | None = None, **values: Any) -> dict[str, Any]:
    """Extract `experts` for every video of `source` into the FeatureStore at `out_dir`.

    `settings` (`ExtractionSettings`; keyword `values` of its fields override it, e.g.
    `rate=2.0, workers=2`) says how:

    `source`: a manifest JSON path, a `VideoTextDataset`, a folder of videos
    (recursive; mp4/avi/mkv/webm/mov/…) or a list of files. `rate`: steps per second
    for every expert with a rate (default each expert's own, 1 s); `batch_size`:
    frames per network forward pass; `workers`: decoding processes (0 = in this
    process); `options`: per-expert keyword arguments, e.g. {"appearance":
    {"input_size": 96}}. Resumable; broken videos go to `failures` (default
    `out_dir/failures.jsonl`). Returns a summary: counts, seconds and videos/s overall
    and per expert. Workers start with `start_method` ("forkserver" by default:
    forking a process that already runs torch/OpenCV/FFmpeg threads can deadlock), so
    a script calling this with `workers > 0` needs an `if __name__ == "__main__":` guard.
    `shard=(rank, world_size)` processes every world_size-th video from `rank`; ranks
    may share `out_dir` (each writes its own parts; merges take a file lock).
    `precision` (auto | fp32 | bf16) is the networks' inference precision and `threads`
    the main process's torch threads (0 = the physical cores not taken by `workers`, at
    least 1), see `videotext.runtime`.
    `prefetch`: videos each worker may decode ahead while the main process runs the
    networks (torch's prefetch_factor; 2 left the workers idle during each forward pass).
    `networks_in_workers` (CPU, `workers > 0`): each worker also runs the networks (one
    thread each) on `WORKER_VIDEOS_PER_BATCH` videos at a time, so decoding and inference
    share every core instead of one process's network waiting on the others' decoding.
    `chunk_seconds` (None: off): a longer video is extracted and staged that many seconds
    at a time (see the module docstring), so its memory is that of one chunk and a killed
    run resumes at its first unfinished chunk; the summary counts `chunks_extracted` and
    `chunks_reused` (found done, not decoded again).

    Under `torchrun` (WORLD_SIZE > 1, `shard` not given) the ranks split the videos
    (rank r takes videos r::R), each writes its own part files, and rank 0 merges them
    after a barrier; every rank returns the summed summary once the store is merged. A
    rank that crashed is redone alone on restart: finished parts count as done.
    """
    settings = settings_of(settings, values)
    if settings.shard is None and dist.env_world_size() > 1:
        return _extract_by_rank(source, experts, out_dir, settings)
    started = time.time()
    built, log = _prepare(experts, settings, out_dir)
    store, writers, stage = open_store(out_dir, built, settings)
    plan = plan_extraction(resolve_source(source), list(built), {n: w.done_keys() for n, w in writers.items()},
                           settings.shard)
    for name, key in plan.stored:
        stage.remove(name, key)  # a long video stored before its chunks were removed
    plan.todo[:] = with_transcripts(plan.todo, built, out_dir, settings, log)
    totals, stats = _new_counts(built, plan)
    try:
        run_extraction(plan.todo, built, settings, stage.root, _Sink(writers, log, stage, stats, totals))
    finally:  # whatever happened, what was stored so far becomes part of the store
        for writer in writers.values():
            writer.commit()
        log.compact()  # each broken video once: latest error wins
    return _summary(totals, stats, started, store, log)


def _extract_by_rank(source: Any, experts: Sequence[str | Expert], out_dir: str | os.PathLike,
                     settings: ExtractionSettings) -> dict[str, Any]:
    """`extract_features` under torchrun: the same steps, with rank 0 preparing the store,
    every rank extracting its shard (r::R) into part files, and rank 0 merging them."""
    started = time.time()
    # join the group (a long timeout: ranks finish their shards at different times)
    rank_device = dist.init_distributed(settings.device, timeout_minutes=24 * 60)
    device = str(rank_device) if rank_device is not None and settings.device.startswith("cuda") else settings.device
    settings = settings.replace(device=device, shard=(dist.rank(), dist.world()))
    built, log = _prepare(experts, settings, out_dir)
    if dist.is_main():
        open_store(out_dir, built, settings)  # clears (overwrite) or merges the store and stale chunks
    dist.barrier()
    store = FeatureStore(out_dir)
    writers = open_writers(store, built, settings, False)
    stage = ChunkStage(Path(out_dir) / ".chunks", {n: w.config for n, w in writers.items()}, False, clear=False)
    plan = plan_extraction(resolve_source(source), list(built), {n: w.done_keys() for n, w in writers.items()},
                           settings.shard)
    for name, key in plan.stored:
        stage.remove(name, key)
    plan.todo[:] = with_transcripts(plan.todo, built, out_dir, settings, log)
    totals, stats = _new_counts(built, plan)
    try:
        run_extraction(plan.todo, built, settings, stage.root, _Sink(writers, log, stage, stats, totals))
    finally:
        for writer in writers.values():
            writer.flush()
        log.compact()
    merge_ranks(store, writers)
    totals, stats = _sum_over_ranks(totals, stats)
    return _summary(totals, stats, started, store, log)


def with_transcripts(todo: list[Item], built: dict[str, Expert], out_dir: str | os.PathLike,
                     settings: ExtractionSettings, log: FailureLog) -> list[Item]:
    """The planned videos, those without speech that a transcript-reading expert (`speech`) still
    needs given their transcripts (`videotext.data.speech.transcripts`, kept in `out_dir`), and those
    an on-screen-text expert (`ocr`) needs given the text read on screen (`videotext.data.ocr.reader`,
    kept in `out_dir` as onscreen.jsonl)."""
    todo = _with_onscreen(todo, built, out_dir, settings, log)
    reader = next((e for name, e in built.items() if getattr(e, "transcribes", False)), None)
    if reader is None:
        return todo
    wanted = [item for item in todo if reader.name in item.experts and not item.speech and item.path is not None]
    if not wanted:
        return todo
    transcribe([(item.key, item.path) for item in wanted], out_dir, reader.engine, reader.model,
               recognize=reader.recognize, progress=settings.progress, failures=log, threads=settings.threads)
    store = TranscriptStore(out_dir)
    out = []
    for item in todo:
        transcript = store.get(item.key) if item in wanted else None
        out.append(dataclasses.replace(item, speech=transcript.segments()) if transcript else item)
    return out


def _with_onscreen(todo: list[Item], built: dict[str, Expert], out_dir: str | os.PathLike,
                   settings: ExtractionSettings, log: FailureLog) -> list[Item]:
    reader = next((e for e in built.values() if getattr(e, "reads", "") == "onscreen"), None)
    wanted = [item for item in todo if reader is not None and reader.name in item.experts and item.path is not None]
    if not wanted:
        return todo
    read_onscreen([(item.key, item.path) for item in wanted], out_dir, reader.engine, progress=settings.progress,
                  failures=log, threads=max(1, settings.threads or 1))
    store = TranscriptStore(out_dir, ONSCREEN)
    out = []
    for item in todo:
        text = store.get(item.key) if item in wanted else None
        out.append(dataclasses.replace(item, onscreen=text.segments()) if text else item)
    return out


def merge_ranks(store: FeatureStore, writers: dict[str, FeatureWriter]) -> None:
    """Once every rank's parts are written, rank 0 merges them; then every rank sees the store."""
    dist.barrier()
    if dist.is_main():
        for writer in writers.values():
            writer.commit()
    dist.barrier()
    store.close()


def _sum_over_ranks(totals: dict[str, Any], stats: dict[str, dict[str, Any]]) -> tuple[dict, dict]:
    """Add up the counts of every rank (torchrun extraction)."""
    gathered = dist.all_gather_object((totals, stats))
    add = lambda dicts: {k: sum(d[k] for d in dicts) for k in dicts[0]}  # noqa: E731
    return add([t for t, _ in gathered]), {name: add([s[name] for _, s in gathered]) for name in stats}


def _store(decoded: Decoded, writers: dict[str, FeatureWriter], log: FailureLog,
           stats: dict[str, dict[str, Any]], totals: dict[str, Any], stage: ChunkStage | None = None) -> None:
    totals["decode_seconds"] += decoded.decode_seconds
    if decoded.chunk is not None:
        _store_chunk(decoded, log, stats, totals, stage)
        return
    failed = False
    if decoded.final:
        failed = _assemble(decoded, writers, log, stats, totals, stage)
    by_message: dict[str, list[str]] = {}
    for name, message in decoded.errors.items():
        by_message.setdefault(message, []).append(name)
        stats[name]["failed"] += 1
        failed = True
    for message, names in by_message.items():  # one line per video and distinct error
        log.record(decoded.key, message, error_type=decoded.error_types.get(names[0]), experts=names,
                   path=decoded.path, stage="extract")
    for name, output in decoded.outputs.items():
        if name in decoded.errors:
            continue
        try:
            writers[name].add(decoded.key, output.features, output.timestamps, step=output.step, missing=output.missing)
        except (DataFormatError, ValueError) as exc:
            log.record(decoded.key, exc, experts=[name], path=decoded.path, stage="store")
            stats[name]["failed"] += 1
            failed = True
            continue
        log.resolve(decoded.key, name)
        stats[name]["done"] += 1
        stats[name]["missing"] += int(output.missing)
        stats[name]["seconds"] += decoded.seconds.get(name, 0.0)
    totals["failed" if failed else "done"] += 1


def _store_chunk(decoded: Decoded, log: FailureLog, stats: dict[str, dict[str, Any]], totals: dict[str, Any],
                 stage: ChunkStage) -> None:
    """Stage one chunk of a long video; its errors get the video's failure line(s)."""
    by_message: dict[str, list[str]] = {}
    for name, message in decoded.errors.items():
        by_message.setdefault(message, []).append(name)
    for message, names in by_message.items():
        log.record(decoded.key, message, error_type=decoded.error_types.get(names[0]), experts=names,
                   path=decoded.path, stage="extract", chunk=decoded.chunk, chunks=decoded.chunks)
    assert decoded.chunk is not None
    for name, output in decoded.outputs.items():
        if name not in decoded.errors:
            stage.save(name, decoded.key, decoded.chunk, decoded.chunks, output)
            stats[name]["seconds"] += decoded.seconds.get(name, 0.0)
    totals["chunks_extracted"] += 1


def _assemble(decoded: Decoded, writers: dict[str, FeatureWriter], log: FailureLog,
              stats: dict[str, dict[str, Any]], totals: dict[str, Any], stage: ChunkStage) -> bool:
    """A long video's final message: each expert whose chunks are all staged becomes one
    store entry (a part file of its own, streamed from the chunk files); True if any failed."""
    failed = False
    totals["chunks_reused"] += decoded.reused_chunks
    for name in decoded.chunked:
        if name in decoded.failed or not stage.complete(name, decoded.key, decoded.chunks):
            stats[name]["failed"] += 1  # its failure line came with the chunk that failed
            failed = True
            continue
        step, missing = stage.flags(name, decoded.key, decoded.chunks)
        try:
            writers[name].add_pieces(decoded.key, lambda: stage.pieces(name, decoded.key, decoded.chunks),
                                     step=step, missing=missing)
        except (DataFormatError, ValueError) as exc:
            log.record(decoded.key, exc, experts=[name], path=decoded.path, stage="store")
            stats[name]["failed"] += 1
            failed = True
            continue
        stage.remove(name, decoded.key)
        log.resolve(decoded.key, name)
        stats[name]["done"] += 1
        stats[name]["missing"] += int(missing)
    return failed


def _progress(total: int, enabled: bool):
    try:
        from tqdm.auto import tqdm

        return tqdm(total=total, disable=not enabled, unit="video", desc="extract", dynamic_ncols=True)
    except ImportError:  # pragma: no cover
        class _Null:
            def update(self, *_: Any) -> None: ...
            def set_postfix(self, *_: Any, **__: Any) -> None: ...
            def close(self) -> None: ...

        return _Null()
