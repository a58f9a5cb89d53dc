"""Moment-DETR's losses (Lei et al. 2021, §4): set matching of predicted spans to ground truth, span
regression, foreground classification and the saliency hinge.

Spans are fractions of a window, predicted as (centre, width) and compared as (start, end).
The predicted set is matched one-to-one to the ground-truth spans by the Hungarian algorithm on

    cost = λ_L1 · |ŝ − s|₁  −  λ_iou · GIoU(ŝ, s)  −  λ_cls · p̂(foreground)

(the matching cost of DETR, §4 "Matching and loss functions"); matched predictions learn their span
(L1 on (centre, width) and 1 − GIoU) and to say "foreground", the others "background" (weighted
`eos_weight`, DETR's no-object weight). The saliency loss asks a clip inside the moments to score
`margin` above one outside, and an annotated clip of higher saliency above one of lower saliency
(§4: two pairs per query, hinge with Δ = 0.2).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from scipy.optimize import linear_sum_assignment

FOREGROUND, BACKGROUND = 0, 1  # class indices of the foreground / background logits


def cxw_to_xx(spans: torch.Tensor) -> torch.Tensor:
    """[..., 2] (centre, width) → (start, end)."""
    centre, width = spans.unbind(-1)
    return torch.stack([centre - width / 2, centre + width / 2], dim=-1)


def xx_to_cxw(spans: torch.Tensor) -> torch.Tensor:
    """[..., 2] (start, end) → (centre, width)."""
    start, end = spans.unbind(-1)
    return torch.stack([(start + end) / 2, end - start], dim=-1)


def generalized_temporal_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[N, M] GIoU of (start, end) spans `a` [N, 2] and `b` [M, 2]: IoU − (hull − union) / hull."""
    inter = (torch.minimum(a[:, None, 1], b[None, :, 1]) - torch.maximum(a[:, None, 0], b[None, :, 0])).clamp(min=0)
    union = (a[:, 1] - a[:, 0])[:, None] + (b[:, 1] - b[:, 0])[None, :] - inter
    hull = torch.maximum(a[:, None, 1], b[None, :, 1]) - torch.minimum(a[:, None, 0], b[None, :, 0])
    iou = inter / union.clamp(min=1e-8)
    return iou - (hull - union) / hull.clamp(min=1e-8)


@dataclass
class MatchWeights:
    """Weights of the matching cost and of the losses (§4; defaults of the official release)."""

    span: float = 10.0  # λ_L1
    giou: float = 1.0  # λ_iou
    label: float = 4.0  # λ_cls
    eos: float = 0.1  # weight of the background class (DETR's no-object weight)


