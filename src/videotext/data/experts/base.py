"""What every feature expert is: a name, a dimension, a time step and a compute rule.

An expert turns one kind of input into features [T, D] with timestamps [T] (seconds,
the start of each step):

- `FrameExpert`: decoded frames. It names the frame times each step needs
  (`frame_times`) and the decode size (`frame_size`); the extraction driver decodes
  every video once for all frame experts (the union of their times) and hands each
  its frames. `prepare` runs in decoding workers (numpy / OpenCV work); `finish_batch`
  runs in the main process over several videos at once (where a CNN batches well).
- `AudioExpert`: the mono waveform at `sample_rate`.
- `SpeechExpert`: a video's timed narration (`Video.speech`).

Steps: an expert with rate r (steps per second) describes a video of duration d with
ceil(d r) steps starting at k / r. When the input is absent (no audio track, no
speech), `missing` is set on the stored entry (see `videotext.data.features`).

Running experts on a video is the extraction driver's business, not the expert's:
`videotext.data.experts.decode.extract_one` (one video, in this process) and
`videotext.data.experts.extract.extract_features` (many videos into a store).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np

from videotext.data.schema import Segment
from videotext.data.video import step_starts


@dataclass
class ExpertOutput:
    """One video's features from one expert."""

    features: np.ndarray  # [T, D] float32
    timestamps: np.ndarray  # [T] seconds, step starts
    step: float  # seconds per step (0 = irregular)
    missing: bool = False


class Expert(ABC):
    """Base class of all experts; subclasses set `name`, `kind` and `dim`."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""  # "frames" | "audio" | "speech"
    version: ClassVar[str] = "1"  # bump when the features change for the same settings
    dim: int = 0
    rate: float | None = None  # steps per second; None for irregular experts
    store_float32: ClassVar[bool] = False  # stored as float32 even when the store's default is float16

    @property
    def step(self) -> float:
        return 1.0 / self.rate if self.rate else 0.0

    def settings(self) -> dict[str, Any]:
        """The options that change the features (stored with them)."""
        return {}

    def config(self) -> dict[str, Any]:
        """Everything that identifies these features: stored in the HDF5 attrs."""
        return {"expert": self.name, "version": self.version, "dim": self.dim, "rate": self.rate, **self.settings()}

    def steps(self, duration: float) -> np.ndarray:
        """Start times of this expert's steps over a video of `duration` seconds [T]."""
        if not self.rate:
            raise ValueError(f"expert {self.name!r} has no fixed rate")
        return step_starts(duration, self.rate)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.config().items() if k != 'expert')})"


class FrameExpert(Expert):
    """An expert computed from decoded RGB frames."""

    kind = "frames"
    frame_size: int | None = 224  # shorter side the frames are decoded at; None: their native size

    @abstractmethod
    def frame_times(self, starts: np.ndarray) -> np.ndarray:
        """Times (seconds) of the frames the steps starting at `starts` need [N]."""

    @abstractmethod
    def prepare(self, frames: np.ndarray, shown: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Worker-side work on frames [N, H, W, 3] (shown: their times [N]) for steps `starts`.

        Returns an array whose first axis is the steps (or the frames, for experts that
        finish in the main process); results of consecutive windows are concatenated.
        """

    def finish_batch(self, prepared: list[np.ndarray]) -> list[np.ndarray]:
        """Main-process work over several videos; the default returns `prepared` as is."""
        return prepared


class AudioExpert(Expert):
    """An expert computed from the mono waveform."""

    kind = "audio"
    sample_rate: int = 16000

    @abstractmethod
    def prepare_audio(self, waveform: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Features [T, D] of the steps starting at `starts` from a waveform [S]."""


class SpeechExpert(Expert):
    """An expert computed from timed text: what is said (`Video.speech`, transcripts) or, where `reads`
    is "onscreen", the text read on screen."""

    kind = "speech"
    reads: ClassVar[str] = "speech"  # "speech" | "onscreen"

    @abstractmethod
    def prepare_speech(self, speech: Sequence[Segment]) -> tuple[np.ndarray, np.ndarray]:
        """(features [T, D], timestamps [T]) from speech segments (T may be 0)."""
