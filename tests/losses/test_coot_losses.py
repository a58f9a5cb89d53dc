"""COOT losses on hand-computed cases (eq. 1–3, 6–8)."""
import math

import pytest
import torch

from videotext.losses.coot import alignment_loss, cluster_loss, cycle_consistency_loss, cycle_index_error


def test_alignment_hand_computed():
    # x0 = e0, x1 = e1; y0 = e0, y1 = (e0+e1)/√2 → cos: s00=1, s01=c, s10=0, s11=c, c=1/√2
    c = 1 / math.sqrt(2)
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    y = torch.tensor([[2.0, 0.0], [1.0, 1.0]])  # norms must not matter (cosine distance)
    # eq. 1 hinge terms max(0, α − s_pos + s_neg), α = 0.2:
    # pair 0: x0 vs y1 → 0.2 − 1 + c = −0.093 → 0; x1 vs y0 → 0.2 − 1 + 0 → 0
    # pair 1: x1 vs y0 → 0.2 − c + 0 = −0.507 → 0; x0 vs y1 → 0.2 − c + c = 0.2
    assert alignment_loss(x, y, 0.2, "sum").item() == pytest.approx(0.2, abs=1e-6)
    assert alignment_loss(x, y, 0.2, "entries").item() == pytest.approx(0.2 / 4, abs=1e-6)  # official ÷N²
    assert alignment_loss(x, y, 0.2, "positives").item() == pytest.approx(0.2 / 2, abs=1e-6)


def test_alignment_zero_when_separated_by_margin():
    x = torch.eye(3)
    assert alignment_loss(x, 5 * x, 0.2, "sum").item() == 0.0


def test_cluster_hand_computed():
    # videos: cos(v0, v1) = 0.9 → max(0, 0.2 − (1 − 0.9)) = 0.1 per ordered pair and direction
    v = torch.tensor([[1.0, 0.0], [0.9, math.sqrt(1 - 0.81)]])
    t = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # orthogonal: D = 1 > γ → 0
    # self-hinge sums both directions over i≠j: 2 pairs × 2 directions × 0.1 = 0.4; mean of modalities → 0.2
    assert cluster_loss(v, t, 0.2, "sum").item() == pytest.approx(0.2, abs=1e-6)
    assert cluster_loss(t, t, 0.2, "sum").item() == 0.0


def test_cmc_perfect_cycle_is_zero():
    # clips and sentences are the same well-separated points: every cycle returns home
    points = 10 * torch.eye(4).unsqueeze(0)  # [1, 4, 4]
    mask = torch.ones(1, 4, dtype=torch.bool)
    assert cycle_consistency_loss(points, mask, points.clone(), mask).item() == pytest.approx(0.0, abs=1e-12)


def test_cmc_hand_computed_two_sentences():
    # 1-D: sentences at 0 and 1, one clip at 0.5 → soft NN of both sentences is 0.5,
    # which is equidistant from both sentences: β = (½, ½), μ = 0.5.
    # errors (0 − 0.5)² and (1 − 0.5)² → mean 0.25 (text → video → text)
    sents = torch.tensor([[[0.0], [1.0]]])
    clips = torch.tensor([[[0.5]]])
    m2, m1 = torch.ones(1, 2, dtype=torch.bool), torch.ones(1, 1, dtype=torch.bool)
    assert cycle_index_error(sents, m2, clips, m1).item() == pytest.approx(0.25, abs=1e-6)
    # video → text → video: one clip, μ is always 0 → 0; total = 0.25
    assert cycle_consistency_loss(clips, m1, sents, m2).item() == pytest.approx(0.25, abs=1e-6)