@torch.no_grad()
def hungarian_match(logits: torch.Tensor, spans: torch.Tensor, targets: Sequence[torch.Tensor],
                    weights: MatchWeights) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per window, (prediction indices, target indices) of the one-to-one matching of least cost.

    logits [B, Q, 2], spans [B, Q, 2] (centre, width), targets: per window [n_i, 2] (start, end).
    """
    probs = logits.float().softmax(-1)[..., FOREGROUND]  # [B, Q]
    out = []
    for b, target in enumerate(targets):
        if not len(target):
            empty = torch.zeros(0, dtype=torch.long)
            out.append((empty, empty))
            continue
        target = target.to(spans.device, torch.float32)
        cost = (weights.span * torch.cdist(spans[b].float(), xx_to_cxw(target), p=1)
                - weights.giou * generalized_temporal_iou(cxw_to_xx(spans[b].float()), target)
                - weights.label * probs[b][:, None])  # [Q, n]
        rows, cols = linear_sum_assignment(cost.cpu().numpy())
        out.append((torch.as_tensor(rows, dtype=torch.long), torch.as_tensor(cols, dtype=torch.long)))
    return out


def set_losses(logits: torch.Tensor, spans: torch.Tensor, targets: Sequence[torch.Tensor],
               matches: Sequence[tuple[torch.Tensor, torch.Tensor]], weights: MatchWeights) -> dict[str, torch.Tensor]:
    """{"span": mean L1 of matched (centre, width), "giou": mean 1 − GIoU of matched spans, "label":
    mean weighted cross-entropy of foreground / background over every prediction}; both span terms
    are 0 where nothing is matched (windows without a moment)."""
    batch = torch.cat([torch.full_like(rows, b) for b, (rows, _) in enumerate(matches)]).to(spans.device)
    rows = torch.cat([rows for rows, _ in matches]).to(spans.device)
    matched = spans[batch, rows]  # [n, 2] (centre, width)
    truth = torch.cat([t[cols] for t, (_, cols) in zip(targets, matches)]).to(spans.device, spans.dtype)  # [n, 2] xx
    if len(rows):
        span = F.l1_loss(matched, xx_to_cxw(truth), reduction="mean")
        giou = (1 - torch.diag(generalized_temporal_iou(cxw_to_xx(matched), truth))).mean()
    else:
        span = giou = spans.sum() * 0.0
    classes = torch.full(logits.shape[:2], BACKGROUND, dtype=torch.long, device=logits.device)
    classes[batch, rows] = FOREGROUND
    class_weights = torch.tensor([1.0, weights.eos], device=logits.device, dtype=logits.dtype)
    label = F.cross_entropy(logits.transpose(1, 2), classes, class_weights, reduction="none").mean()
    return {"span": span, "giou": giou, "label": label}


def saliency_pairs(saliency: torch.Tensor, mask: torch.Tensor, generator: torch.Generator | None = None,
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two (positive, negative) step pairs per window: (positive index [B, 2], negative index [B, 2],
    valid [B] bool). Pair 1: a relevant step (saliency > 0) against an irrelevant one; pair 2, where the
    annotated scores differ, a step of the highest score against one of the lowest relevant score,
    else a second relevant / irrelevant pair. Windows with no relevant or no irrelevant step are not valid.
    """
    saliency, mask = saliency.detach().cpu(), mask.cpu()
    rows = len(saliency)
    positive = torch.zeros(rows, 2, dtype=torch.long)
    negative = torch.zeros(rows, 2, dtype=torch.long)
    valid = torch.zeros(rows, dtype=torch.bool)

    def pick(candidates: torch.Tensor) -> int:
        return int(candidates[torch.randint(len(candidates), (1,), generator=generator)])

    for b in range(rows):
        relevant = torch.nonzero((saliency[b] > 0) & mask[b]).flatten()
        irrelevant = torch.nonzero((saliency[b] <= 0) & mask[b]).flatten()
        if not len(relevant) or not len(irrelevant):
            continue
        valid[b] = True
        positive[b, 0], negative[b, 0] = pick(relevant), pick(irrelevant)
        scores = saliency[b, relevant]
        if scores.max() > scores.min():  # annotated scores: a higher against a lower relevant step
            positive[b, 1] = pick(relevant[scores == scores.max()])
            negative[b, 1] = pick(relevant[scores == scores.min()])
        else:
            positive[b, 1], negative[b, 1] = pick(relevant), pick(irrelevant)
    return positive, negative, valid


def saliency_hinge(scores: torch.Tensor, saliency: torch.Tensor, mask: torch.Tensor, margin: float,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """Mean over windows of Σ over its two pairs of max(0, Δ + s(negative) − s(positive)); scores [B, W]."""
    positive, negative, valid = saliency_pairs(saliency, mask, generator)
    if not valid.any():
        return scores.sum() * 0.0
    device = scores.device
    rows = torch.nonzero(valid).flatten().to(device)
    pos = scores[rows[:, None], positive[valid].to(device)]  # [n, 2]
    neg = scores[rows[:, None], negative[valid].to(device)]
    return torch.clamp(margin + neg - pos, min=0).sum(1).mean()


def negative_pair_hinge(own: torch.Tensor, other: torch.Tensor, saliency: torch.Tensor, mask: torch.Tensor,
                        margin: float, paired: torch.Tensor) -> torch.Tensor:
    """Mean over windows of the mean, over its relevant steps, of max(0, Δ + s_other(t) − s_own(t)): a
    step of the moment must score `margin` higher for its own query than for another query of the batch.

    own, other [B, W]: step saliency under the window's query and under a mismatched one; saliency [B, W]
    (> 0 = relevant); paired [B] bool: windows whose mismatched query is another text. Without this term
    a head can satisfy the saliency hinge by telling events from idle steps, whatever the query says (a
    video-query pair that does not match must score low: the negative pairs of QD-DETR, Moon et al. 2023,
    here as a hinge at the relevant steps)."""
    relevant = (saliency > 0) & mask & paired[:, None]  # [B, W]
    counts = relevant.sum(1)  # [B]
    rows = counts > 0
    if not rows.any():
        return own.sum() * 0.0
    hinge = torch.clamp(margin + other - own, min=0) * relevant  # [B, W]
    return (hinge.sum(1)[rows] / counts[rows]).mean()


def window_step_mask(steps: Sequence[int], window: int) -> np.ndarray:
    """[B, W] True on the real steps of each window (its first `steps[b]`)."""
    return np.arange(window)[None, :] < np.asarray(steps)[:, None]
