"""Retrieval losses: hand-computed values, positives masks, invariances, gradients."""
from __future__ import annotations

import math

import pytest
import torch

from videotext.config import ConfigError
from videotext.losses import (
    LOSSES,
    contrastive_loss,
    hardest_negative_triplet,
    info_nce,
    max_margin_ranking,
)

F64 = torch.float64

# A 3x3 matrix used by the hinge tests; rows = captions, columns = videos,
# positives on the diagonal (0.9, 0.5, 0.7).
S3 = torch.tensor(
    [
        [0.9, 0.8, 0.1],
        [0.6, 0.5, 0.4],
        [0.2, 0.75, 0.7],
    ],
    dtype=F64,
)


def close(tensor: torch.Tensor, value: float, tol: float = 1e-9) -> bool:
    return abs(float(tensor) - value) < tol


# --- InfoNCE --------------------------------------------------------------------------
def test_info_nce_identity_sigma_one():
    # sims = [[1,0],[0,1]], σ = 1: each row and each column is -log(e / (e + 1))
    # = log(1 + e^-1) = 0.3132616875...
    out = info_nce(torch.eye(2, dtype=F64), temperature=1.0)
    per = math.log1p(math.exp(-1.0))
    assert close(per, 0.31326168751822286)
    assert close(out["t2v"], per) and close(out["v2t"], per)
    assert close(out["loss"], 2 * per)  # paper & official code: the SUM of both directions
    assert close(info_nce(torch.eye(2, dtype=F64), 1.0, reduction="mean")["loss"], per)


def test_info_nce_asymmetric_with_temperature():
    # sims = [[0.5, 0.1], [0.3, 0.2]], σ = 0.5 → logits [[1.0, 0.2], [0.6, 0.4]].
    # t2v row 0: pos 1.0, neg 0.2 → log(1 + e^(0.2-1.0)) = log(1 + e^-0.8) = 0.371101
    # t2v row 1: pos 0.4, neg 0.6 → log(1 + e^( 0.2))                      = 0.798139
    # v2t col 0: pos 1.0, neg 0.6 → log(1 + e^-0.4)                        = 0.513015
    # v2t col 1: pos 0.4, neg 0.2 → log(1 + e^-0.2)                        = 0.598139
    sims = torch.tensor([[0.5, 0.1], [0.3, 0.2]], dtype=F64)
    out = info_nce(sims, temperature=0.5)
    t2v = (math.log1p(math.exp(-0.8)) + math.log1p(math.exp(0.2))) / 2
    v2t = (math.log1p(math.exp(-0.4)) + math.log1p(math.exp(-0.2))) / 2
    assert abs(t2v - 0.584620) < 1e-6 and abs(v2t - 0.555577) < 1e-6
    assert close(out["t2v"], t2v) and close(out["v2t"], v2t)
    assert close(out["loss"], t2v + v2t)


def test_info_nce_matches_cross_entropy_reference():
    torch.manual_seed(0)
    sims = torch.randn(5, 5, dtype=F64).clamp(-1, 1)
    target = torch.arange(5)
    ref_t2v = torch.nn.functional.cross_entropy(sims / 0.05, target)
    ref_v2t = torch.nn.functional.cross_entropy(sims.T / 0.05, target)
    out = info_nce(sims)  # σ = 0.05 default
    assert torch.allclose(out["t2v"], ref_t2v) and torch.allclose(out["v2t"], ref_v2t)


