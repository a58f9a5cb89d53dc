"""Run feature experts over many videos into a FeatureStore: batched, parallel, resumable.

`extract_features(source, experts, out_dir)` accepts a manifest JSON, a
`VideoTextDataset`, or any folder of video files (searched recursively; key = path
relative to the folder without extension), so features can be made for new videos,
not only for the datasets a paper's authors pre-extracted.

How one video flows:

1. a worker process (`workers` of them, through a torch DataLoader) probes the file
   and, window by window (`window` seconds, so long videos never sit in memory
   whole), decodes the union of all frame experts' sample times ONCE at the largest
   size any of them needs, then runs each expert's worker-side `prepare` (motion
   flow, crops); audio is decoded once per sample rate; speech needs no decoding;
2. the main process batches frames of several videos for experts with a network
   (`finish_batch`: appearance; with `networks_in_workers` each worker does this for its
   own few videos instead) and hands every result to that expert's
   `FeatureWriter`, which makes the store crash-safe and the run resumable: videos
   already stored (merged or in a finished part) are not redone, and a killed run
   loses at most the last `flush_every` videos per expert.

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
import math
import os
import shutil
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from videotext import distributed as dist

from videotext.data.experts import get_expert
from videotext.data.experts.base import AudioExpert, Expert, ExpertOutput, FrameExpert, SpeechExpert
from videotext.data.experts.settings import ExtractionSettings, settings_of
from videotext.data.features import FeatureStore, FeatureWriter, encode_key
from videotext.data.media_files import find_videos
from videotext.data.schema import Segment, VideoTextDataset
from videotext.data.video import VideoInfo, probe, read_audio, read_frames
from videotext.errors import DataFormatError, VideoDecodeError, VideoTextError
from videotext.io import FailureLog, atomic_path
from videotext.runtime import keeps_threads, physical_cores, retain_freed_memory, set_threads

_NEEDS_MEDIA = ("frames", "audio")
NATIVE_WINDOW = 10.0  # seconds of frames decoded at once for native-size experts (clip: 10 frames)


@dataclass
class Item:
    """One video to process: its store key, media file, narration and pending experts."""

    key: str
    path: Path | None
    speech: list[Segment] = field(default_factory=list)
    experts: list[str] = field(default_factory=list)


@dataclass
class Decoded:
    """What a worker returns for one video."""

    key: str
    outputs: dict[str, ExpertOutput] = field(default_factory=dict)  # features may be "prepared" only
    errors: dict[str, str] = field(default_factory=dict)  # expert → message
    error_types: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # expert → compute seconds
    decode_seconds: float = 0.0
    path: str | None = None
    chunk: int | None = None  # a long video's chunk: its index (outputs are that stretch's rows)
    chunks: int = 0  # how many chunks the video has (0: not chunked)
    final: bool = False  # a long video's last message: every chunk was sent, assemble them
    chunked: list[str] = field(default_factory=list)  # final: the experts whose chunks to assemble
    failed: list[str] = field(default_factory=list)  # final: experts that failed in some chunk
    reused_chunks: int = 0  # final: chunks found already done (not decoded again)


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
# the worker side: decode once, prepare every expert
# ------------------------------------------------------------------------------------


def _window_edges(duration: float, window: float | None) -> list[tuple[float, float]]:
    if not window or duration <= window:
        return [(-np.inf, np.inf)]
    count = int(np.ceil(duration / window))
    return [(-np.inf if i == 0 else i * window, np.inf if i == count - 1 else (i + 1) * window) for i in range(count)]


def _span_edges(span: tuple[float, float], window: float | None, duration: float) -> list[tuple[float, float]]:
    """`window`-second pieces of one chunk [low, high) (high is infinite for the last chunk)."""
    low, high = span
    end = min(high, duration)
    if not window or end - low <= window:
        return [span]
    count = math.ceil((end - low) / window - 1e-9)
    return [(low + i * window, high if i == count - 1 else low + (i + 1) * window) for i in range(count)]


def _in_span(starts: np.ndarray, span: tuple[float, float] | None) -> np.ndarray:
    return starts if span is None else starts[(starts >= span[0]) & (starts < span[1])]


def _run_frame_experts(item: Item, experts: list[FrameExpert], duration: float, window: float | None,
                       result: Decoded, span: tuple[float, float] | None = None) -> None:
    native = [e for e in experts if e.frame_size is None]  # experts that resize frames themselves (clip)
    if native and len(native) < len(experts):  # they decode on their own: native pixels, never pre-scaled
        _run_frame_experts(item, native, duration, window, result, span)
        _run_frame_experts(item, [e for e in experts if e.frame_size is not None], duration, window, result, span)
        return
    if native and (not window or window > NATIVE_WINDOW):  # native frames are large (4K: 25 MB each)
        window = NATIVE_WINDOW
    starts = {e.name: _in_span(e.steps(duration), span) for e in experts}  # [T_e] each
    prepared: dict[str, list[np.ndarray]] = {e.name: [] for e in experts}
    size = None if native else max(e.frame_size for e in experts)
    edges = _window_edges(duration, window) if span is None else _span_edges(span, window, duration)
    for low, high in edges:
        wanted = {}
        for e in experts:
            chosen = starts[e.name][(starts[e.name] >= low) & (starts[e.name] < high)]
            wanted[e.name] = (chosen, e.frame_times(chosen))
        union = np.unique(np.round(np.concatenate([t for _, t in wanted.values()]), 9))  # [N]
        if union.size == 0:
            continue
        began = time.perf_counter()
        frames, shown = read_frames(item.path, union, size=size, return_times=True)  # [N, H, W, 3], [N]
        result.decode_seconds += time.perf_counter() - began
        for e in experts:
            chosen, times = wanted[e.name]
            if chosen.size == 0:
                continue
            index = np.searchsorted(union, np.round(times, 9))
            began = time.perf_counter()
            prepared[e.name].append(e.prepare(frames[index], shown[index], chosen))
            result.seconds[e.name] = result.seconds.get(e.name, 0.0) + time.perf_counter() - began
    for e in experts:
        values = np.concatenate(prepared[e.name]) if prepared[e.name] else np.zeros((0, e.dim), np.float32)
        result.outputs[e.name] = ExpertOutput(values, starts[e.name], e.step)


def _run_audio_chunk(item: Item, experts: list[AudioExpert], duration: float, has_audio: bool,
                     result: Decoded, span: tuple[float, float], window: float | None) -> None:
    """One chunk of a long video: each expert's steps in `span`, from the audio of one
    `window`-second piece at a time (read from the piece's first step, so steps line up)."""
    for e in experts:
        starts = _in_span(e.steps(duration), span)  # [T]
        parts = []
        for low, high in _span_edges(span, window, duration):
            chosen = starts[(starts >= low) & (starts < high)]
            if chosen.size == 0:
                continue
            # from one step earlier (a step's first analysis frames start before it; that extra
            # step's row is dropped) to a little past the last step (its last frames reach beyond)
            lead = 1 if chosen[0] - e.step >= -1e-9 else 0
            steps = np.concatenate([chosen[:1] - e.step, chosen]) if lead else chosen
            began = time.perf_counter()
            waveform = read_audio(item.path, e.sample_rate, max(0.0, float(steps[0])),
                                  float(chosen[-1]) + e.step + 0.05) if has_audio else np.zeros(0, np.float32)  # [S]
            result.decode_seconds += time.perf_counter() - began
            began = time.perf_counter()
            parts.append(e.prepare_audio(waveform, steps)[lead:])
            result.seconds[e.name] = result.seconds.get(e.name, 0.0) + time.perf_counter() - began
        features = np.concatenate(parts) if parts else np.zeros((0, e.dim), np.float32)
        result.outputs[e.name] = ExpertOutput(features, starts, e.step, missing=not has_audio)


def _run_audio_experts(item: Item, experts: list[AudioExpert], duration: float, has_audio: bool,
                       result: Decoded) -> None:
    for rate in sorted({e.sample_rate for e in experts}):
        began = time.perf_counter()
        waveform = read_audio(item.path, rate) if has_audio else np.zeros(0, np.float32)  # [S]
        result.decode_seconds += time.perf_counter() - began
        for e in (e for e in experts if e.sample_rate == rate):
            began = time.perf_counter()
            starts = e.steps(duration)
            missing = waveform.size == 0
            features = np.zeros((len(starts), e.dim), np.float32) if missing else e.prepare_audio(waveform, starts)
            result.outputs[e.name] = ExpertOutput(features, starts, e.step, missing)
            result.seconds[e.name] = result.seconds.get(e.name, 0.0) + time.perf_counter() - began


def _record(result: Decoded, names: Iterable[str], exc: BaseException) -> None:
    """Note a failure for these experts; unexpected errors keep where they happened."""
    if isinstance(exc, (VideoDecodeError, DataFormatError)):
        message = str(exc)
    else:
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
        message = f"{type(exc).__name__}: {exc}{where}"
    for name in names:
        result.errors[name] = message
        result.error_types[name] = type(exc).__name__


def decode_item(item: Item, experts: dict[str, Expert], window: float | None = 60.0, *,
                info: VideoInfo | None = None) -> Decoded:
    """Everything the workers do for one video; errors are captured per expert, never raised.
    `info`: the video's `probe`, when the caller has it already."""
    result = Decoded(item.key, path=None if item.path is None else str(item.path))
    chosen = [experts[name] for name in item.experts]
    frame_experts = [e for e in chosen if isinstance(e, FrameExpert)]
    audio_experts = [e for e in chosen if isinstance(e, AudioExpert)]
    media_experts = frame_experts + audio_experts
    if media_experts and info is None:
        try:
            if item.path is None:
                raise VideoDecodeError(item.key, "the video has no media file")
            began = time.perf_counter()
            info = probe(item.path)
            result.decode_seconds += time.perf_counter() - began
        except Exception as exc:  # noqa: BLE001 - recorded per expert
            _record(result, [e.name for e in media_experts], exc)
    if info is not None and frame_experts:
        try:
            _run_frame_experts(item, frame_experts, info.duration, window, result)
        except Exception as exc:  # noqa: BLE001
            _record(result, [e.name for e in frame_experts], exc)
    if info is not None and audio_experts:
        try:
            _run_audio_experts(item, audio_experts, info.duration, info.has_audio, result)
        except Exception as exc:  # noqa: BLE001
            _record(result, [e.name for e in audio_experts], exc)
    for e in chosen:
        if isinstance(e, SpeechExpert):
            try:
                began = time.perf_counter()
                features, stamps = e.prepare_speech(item.speech)
                result.outputs[e.name] = ExpertOutput(features, stamps, e.step, missing=len(features) == 0)
                result.seconds[e.name] = time.perf_counter() - began
            except Exception as exc:  # noqa: BLE001
                _record(result, [e.name], exc)
    return result


def _chunk_spans(duration: float, chunk_seconds: float) -> list[tuple[float, float]]:
    count = max(1, math.ceil(duration / chunk_seconds - 1e-9))
    return [(i * chunk_seconds, math.inf if i == count - 1 else (i + 1) * chunk_seconds) for i in range(count)]


def chunk_file(chunk_root: Path, expert: str, key: str, index: int, count: int) -> Path:
    """Where chunk `index` of `count` of one video's `expert` rows is staged."""
    return chunk_root / expert / encode_key(key) / f"chunk-{index:05d}-of-{count:05d}.npz"


def decode_chunks(item: Item, experts: dict[str, Expert], window: float | None, chunk_seconds: float | None,
                  chunk_root: Path | None) -> Iterator[Decoded]:
    """The worker side of one video: one `Decoded` for a video up to `chunk_seconds` long;
    for a longer one, a `Decoded` per chunk not yet staged under `chunk_root` (each holding
    that stretch's rows only), then a `final` one. An expert that fails in a chunk is not
    tried on the later chunks; the others go on, unless decoding failed (a cut or corrupt
    file), which ends the video for every expert with that one error."""
    chosen = [experts[name] for name in item.experts]
    media = [e for e in chosen if isinstance(e, (FrameExpert, AudioExpert))]
    if not chunk_seconds or chunk_root is None or not media or item.path is None:
        yield decode_item(item, experts, window)
        return
    began = time.perf_counter()
    try:
        info = probe(item.path)
    except Exception:  # noqa: BLE001 - decode_item records it the usual way
        yield decode_item(item, experts, window)
        return
    probed = time.perf_counter() - began
    if info.duration <= chunk_seconds:
        decoded = decode_item(item, experts, window, info=info)
        decoded.decode_seconds += probed
        yield decoded
        return
    spans = _chunk_spans(info.duration, chunk_seconds)
    failed: dict[str, None] = {}
    reused = 0
    for index, span in enumerate(spans):
        todo = [e for e in media if e.name not in failed
                and not chunk_file(chunk_root, e.name, item.key, index, len(spans)).is_file()]
        if not todo:
            reused += not any(e.name in failed for e in media)
            continue
        result = Decoded(item.key, path=str(item.path), chunk=index, chunks=len(spans), decode_seconds=probed)
        probed = 0.0
        frame_experts = [e for e in todo if isinstance(e, FrameExpert)]
        audio_experts = [e for e in todo if isinstance(e, AudioExpert)]
        if frame_experts:
            try:
                _run_frame_experts(item, frame_experts, info.duration, window, result, span)
            except Exception as exc:  # noqa: BLE001 - recorded per expert
                _record(result, [e.name for e in frame_experts], exc)
        if audio_experts:
            try:
                _run_audio_chunk(item, audio_experts, info.duration, info.has_audio, result, span, window)
            except Exception as exc:  # noqa: BLE001
                _record(result, [e.name for e in audio_experts], exc)
        broken = next((n for n, kind in result.error_types.items() if kind == "VideoDecodeError"), None)
        if broken is not None:  # the file itself is cut or corrupt here: the video stops, for every expert
            for e in todo:
                result.errors[e.name] = result.errors[broken]
                result.error_types[e.name] = "VideoDecodeError"
                result.outputs.pop(e.name, None)
            failed.update(dict.fromkeys(e.name for e in media))
        failed.update(dict.fromkeys(result.errors))
        yield result
    final = Decoded(item.key, path=str(item.path), chunks=len(spans), final=True, reused_chunks=reused,
                    chunked=[e.name for e in media], failed=list(failed))
    speech = Item(item.key, item.path, item.speech, [e.name for e in chosen if isinstance(e, SpeechExpert)])
    if speech.experts:
        spoken = decode_item(speech, experts, window)
        final.outputs, final.errors, final.error_types = spoken.outputs, spoken.errors, spoken.error_types
        final.seconds = spoken.seconds
    yield final


class _ChunkStage:
    """The main process's side of `<out_dir>/.chunks`: each expert's finished chunks of the
    long videos under way, written atomically, assembled into the store once complete."""

    def __init__(self, root: Path, configs: dict[str, str], overwrite: bool, clear: bool = True):
        self.root, self.configs = root, configs
        for expert, config in configs.items() if clear else ():  # chunks of other settings are of no use
            folder = root / expert
            marker = folder / "config.json"
            if folder.is_dir() and (overwrite or not marker.is_file() or marker.read_text() != config):
                shutil.rmtree(folder, ignore_errors=True)

    def save(self, expert: str, key: str, index: int, count: int, output: ExpertOutput) -> None:
        marker = self.root / expert / "config.json"
        if expert in self.configs and not marker.is_file():  # the settings these chunks were made with
            with atomic_path(marker) as tmp:
                tmp.write_text(self.configs[expert])
        with atomic_path(chunk_file(self.root, expert, key, index, count)) as tmp:
            with open(tmp, "wb") as handle:
                np.savez(handle, features=np.asarray(output.features, np.float32),
                         timestamps=np.asarray(output.timestamps, np.float64),
                         step=np.float64(output.step), missing=np.bool_(output.missing))

    def complete(self, expert: str, key: str, count: int) -> bool:
        return all(chunk_file(self.root, expert, key, i, count).is_file() for i in range(count))

    def pieces(self, expert: str, key: str, count: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for i in range(count):
            with np.load(chunk_file(self.root, expert, key, i, count)) as data:
                yield data["features"], data["timestamps"]

    def flags(self, expert: str, key: str, count: int) -> tuple[float, bool]:
        """(step, missing) of a staged video: missing only when every chunk is."""
        step, missing = 0.0, True
        for i in range(count):
            with np.load(chunk_file(self.root, expert, key, i, count)) as data:
                step, missing = float(data["step"]), missing and bool(data["missing"])
        return step, missing

    def remove(self, expert: str, key: str) -> None:
        shutil.rmtree(self.root / expert / encode_key(key), ignore_errors=True)


def _finish(decoded: list[Decoded], experts: dict[str, Expert]) -> None:
    """Main-process stage (network forward passes), batched over videos, in place."""
    for name, expert in experts.items():
        if not isinstance(expert, FrameExpert) or type(expert).finish_batch is FrameExpert.finish_batch:
            continue
        holders = [d for d in decoded if name in d.outputs and name not in d.errors]
        if not holders:
            continue
        began = time.perf_counter()
        try:
            finished = expert.finish_batch([d.outputs[name].features for d in holders])
        except Exception as exc:  # noqa: BLE001 - the batch fails for this expert only
            for d in holders:
                _record(d, [name], exc)
                d.outputs.pop(name, None)
            continue
        share = (time.perf_counter() - began) / len(holders)
        for d, features in zip(holders, finished):
            d.outputs[name].features = features
            d.seconds[name] = d.seconds.get(name, 0.0) + share


def extract_one(source: str | os.PathLike | None, experts: Sequence[Expert], *,
                speech: Sequence[Segment] | None = None, window: float | None = 60.0) -> dict[str, ExpertOutput]:
    """Run experts on one video file (None for speech-only experts); raises on failure."""
    item = Item("video", None if source is None else Path(source), list(speech or []), [e.name for e in experts])
    by_name = {e.name: e for e in experts}
    decoded = decode_item(item, by_name, window)
    _finish([decoded], by_name)
    if decoded.errors:
        name, message = next(iter(decoded.errors.items()))
        if decoded.error_types[name] == "VideoDecodeError":
            raise VideoDecodeError(source, message.removeprefix(f"{source}: "))
        raise RuntimeError(f"expert {name!r} failed on {source}: {message}")
    return decoded.outputs


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
    """collate_fn that runs the networks (`_finish`) inside the worker on its few videos:
    with `networks_in_workers`, each worker decodes and embeds, and the main process only stores."""

    def __init__(self, experts: dict[str, Expert]):
        self.experts = experts

    def __call__(self, batch: list[Decoded]) -> list[Decoded]:
        _finish(batch, self.experts)
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


def build_experts(names: Sequence[str], *, rate: float | None = None, batch_size: int | None = None,
                  device: str | None = None, options: dict[str, dict[str, Any]] | None = None,
                  precision: str | None = None) -> dict[str, Expert]:
    """Experts by name; `rate`, `batch_size`, `device`, `precision` go to every expert that takes them."""
    built: dict[str, Expert] = {}
    for name in names:
        if isinstance(name, Expert):
            built[name.name] = name
            continue
        from videotext.data.experts import expert_class

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
               settings: ExtractionSettings) -> tuple[FeatureStore, dict[str, FeatureWriter], _ChunkStage]:
    """The store, its writers (parts a killed run left are merged first) and the chunk stage
    (cleared of chunks made with other settings)."""
    store = FeatureStore(out_dir)
    writers = open_writers(store, built, settings, settings.overwrite)
    for writer in writers.values():
        writer.commit()  # fold in parts a killed run left behind
    stage = _ChunkStage(Path(out_dir) / ".chunks", {n: w.config for n, w in writers.items()}, settings.overwrite)
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
    stage: _ChunkStage
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
            _finish(batch, built)
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
    stage = _ChunkStage(Path(out_dir) / ".chunks", {n: w.config for n, w in writers.items()}, False, clear=False)
    plan = plan_extraction(resolve_source(source), list(built), {n: w.done_keys() for n, w in writers.items()},
                           settings.shard)
    for name, key in plan.stored:
        stage.remove(name, key)
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
           stats: dict[str, dict[str, Any]], totals: dict[str, Any], stage: _ChunkStage | None = None) -> None:
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
                 stage: _ChunkStage) -> None:
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
              stats: dict[str, dict[str, Any]], totals: dict[str, Any], stage: _ChunkStage) -> bool:
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
