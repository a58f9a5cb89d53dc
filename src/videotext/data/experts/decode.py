"""The worker side of extraction: decode a video once, prepare every expert on it.

`decode_item` probes a file and, window by window (`window` seconds, so long videos never
sit in memory whole), decodes the union of all frame experts' sample times ONCE at the
largest size any of them needs, then runs each expert's worker-side `prepare` (motion flow,
crops); audio is decoded once per sample rate; speech needs no decoding. `decode_chunks`
does the same for a long video one `chunk_seconds` stretch at a time, skipping the chunks
already staged (`videotext.data.experts.chunks`). `finish_networks` then runs the experts'
networks over several decoded videos at once. Errors are captured per expert, never raised.

`extract_one` does all of it for one video in this process and raises on failure;
`extract_expert` is one expert's output of one video.
"""
from __future__ import annotations

import math
import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from videotext.data.experts.base import AudioExpert, Expert, ExpertOutput, FrameExpert, SpeechExpert
from videotext.data.experts.chunks import chunk_file
from videotext.data.schema import Segment
from videotext.data.video import VideoInfo, probe, read_audio, read_frames
from videotext.errors import DataFormatError, VideoDecodeError

NATIVE_WINDOW = 10.0  # seconds of frames decoded at once for native-size experts (clip: 10 frames)


@dataclass
class Item:
    """One video to process: its store key, media file, narration and pending experts."""

    key: str
    path: Path | None
    speech: list[Segment] = field(default_factory=list)
    experts: list[str] = field(default_factory=list)
    onscreen: list[Segment] = field(default_factory=list)  # text read on screen (the `ocr` expert's input)


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
                features, stamps = e.prepare_speech(item.onscreen if e.reads == "onscreen" else item.speech)
                result.outputs[e.name] = ExpertOutput(features, stamps, e.step, missing=len(features) == 0)
                result.seconds[e.name] = time.perf_counter() - began
            except Exception as exc:  # noqa: BLE001
                _record(result, [e.name], exc)
    return result


def _chunk_spans(duration: float, chunk_seconds: float) -> list[tuple[float, float]]:
    count = max(1, math.ceil(duration / chunk_seconds - 1e-9))
    return [(i * chunk_seconds, math.inf if i == count - 1 else (i + 1) * chunk_seconds) for i in range(count)]


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
    speech = Item(item.key, item.path, item.speech, [e.name for e in chosen if isinstance(e, SpeechExpert)],
                  item.onscreen)
    if speech.experts:
        spoken = decode_item(speech, experts, window)
        final.outputs, final.errors, final.error_types = spoken.outputs, spoken.errors, spoken.error_types
        final.seconds = spoken.seconds
    yield final


def finish_networks(decoded: list[Decoded], experts: dict[str, Expert]) -> None:
    """The experts' network forward passes (`finish_batch`) over several decoded videos at once, in place
    (in the main process, or in a worker with `networks_in_workers`); a failed batch fails that expert only."""
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
    finish_networks([decoded], by_name)
    if decoded.errors:
        name, message = next(iter(decoded.errors.items()))
        if decoded.error_types[name] == "VideoDecodeError":
            raise VideoDecodeError(source, message.removeprefix(f"{source}: "))
        raise RuntimeError(f"expert {name!r} failed on {source}: {message}")
    return decoded.outputs


def extract_expert(expert: Expert, source: str | os.PathLike | None, *,
                   speech: Sequence[Segment] | None = None) -> ExpertOutput:
    """One expert's features [T, D] and timestamps [T] of one video file (None for speech-only
    experts), with its step and `missing` flag; raises on failure."""
    return extract_one(source, [expert], speech=speech)[expert.name]
