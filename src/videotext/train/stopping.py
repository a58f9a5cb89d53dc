"""When a validation curve has stopped rising: early stopping, and the benchmark's training-length rule.

A validation *improves* when it beats the reference by more than `min_delta`; the reference is
the value of the last validation that improved (the first validation sets it), so a slow drift
counts once it adds up to more than `min_delta`, and noise below it never does. A run has
*settled* once `patience_epochs` epochs pass without an improvement. The trainer applies this
online (`train.early_stop_patience` validations, `train.early_stop_min_delta`); the benchmark
applies the same test to a finished run's recorded curve (`settled_epoch`, `still_rising`).
"""
from __future__ import annotations

from typing import Sequence


def improves(value: float, reference: float | None, min_delta: float) -> bool:
    """Whether `value` is an improvement on `reference` (None: no validation yet)."""
    return reference is None or value > reference + min_delta


def last_improvement(curve: Sequence[Sequence[float]], min_delta: float) -> float | None:
    """Epoch of the last validation of `curve` ([[epoch, value], …] in order) that improved."""
    reference, epoch = None, None
    for at, value in curve:
        if improves(value, reference, min_delta):
            reference, epoch = value, float(at)
    return epoch


def settled_epoch(curve: Sequence[Sequence[float]], patience_epochs: float, min_delta: float) -> float | None:
    """The first validation epoch at which `patience_epochs` epochs had passed without an
    improvement (where early stopping under the same rule would have ended the run); None if
    the curve never got there."""
    reference, since = None, None
    for at, value in curve:
        if improves(value, reference, min_delta):
            reference, since = value, float(at)
        elif float(at) - since >= patience_epochs:
            return float(at)
    return None


def still_rising(curve: Sequence[Sequence[float]], cap: float, patience_epochs: float, min_delta: float) -> bool:
    """Whether a run reached its cap (`cap` epochs) with an improvement in its last
    `patience_epochs` epochs: its curve had not settled when the budget ended. A run that
    stopped before its cap (early stopping) is not."""
    if not curve or float(curve[-1][0]) < cap:
        return False
    last = last_improvement(curve, min_delta)
    return last is not None and cap - last < patience_epochs
