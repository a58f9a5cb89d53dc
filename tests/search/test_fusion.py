"""Fusing channels (`search.fusion`): tied scores share a rank, a channel that cannot tell candidates
apart does not reorder them, and one that barely separates them cannot overturn a clear one."""
from __future__ import annotations

import numpy as np
import pytest

from videotext.errors import VideoTextError
from videotext.search.entries import Hit
from videotext.search.fusion import (FUSIONS, RRF_K, check_fusion, competition_ranks, fuse_hits, fuse_scores,
                                     standardised)


def hits(scores, ids=None, channel="shown") -> list[Hit]:
    """A channel's hit list, best first, from scores by entry."""
    ids = ids or [f"v{i:02d}" for i in range(len(scores))]
    order = np.argsort(-np.asarray(scores), kind="stable")
    return [Hit(id=ids[i], score=float(scores[i]), rank=r, meta={channel: True}) for r, i in enumerate(order, 1)]


def ids_of(found) -> list[str]:
    return [h.id for h in found]


def test_tied_scores_share_the_best_rank():
    assert competition_ranks(np.array([3.0, 1.0, 3.0, 2.0])).tolist() == [1, 4, 1, 3]
    assert competition_ranks(np.array([0.5] * 4)).tolist() == [1, 1, 1, 1]


def test_standardised_is_the_z_score_and_zero_for_a_flat_channel():
    np.testing.assert_allclose(standardised(np.array([1.0, 2.0, 3.0])), [-1.5 ** 0.5, 0.0, 1.5 ** 0.5])
    assert standardised(np.array([0.3] * 5)).tolist() == [0.0] * 5
    assert standardised(np.array([0.3, 0.3 + 1e-9, 0.3])).tolist() == [0.0] * 3  # float noise: still flat


@pytest.mark.parametrize("fusion", FUSIONS)
def test_a_constant_channel_leaves_the_other_ranking_as_it_is(fusion):
    rng = np.random.default_rng(0)
    said = rng.normal(size=20)
    constant = np.full(20, 0.42)
    fused = fuse_hits([hits(constant), hits(said, channel="said")], k=20, fusion=fusion)
    assert ids_of(fused) == ids_of(hits(said))
    fused = fuse_hits([hits(said), hits(constant, channel="said")], k=20, fusion=fusion)
    assert ids_of(fused) == ids_of(hits(said))
    assert fused[0].meta == {"shown": True, "said": True}  # both channels' meta kept


def test_positions_of_a_constant_channel_outvote_the_other():
    """What ranking by positions did: 20 equal visual scores still hand out ranks 1..20, and the
    fused first is the said channel's first only when the arbitrary order agrees."""
    rng = np.random.default_rng(0)
    wins = 0
    for trial in range(20):
        said = rng.normal(size=20)
        shown = hits(np.full(20, 0.42))
        positional = [Hit(**{**h.to_dict(), "score": -float(p), "rank": p}) for p, h in enumerate(shown, 1)]
        wins += fuse_hits([positional, hits(said, channel="said")], k=1, fusion="rrf")[0].id == f"v{np.argmax(said):02d}"
    assert wins < 15
    # the rule itself: 1 / (RRF_K + 1) for first place, ties sharing it
    assert fuse_scores([np.array([1.0, 1.0, 0.0])], [np.ones(3, bool)], "rrf").tolist() == \
        [1 / (RRF_K + 1), 1 / (RRF_K + 1), 1 / (RRF_K + 3)]


def test_a_channel_that_barely_separates_cannot_overturn_a_clear_one():
    """Shown puts its target 10 standard deviations above 99 others; said is noise at 1e-3 whose best
    is another video. Standardised fusion keeps the target first every time; positions do not."""
    rng = np.random.default_rng(1)
    kept = {"standard": 0, "rrf": 0}
    for trial in range(50):
        shown = rng.normal(0.2, 0.02, size=100)
        shown[7] = 0.4
        said = rng.normal(0.0, 1e-3, size=100)
        said[7] = said.min()  # the noise channel likes the target least
        for fusion in kept:
            kept[fusion] += fuse_hits([hits(shown), hits(said, channel="said")], k=1, fusion=fusion)[0].id == "v07"
    assert kept["standard"] == 50
    assert kept["rrf"] < 50


def test_a_candidate_one_channel_did_not_return_scores_its_lowest():
    """Standard: the missing score is the channel's lowest returned one (it scores at most that)."""
    shown = np.array([0.9, 0.5, 0.0])  # the third candidate was not returned by shown
    said = np.array([0.0, 0.0, 1.0])
    found = [np.array([True, True, False]), np.ones(3, bool)]
    fused = fuse_scores([shown, said], found, "standard")
    expected = standardised(np.array([0.9, 0.5, 0.5])) + standardised(said)
    np.testing.assert_allclose(fused, expected)
    # rrf: no vote from a channel that did not return it
    np.testing.assert_allclose(fuse_scores([shown, said], found, "rrf"),
                               [1 / 61 + 1 / 62, 1 / 62 + 1 / 62, 1 / 61])


def test_an_unknown_rule_is_one_clear_error():
    with pytest.raises(VideoTextError, match="--fusion 'max': expected one of standard, rrf"):
        check_fusion("max")
