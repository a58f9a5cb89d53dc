"""Reading and summarising a run's metrics lines for the report.

A log is the run's `metrics.jsonl` (read with `videotext.io.read_json_lines`, so a torn
last line from a killed run is skipped) or the same lines as dicts. These helpers turn it
into what the plots and tables show: lines per step, loss parts, series, the selected
validation line, per-direction ranks. Nothing here draws or writes.
"""
from __future__ import annotations

import math
import numbers
import os
from typing import Any, Mapping

import numpy as np

from videotext.io import read_json_lines

#: Row labels of the two retrieval directions; other direction keys are shown as is.
DIRECTION_LABELS: dict[str, str] = {"t2v": "text → video", "v2t": "video → text"}

#: Numeric keys of a training line that are bookkeeping, not loss parts.
_NON_LOSS_KEYS = {
    "kind", "step", "epoch", "lr", "loss", "time", "elapsed", "wall", "wall_time",
    "grad_norm", "grad_scale", "loss_scale", "batch_size", "samples", "tokens",
    "throughput", "memory", "mem", "max_memory", "gpu_mem", "temperature", "logit_scale",
    "scale", "seed", "rank", "world_size",
}
_NON_LOSS_SUFFIXES = ("_time", "_per_s", "_per_sec", "_s", "_mb", "_gb", "_norm", "_lr")


def load_log(metrics_log: Any) -> list[dict]:
    """Lines as dicts; a path is read as JSON lines (a torn last line is ignored)."""
    if metrics_log is None:
        return []
    if isinstance(metrics_log, (str, os.PathLike)):
        return read_json_lines(metrics_log)
    out = []
    for index, line in enumerate(metrics_log):
        if not isinstance(line, Mapping):
            raise TypeError(f"metrics_log[{index}]: expected a dict, got {type(line).__name__}")
        out.append(dict(line))
    return out


def dedupe_by_step(lines: list[dict]) -> list[dict]:
    """Sorted by step; a step logged twice (a resumed run) keeps its last line."""
    by_step: dict[Any, dict] = {}
    no_step = []
    for line in lines:
        step = line.get("step")
        if isinstance(step, numbers.Real):
            by_step[step] = line
        else:
            no_step.append(line)
    return [by_step[s] for s in sorted(by_step)] + no_step


def is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def format_number(value: Any, digits: int = 1) -> str:
    value = float(value)
    return str(int(value)) if value.is_integer() and abs(value) < 1e9 else f"{value:.{digits}f}"


def loss_part_keys(train: list[dict]) -> list[str]:
    keys: dict[str, None] = {}
    for line in train:
        for key, value in line.items():
            if not is_number(value) or key in _NON_LOSS_KEYS:
                continue
            if key.endswith(_NON_LOSS_SUFFIXES) and "loss" not in key:
                continue
            keys[key] = None
    return list(keys)


def series(lines: list[dict], key: str, x_key: str = "step") -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for line in lines:
        x, y = line.get(x_key), line.get(key)
        if is_number(x) and is_number(y) and math.isfinite(y):
            xs.append(float(x))
            ys.append(float(y))
    return np.asarray(xs), np.asarray(ys)


def non_finite_note(train: list[dict]) -> str:
    """A diverged run logs NaN/inf losses, which plots silently drop: say so."""
    bad = [l for l in train if is_number(l.get("loss")) and not math.isfinite(l["loss"])]
    if not bad:
        return ""
    first = bad[0].get("step")
    where = f", first at step {first}" if is_number(first) else ""
    return f". {len(bad)} non-finite loss value(s) (NaN/inf) not drawn{where}"


def smooth(values: np.ndarray) -> np.ndarray:
    """Debiased exponential moving average (TensorBoard's), window ≈ n/25 points."""
    n = len(values)
    if n < 5:
        return values.copy()
    window = max(2.0, n / 25.0)
    weight = 1.0 - 1.0 / window
    out = np.empty(n)
    acc, norm = 0.0, 0.0
    for i, v in enumerate(values):
        acc = weight * acc + (1.0 - weight) * v
        norm = weight * norm + (1.0 - weight)
        out[i] = acc / norm
    return out


def selected_val(val: list[dict], best_step: int | None) -> dict | None:
    if best_step is not None:
        stepped = [l for l in val if is_number(l.get("step"))]
        if stepped:
            return min(stepped, key=lambda l: abs(l["step"] - best_step))
    marked = [l for l in val if l.get("selected") is True]
    return marked[-1] if marked else None


def ranks_by_direction(ranks: Mapping[str, Any]) -> dict[str, np.ndarray]:
    out = {}
    for key, value in ranks.items():
        if key == "n_targets" or value is None:
            continue
        array = np.asarray(value, dtype=np.float64).reshape(-1)
        array = array[np.isfinite(array)]
        if array.size:
            if array.min() < 1:
                raise ValueError(f"ranks[{key!r}]: ranks start at 1 (1 = correct first), got {array.min()}")
            out[str(key)] = array
    return out


def target_count(ranks: Mapping[str, Any], direction: str) -> int | None:
    n = ranks.get("n_targets")
    if isinstance(n, Mapping):
        n = n.get(direction)
    return int(n) if is_number(n) and n > 0 else None