def test_cmc_swapped_order_penalised_and_masks_ignored():
    # sentences in reverse order of clips (2 items far apart): sentence 0 → clip 0 → ... with
    # clip 0 = sentence 1 position, the cycle still returns home (it is consistent within
    # the text sequence), so reverse order alone is not an error. A padded clip far away
    # must not change anything.
    clips = torch.tensor([[[0.0], [10.0], [500.0]]])
    sents = torch.tensor([[[10.0], [0.0]]])
    clip_mask = torch.tensor([[True, True, False]])
    sent_mask = torch.ones(1, 2, dtype=torch.bool)
    assert cycle_consistency_loss(clips, clip_mask, sents, sent_mask).item() == pytest.approx(0.0, abs=1e-9)
    # one clip between two sentences at distance 1 each with "mean" = "sum" in 1-D
    a = cycle_index_error(sents, sent_mask, clips[:, :1] + 5, clip_mask[:, :1], "mean")
    assert a.item() == pytest.approx(0.25, abs=1e-6)


def test_cmc_all_positions_average_per_sequence_then_over_the_batch():
    # 3 videos with 3 / 2 / 4 clips, 1-D embeddings (far apart: the softmaxes are one-hot,
    # except where stated), cmc_samples 0 = every position. Per start (i − μ)²:
    # video 0: clips 0, 100, 200; sentences 0, 100, 140. Clip 200 → sentence 140 (d² 3600 vs
    #   10000) → back to clip 100 (1600 vs 3600): μ = 1, error 1; the others return home.
    #   Sentence 140 → clip 100 → sentence 100: error 1. Errors: clips [0, 0, 1], sentences [0, 0, 1].
    # video 1: clips 0, 1; one sentence at 0.5, equidistant: β = (½, ½), μ = 0.5 for both clips
    #   → [0.25, 0.25]; the one sentence always returns to itself → [0].
    # video 2: clips = sentences = 0, 100, 200, 300 → all 0.
    clips, clip_mask = padded([[0, 100, 200], [0, 1], [0, 100, 200, 300]])
    sents, sent_mask = padded([[0, 100, 140], [0.5], [0, 100, 200, 300]])
    video_cycle = cycle_index_error(clips, clip_mask, sents, sent_mask)
    text_cycle = cycle_index_error(sents, sent_mask, clips, clip_mask)
    # per sequence, then over the batch (eq. 8; official num_samples=-1): (1/3 + 0.25 + 0) / 3 and (1/3 + 0 + 0) / 3
    assert video_cycle.item() == pytest.approx((1 / 3 + 0.25 + 0) / 3, abs=1e-6)  # pooled would be 1.5 / 9
    assert text_cycle.item() == pytest.approx((1 / 3 + 0 + 0) / 3, abs=1e-6)  # pooled would be 1 / 8
    total = cycle_consistency_loss(clips, clip_mask, sents, sent_mask)
    assert total.item() == pytest.approx(7 / 36 + 1 / 9, abs=1e-6)
    # the same as averaging each video's own loss
    alone = [cycle_consistency_loss(clips[i:i + 1], clip_mask[i:i + 1], sents[i:i + 1], sent_mask[i:i + 1])
             for i in range(3)]
    assert total.item() == pytest.approx(sum(a.item() for a in alone) / 3, abs=1e-6)


def padded(sequences: list[list[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    """1-D sequences → [B, L, 1] zero-padded values and [B, L] masks (True = real)."""
    length = max(len(s) for s in sequences)
    values, mask = torch.zeros(len(sequences), length, 1), torch.zeros(len(sequences), length, dtype=torch.bool)
    for i, seq in enumerate(sequences):
        values[i, : len(seq), 0], mask[i, : len(seq)] = torch.tensor(seq, dtype=torch.float32), True
    return values, mask


def test_cmc_sampling_draws_one_position_per_sequence():
    torch.manual_seed(0)
    sents = torch.tensor([[[0.0], [1.0]]])
    clips = torch.tensor([[[0.5]]])
    m2, m1 = torch.ones(1, 2, dtype=torch.bool), torch.ones(1, 1, dtype=torch.bool)
    values = {round(cycle_index_error(sents, m2, clips, m1, samples=1).item(), 6) for _ in range(20)}
    assert values == {0.25}  # both positions have error 0.25 here
    # gradient flows
    s = sents.clone().requires_grad_(True)
    cycle_index_error(s, m2, clips, m1).backward()
    assert s.grad is not None and torch.isfinite(s.grad).all()