def test_info_nce_duplicate_video_is_not_a_negative():
    # Texts 0 and 1 are two captions of one video that also fills columns 0 and 1
    # (sampled twice); text 2 ↔ video 2. σ = 1.
    sims = torch.tensor([[2.0, 2.0, 0.0], [2.0, 2.0, 0.0], [0.0, 0.0, 2.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=torch.bool)
    # With the mask, the 4 pairs of the duplicated video compete only with the single
    # 0-similarity negative (video 2 / text 2): -log(e^2 / (e^2 + e^0)) = log(1 + e^-2) = 0.126928.
    # Pair (2,2) has two negatives (the duplicate twice, sims 0, 0): log(1 + 2e^-2) = 0.239202.
    # Mean over the 5 positive pairs, the same in both directions (sims is symmetric).
    out = info_nce(sims, temperature=1.0, positives=mask)
    per = (4 * math.log1p(math.exp(-2.0)) + math.log1p(2 * math.exp(-2.0))) / 5
    assert close(out["t2v"], per) and close(out["v2t"], per)
    # Without it (identity), rows 0/1 treat the duplicate as a negative:
    # -log(e^2 / (2e^2 + 1)) = log(2 + e^-2) = 0.757
    wrong = info_nce(sims, temperature=1.0)
    assert close(wrong["t2v"], (2 * math.log(2 + math.exp(-2.0)) + math.log1p(2 * math.exp(-2.0))) / 3)


def test_info_nce_several_captions_per_video_rectangular():
    # 3 captions, 2 videos: captions 0, 1 → video 0; caption 2 → video 1. σ = 1.
    sims = torch.tensor([[1.0, 0.0], [0.5, 0.0], [0.0, 1.0]], dtype=F64)
    mask = torch.tensor([[1, 0], [1, 0], [0, 1]], dtype=torch.bool)
    out = info_nce(sims, temperature=1.0, positives=mask)
    # t2v: (0,0): log(1+e^-1); (1,0): log(1+e^-0.5); (2,1): log(1+e^-1)   (mean of 3 pairs)
    t2v = (2 * math.log1p(math.exp(-1.0)) + math.log1p(math.exp(-0.5))) / 3
    # v2t: video 0's negatives = caption 2 only (sim 0); video 1's = captions 0, 1 (sims 0, 0)
    # (0,0): log(1+e^-1); (1,0): log(1+e^-0.5); (2,1): log(1 + 2e^-1)
    v2t = (math.log1p(math.exp(-1.0)) + math.log1p(math.exp(-0.5)) + math.log1p(2 * math.exp(-1.0))) / 3
    assert close(out["t2v"], t2v) and close(out["v2t"], v2t)
    with pytest.raises(ValueError, match="positives"):
        info_nce(sims)  # non-square needs a mask


def test_info_nce_shift_invariant_and_stable():
    torch.manual_seed(1)
    sims = torch.rand(4, 4, dtype=F64)
    a = info_nce(sims)["loss"]
    b = info_nce(sims + 0.37)["loss"]
    assert torch.allclose(a, b, atol=1e-10)
    huge = info_nce(torch.tensor([[1000.0, -1000.0], [-1000.0, 1000.0]]), temperature=0.05)
    assert torch.isfinite(huge["loss"]) and float(huge["loss"]) == 0.0
    bad = info_nce(torch.tensor([[-1000.0, 1000.0], [1000.0, -1000.0]]), temperature=0.05)
    assert close(bad["t2v"], 2000.0 / 0.05, tol=1e-3)  # softplus(40000) = 40000, no overflow


def test_info_nce_row_without_negatives_has_finite_gradient():
    sims = torch.tensor([[0.3, 0.2], [0.1, 0.4]], dtype=F64, requires_grad=True)
    mask = torch.tensor([[1, 1], [0, 1]], dtype=torch.bool)  # row 0 has no negative
    out = info_nce(sims, temperature=1.0, positives=mask)
    out["loss"].backward()
    assert torch.isfinite(sims.grad).all()


def test_info_nce_reduction_and_temperature_tensor():
    sims = torch.eye(3, dtype=F64)
    with pytest.raises(ConfigError, match="reduction"):
        info_nce(sims, reduction="avg")
    temperature = torch.tensor(0.5, dtype=F64, requires_grad=True)
    info_nce(sims, temperature=temperature)["loss"].backward()
    assert temperature.grad is not None and torch.isfinite(temperature.grad)


# --- max-margin ranking (MMT eq. 8) ----------------------------------------------------
def test_max_margin_by_hand():
    # margin m = 0.2 on S3, hinge [m + s_neg - s_pos]_+:
    # t2v (rows): row 0 (pos .9): .2+.8-.9 = .1, .2+.1-.9 < 0       → 0.1
    #             row 1 (pos .5): .2+.6-.5 = .3, .2+.4-.5 = .1      → 0.4
    #             row 2 (pos .7): .2+.2-.7 < 0,  .2+.75-.7 = .25    → 0.25    Σ = 0.75
    # v2t (cols): col 0 (pos .9): .2+.6-.9 < 0, .2+.2-.9 < 0        → 0
    #             col 1 (pos .5): .2+.8-.5 = .5, .2+.75-.5 = .45    → 0.95
    #             col 2 (pos .7): .2+.1-.7 < 0, .2+.4-.7 < 0        → 0       Σ = 0.95
    out = max_margin_ranking(S3, margin=0.2)
    assert close(out["t2v"], 0.75 / 3) and close(out["v2t"], 0.95 / 3)
    assert close(out["loss"], 1.7 / 3)  # paper: 1/B Σ_i Σ_{j≠i}
    # official MMT fix_norm: mean over 2B(B-1) = 12 terms; official COOT: / B² = 9
    assert close(max_margin_ranking(S3, margin=0.2, normalise="terms")["loss"], 1.7 / 12)
    assert close(max_margin_ranking(S3, margin=0.2, normalise="entries")["loss"], 1.7 / 9)


def test_max_margin_default_margin_and_official_formula():
    torch.manual_seed(2)
    sims = torch.rand(6, 6, dtype=F64)
    diag = sims.diag()
    off = ~torch.eye(6, dtype=torch.bool)
    # official MMT MaxMarginRankingLoss(margin=0.05, fix_norm=True), written out
    t2v = (0.05 - diag[:, None] + sims).clamp_min(0)[off]
    v2t = (0.05 - diag[None, :] + sims).clamp_min(0)[off]
    ref = torch.cat([t2v, v2t]).mean()
    assert torch.allclose(max_margin_ranking(sims, normalise="terms")["loss"], ref)
    assert torch.allclose(max_margin_ranking(sims)["loss"], torch.cat([t2v, v2t]).sum() / 6)


def test_max_margin_duplicate_video_is_not_a_negative():
    # Columns 0 and 1 are the same video (captions 0 and 1 both describe it).
    sims = torch.tensor([[0.9, 0.85, 0.1], [0.85, 0.9, 0.2], [0.1, 0.2, 0.8]], dtype=F64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=torch.bool)
    # With the mask, the only negatives are s=0.1/0.2 vs positives ≥ 0.8: margin 0.2 never
    # violated → 0. The identity mask would count 0.85 as a negative of 0.9 (hinge .15).
    assert float(max_margin_ranking(sims, margin=0.2, positives=mask)["loss"]) == 0.0
    assert close(max_margin_ranking(sims, margin=0.2)["loss"], 4 * 0.15 / 3)


def test_max_margin_zero_when_positives_win_by_margin():
    sims = torch.full((4, 4), 0.1, dtype=F64) + torch.eye(4, dtype=F64) * 0.5
    sims.requires_grad_(True)
    out = max_margin_ranking(sims, margin=0.3)  # 0.6 - 0.1 = 0.5 > 0.3
    assert float(out["loss"].detach()) == 0.0
    out["loss"].backward()
    assert float(sims.grad.abs().sum()) == 0.0
    with pytest.raises(ConfigError, match="normalise"):
        max_margin_ranking(sims, normalise="batch")


# --- hardest-negative triplet (Support-set eq. 1) ----------------------------------------
def test_triplet_by_hand_picks_hardest_negative():
    # α = 0.2 on S3.
    # t2v: row 0 hardest neg .8 → .2+.8-.9 = .1; row 1 hardest .6 → .3; row 2 hardest .75 → .25
    # v2t: col 0 hardest .6 → <0 → 0; col 1 hardest .8 → .5; col 2 hardest .4 → <0 → 0
    out = hardest_negative_triplet(S3)  # α = 0.2 default (Support-set §3.1.1)
    assert close(out["t2v"], (0.1 + 0.3 + 0.25) / 3)
    assert close(out["v2t"], 0.5 / 3)
    assert close(out["loss"], 1.15 / 3)
    # Only the hardest negative matters: lowering the non-hardest negatives changes nothing.
    softer = S3.clone()
    softer[0, 2] = softer[1, 2] = -1.0
    assert torch.allclose(hardest_negative_triplet(softer)["t2v"], out["t2v"])


def test_triplet_gradient_hits_only_hardest_negative():
    sims = S3.clone().requires_grad_(True)
    hardest_negative_triplet(sims)["t2v"].backward()
    grad = sims.grad
    # row 0: +1/3 on (0,1) and -1/3 on (0,0); row 2's hardest (2,1); row 1's hardest (1,0)
    expected = torch.zeros(3, 3, dtype=F64)
    for row, col in [(0, 1), (1, 0), (2, 1)]:
        expected[row, col] += 1 / 3
        expected[row, row] -= 1 / 3
    assert torch.allclose(grad, expected)


def test_triplet_duplicate_video_is_not_a_negative():
    sims = torch.tensor([[0.9, 0.85, 0.1], [0.85, 0.9, 0.2], [0.1, 0.2, 0.8]], dtype=F64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=torch.bool)
    # masked: hardest negatives are 0.1 / 0.2, all positives ≥ 0.8 → 0
    assert float(hardest_negative_triplet(sims, positives=mask)["loss"]) == 0.0
    # identity: rows/cols 0, 1 pick the duplicate 0.85 → .2 + .85 - .9 = .15 each direction
    ident = hardest_negative_triplet(sims)
    assert close(ident["t2v"], 2 * 0.15 / 3) and close(ident["v2t"], 2 * 0.15 / 3)
    # a pair whose row has no negative at all contributes 0, not α
    full = torch.ones(2, 2, dtype=torch.bool)
    assert float(hardest_negative_triplet(torch.rand(2, 2), positives=full)["loss"]) == 0.0


def test_triplet_zero_when_positives_win_by_margin():
    sims = torch.eye(5, dtype=F64) * 0.9
    assert float(hardest_negative_triplet(sims, margin=0.2)["loss"]) == 0.0


# --- all losses -------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_gradcheck(name):
    torch.manual_seed(3)
    sims = torch.rand(4, 3, dtype=F64, requires_grad=True)
    mask = torch.tensor([[1, 0, 0], [0, 1, 0], [0, 1, 0], [0, 0, 1]], dtype=torch.bool)
    kwargs = {"temperature": 0.5} if name == "infonce" else {"margin": 0.3}

    def fn(x):
        out = contrastive_loss(name, x, positives=mask, **kwargs)
        return out["loss"], out["t2v"], out["v2t"]

    assert torch.autograd.gradcheck(fn, (sims,))


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dtypes(name, dtype):
    torch.manual_seed(4)
    ref_sims = torch.rand(5, 5, dtype=F64) * 2 - 1
    ref = contrastive_loss(name, ref_sims)["loss"]
    out = contrastive_loss(name, ref_sims.to(dtype))["loss"]
    assert out.dtype == (torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype)
    tol = {torch.float16: 5e-2, torch.bfloat16: 2e-1, torch.float32: 1e-4, torch.float64: 1e-12}[dtype]
    assert abs(float(out) - float(ref)) <= tol * max(1.0, abs(float(ref)))


def test_registry_and_errors():
    sims = torch.eye(3)
    assert torch.equal(contrastive_loss("triplet", sims)["loss"], hardest_negative_triplet(sims)["loss"])
    with pytest.raises(ConfigError, match=r"unknown contrastive loss 'nce'.*infonce.*max_margin.*triplet"):
        contrastive_loss("nce", sims)
    with pytest.raises(ConfigError, match="temperature"):
        contrastive_loss("triplet", sims, temperature=0.1)
    with pytest.raises(ValueError, match="shape"):
        info_nce(sims, positives=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="no positive"):
        info_nce(sims, positives=torch.zeros(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="2-D"):
        info_nce(torch.zeros(3))
