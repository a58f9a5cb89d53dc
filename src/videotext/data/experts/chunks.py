"""Staging a long video's chunks: `<out_dir>/.chunks/<expert>/<quoted key>/chunk-*.npz`.

A video longer than `chunk_seconds` is extracted one stretch at a time; each expert's rows
of a finished stretch are written to a chunk file (temp + rename, so a chunk is whole or
absent), and once every chunk is there they become the video's store entry, read back one
at a time. A run killed in the middle of a long video resumes at its first unfinished chunk.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator

import numpy as np

from videotext.data.experts.base import ExpertOutput
from videotext.data.features import encode_key
from videotext.io import atomic_path


def chunk_file(chunk_root: Path, expert: str, key: str, index: int, count: int) -> Path:
    """Where chunk `index` of `count` of one video's `expert` rows is staged."""
    return chunk_root / expert / encode_key(key) / f"chunk-{index:05d}-of-{count:05d}.npz"


class ChunkStage:
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
