"""The training-length rule on a validation curve, by hand."""
from __future__ import annotations

from videotext.train.stopping import improves, last_improvement, settled_epoch, still_rising


def test_improvement_is_measured_from_the_last_improving_validation():
    assert improves(5.0, None, 1.0) and improves(2.1, 1.0, 1.0) and not improves(2.0, 1.0, 1.0)
    # +0.6 a validation: each step alone is under 1, but 10.0 -> 11.2 adds up past it at epoch 3
    drift = [[1, 10.0], [2, 10.6], [3, 11.2], [4, 11.8], [5, 12.4]]
    assert last_improvement(drift, 1.0) == 5.0  # 10.0 (ep 1), 11.2 (ep 3), 12.4 (ep 5)
    assert last_improvement(drift, 0.0) == 5.0
    assert settled_epoch(drift, 2, 1.0) is None  # improvements every 2 epochs: never 2 epochs without


def test_settled_and_still_rising():
    curve = [[1, 10.0], [2, 20.0], [3, 20.5], [4, 19.0], [5, 20.9], [6, 21.2]]
    # with min_delta 1: 10 (ep 1), 20 (ep 2), then 21.2 - 20 = 1.2 > 1 at epoch 6
    assert last_improvement(curve, 1.0) == 6.0
    assert settled_epoch(curve, 3, 1.0) == 5.0  # 3 epochs after epoch 2: early stopping ends it before epoch 6
    assert settled_epoch(curve, 4, 1.0) is None
    assert still_rising(curve, 6, 3, 1.0)  # improved at the cap itself
    assert not still_rising(curve, 6, 3, 2.0)  # min_delta 2: last improvement at epoch 2, 4 epochs before the cap
    assert not still_rising(curve[:4], 6, 3, 1.0)  # stopped before the cap (early stopping): not rising at it
    # validations every 2 epochs: patience 5 epochs needs 3 validations (6 epochs) after the last improvement
    sparse = [[2, 30.0], [4, 40.0], [6, 40.5], [8, 40.2], [10, 40.9]]
    assert settled_epoch(sparse, 5, 1.0) == 10.0 and not still_rising(sparse, 10, 5, 1.0)
    assert still_rising(sparse, 10, 7, 1.0)
