"""How an extraction runs: `ExtractionSettings`, one value instead of a score of keyword arguments.

`extract_features(source, experts, out_dir, settings)` reads every knob from it. The
`videotext extract` flags (`ExtractionSettings.from_cli`) and a run's `inference` config
section (`ExtractionSettings.from_config`) are turned into settings here and nowhere else.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from videotext.errors import VideoTextError


@dataclass(frozen=True)
class ExtractionSettings:
    """Every setting of `extract_features` (its docstring says what each one does)."""

    rate: float | None = None  # steps per second of every expert with a rate (None: each expert's own, 1 s)
    batch_size: int = 64  # frames per network forward pass
    workers: int = 0  # decoding processes (0: in this process)
    progress: bool = True  # a progress bar
    device: str = "cpu"  # torch device of the experts' networks
    failures: Any = None  # FailureLog or path; None: <out_dir>/failures.jsonl
    options: dict[str, dict[str, Any]] | None = None  # per-expert constructor options
    window: float | None = 60.0  # seconds of frames decoded at once
    dtype: str = "float16"  # stored feature dtype
    flush_every: int = 32  # videos per part file
    overwrite: bool = False  # start the store afresh
    start_method: str = "forkserver"  # how decoding workers start
    shard: tuple[int, int] | None = None  # (rank, world_size): every world_size-th video from rank
    precision: str = "auto"  # auto | fp32 | bf16: the networks' inference precision
    threads: int = 0  # the main process's torch threads (0: the cores the workers leave)
    prefetch: int = 4  # videos each worker may decode ahead
    networks_in_workers: bool = False  # CPU: each worker also runs the networks
    chunk_seconds: float | None = 300.0  # a longer video goes through in chunks this long (None: off)

    def __post_init__(self) -> None:
        if self.networks_in_workers and not str(self.device).startswith("cpu"):
            raise VideoTextError(f"networks_in_workers runs the networks on the CPU workers; "
                                 f"device is {self.device!r}")
        if self.chunk_seconds is not None and self.chunk_seconds <= 0:
            raise VideoTextError(f"chunk_seconds must be positive (or None for no chunks), got {self.chunk_seconds}")
        if self.shard is not None and not 0 <= self.shard[0] < self.shard[1]:
            raise ValueError(f"shard must be (rank, world_size) with 0 <= rank < world_size, got {self.shard}")

    @property
    def in_workers(self) -> bool:
        """True when the decoding workers run the networks too (`networks_in_workers` with workers)."""
        return self.networks_in_workers and self.workers > 0

    def replace(self, **changes: Any) -> "ExtractionSettings":
        """A copy with `changes` (checked like the constructor's arguments)."""
        return dataclasses.replace(self, **changes) if changes else self

    @classmethod
    def from_cli(cls, *, options: Mapping[str, Any] | None = None, chunk_seconds: float | None = 300.0,
                 **values: Any) -> "ExtractionSettings":
        """Settings from `videotext extract`'s flags: `options` is the parsed `--option
        EXPERT.KEY=VALUE` list ({"clip.model": "ViT-B-32"}), grouped here by expert;
        `--chunk-seconds 0` means whole videos; the other flags keep their names."""
        grouped: dict[str, dict[str, Any]] = {}
        for key, value in (options or {}).items():
            expert, dot, name = key.partition(".")
            if not dot or not name:
                raise VideoTextError(f"--option {key}: expected EXPERT.KEY=VALUE (e.g. clip.pretrained=openai)")
            grouped.setdefault(expert, {})[name] = value
        return cls(options=grouped, chunk_seconds=chunk_seconds or None, **values)

    @classmethod
    def from_config(cls, inference: Any, **values: Any) -> "ExtractionSettings":
        """Settings of a loaded run (`index build`, captioning new videos): its `inference`
        config section's `chunk_seconds` and `precision`, under `values` (which win)."""
        return cls(**{"chunk_seconds": inference.chunk_seconds, "precision": inference.precision, **values})


def settings_of(settings: ExtractionSettings | None, values: Mapping[str, Any]) -> ExtractionSettings:
    """`settings` (default: the defaults) with keyword `values` over it; an unknown name is a TypeError."""
    unknown = sorted(set(values) - {f.name for f in dataclasses.fields(ExtractionSettings)})
    if unknown:
        raise TypeError(f"extract_features() got unknown setting(s) {unknown}")
    return (settings or ExtractionSettings()).replace(**values)

