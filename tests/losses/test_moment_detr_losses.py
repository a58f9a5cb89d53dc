"""Moment-DETR's matching and losses against hand-computed values."""
from __future__ import annotations

import pytest
import torch

from videotext.losses.moment_detr import (
    MatchWeights, cxw_to_xx, generalized_temporal_iou, hungarian_match, negative_pair_hinge, saliency_hinge,
    saliency_pairs, set_losses,
    xx_to_cxw,
)


def test_span_forms_and_giou_by_hand():
    spans = torch.tensor([[0.2, 0.6]])
    assert torch.allclose(cxw_to_xx(xx_to_cxw(spans)), spans)
    assert torch.allclose(xx_to_cxw(spans), torch.tensor([[0.4, 0.4]]))
    # [0, 2] vs [1, 3]: IoU 1/3, hull 3 = union: GIoU 1/3; [0, 1] vs [2, 3]: IoU 0, hull 3, union 2: −1/3
    giou = generalized_temporal_iou(torch.tensor([[0.0, 2.0], [0.0, 1.0]]), torch.tensor([[1.0, 3.0], [2.0, 3.0]]))
    assert giou[0, 0].item() == pytest.approx(1 / 3) and giou[1, 1].item() == pytest.approx(-1 / 3)


def test_matching_pairs_each_target_with_its_closest_prediction():
    spans = xx_to_cxw(torch.tensor([[[0.7, 0.9], [0.1, 0.3], [0.4, 0.5]]]))  # [1, Q=3, 2]
    logits = torch.zeros(1, 3, 2)
    targets = [torch.tensor([[0.1, 0.3], [0.7, 0.85]])]
    (rows, cols), = hungarian_match(logits, spans, targets, MatchWeights())
    assert sorted(zip(rows.tolist(), cols.tolist())) == [(0, 1), (1, 0)]
    assert [r.tolist() for r in hungarian_match(logits, spans, [torch.zeros(0, 2)], MatchWeights())[0]] == [[], []]


def test_set_losses_of_a_perfect_and_of_an_empty_window():
    spans = xx_to_cxw(torch.tensor([[[0.1, 0.3], [0.5, 0.6]]]))
    logits = torch.tensor([[[9.0, -9.0], [-9.0, 9.0]]])  # first: foreground, second: background
    targets = [torch.tensor([[0.1, 0.3]])]
    losses = set_losses(logits, spans, targets, hungarian_match(logits, spans, targets, MatchWeights()), MatchWeights())
    assert losses["span"].item() == pytest.approx(0.0, abs=1e-6) and losses["giou"].item() == pytest.approx(0.0, abs=1e-6)
    assert losses["label"].item() == pytest.approx(0.0, abs=1e-6)
    # nothing to find: both predictions should say background; the first says foreground with certainty
    empty = [torch.zeros(0, 2)]
    losses = set_losses(logits, spans, empty, hungarian_match(logits, spans, empty, MatchWeights()), MatchWeights())
    assert losses["span"].item() == 0.0
    assert losses["label"].item() == pytest.approx((0.1 * 18.0 + 0.0) / 2, rel=1e-4)  # eos weight 0.1 on 18 nats


def test_saliency_pairs_and_hinge():
    saliency = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 5.0, 2.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    mask = torch.tensor([[True] * 4, [True] * 4, [True] * 4])
    positive, negative, valid = saliency_pairs(saliency, mask, torch.Generator().manual_seed(0))
    assert valid.tolist() == [True, True, False]  # the third has no irrelevant step
    assert set(positive[0].tolist()) <= {1, 2} and set(negative[0].tolist()) <= {0, 3}
    assert positive[1, 1].item() == 1 and negative[1, 1].item() == 2  # annotated: highest against lowest relevant
    scores = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.9, 0.0], [0.0, 0.0, 0.0, 0.0]])
    # window 1: both pairs separated by 1 ≥ 0.2 → 0; window 2: easy pair ≥ 0.9 → 0, hard pair 0.2 − 0.1 = 0.1
    loss = saliency_hinge(scores, saliency, mask, 0.2, torch.Generator().manual_seed(0))
    assert loss.item() == pytest.approx(0.1 / 2)


def test_negative_pair_hinge_by_hand():
    saliency = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    mask = torch.ones(3, 4, dtype=torch.bool)
    own = torch.tensor([[0.0, 1.0, 0.5, 0.0], [0.0, 0.3, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    other = torch.tensor([[9.0, 0.5, 0.5, 9.0], [0.0, 0.0, 0.0, 0.0], [0.0, 5.0, 0.0, 0.0]])
    paired = torch.tensor([True, True, False])  # the third window's other query is its own text
    # window 1: relevant steps 1, 2 → max(0, .2 + .5 − 1) = 0 and max(0, .2 + .5 − .5) = .2 → mean .1;
    # window 2: step 1 → max(0, .2 + 0 − .3) = 0; irrelevant steps never count
    loss = negative_pair_hinge(own, other, saliency, mask, 0.2, paired)
    assert loss.item() == pytest.approx((0.1 + 0.0) / 2)
    assert negative_pair_hinge(own, other, saliency, mask, 0.2, torch.zeros(3, dtype=torch.bool)).item() == 0.0
