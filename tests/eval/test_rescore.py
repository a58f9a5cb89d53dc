"""Inference-time re-scoring (`videotext.eval.rescore`) on matrices worked by hand.

The temperature / β is 10·ln 2 throughout, so exp(T·s) = 2^(10 s): scores 0.1 … 0.9 give
the powers of two 2^1 … 2^9 and every softmax below is a ratio of small integers.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from videotext.errors import VideoTextError
from videotext.eval.rescore import (
    RESCORERS, activated_targets, dual_softmax, parse_rescore, querybank_norm, querybank_rescored_queries)

T = 10 * math.log(2)

# queries × targets; target 0 is a hub: every query scores it first
HUB = np.array([[0.9, 0.8, 0.1],
                [0.8, 0.2, 0.1],
                [0.7, 0.1, 0.3]])


def test_dual_softmax_by_hand():
    # column softmaxes over the queries: col 0 2^9,2^8,2^7 → 4/7, 2/7, 1/7;
    # col 1 2^8,2^2,2^1 → 128/131, 2/131, 1/131; col 2 2^1,2^1,2^3 → 1/6, 1/6, 2/3
    expected = np.array([[0.9 * 4 / 7, 0.8 * 128 / 131, 0.1 / 6],
                         [0.8 * 2 / 7, 0.2 * 2 / 131, 0.1 / 6],
                         [0.7 * 1 / 7, 0.1 * 1 / 131, 0.3 * 2 / 3]])
    got = dual_softmax(HUB, temperature=T)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    # the hub loses: query 0 now ranks target 1 first (0.78 > 0.51), query 2 target 2 (0.2 > 0.1)
    assert list(HUB.argmax(1)) == [0, 0, 0] and list(got.argmax(1)) == [1, 0, 2]
    # torch in, torch out, same numbers; the input is not modified
    tensor = torch.tensor(HUB, dtype=torch.float32)
    out = dual_softmax(tensor, temperature=T)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64
    np.testing.assert_allclose(out.numpy(), dual_softmax(tensor.numpy(), temperature=T), rtol=1e-12)
    assert torch.equal(tensor, torch.tensor(HUB, dtype=torch.float32))


def test_dual_softmax_keeps_an_all_equal_column_all_equal_and_each_column_in_order():
    sims = np.array([[0.5, 0.9, 0.2],
                     [0.5, 0.1, 0.4],
                     [0.5, 0.3, 0.6]])
    got = dual_softmax(sims, temperature=T)
    np.testing.assert_allclose(got[:, 0], [0.5 / 3] * 3, rtol=1e-12)  # uniform weight 1/3: still a three-way tie
    # col 1: 2^9, 2^1, 2^3 → 512/522, 2/522, 8/522
    np.testing.assert_allclose(got[:, 1], [0.9 * 512 / 522, 0.1 * 2 / 522, 0.3 * 8 / 522], rtol=1e-12)
    for j in range(3):  # non-negative scores: the queries' order inside every column is kept
        assert list(np.argsort(-got[:, j], kind="stable")) == list(np.argsort(-sims[:, j], kind="stable"))
    with pytest.raises(ValueError, match="temperature"):
        dual_softmax(sims, temperature=0)


# the querybank: 4 training queries × the same 3 targets
BANK = np.array([[0.3, 0.1, 0.0],
                 [0.2, 0.1, 0.0],
                 [0.1, 0.2, 0.0],
                 [0.2, 0.1, 0.0]])
TEST = np.array([[0.3, 0.2, 0.1],   # top-1 target 0: activated
                 [0.1, 0.3, 0.2],   # top-1 target 1: activated
                 [0.1, 0.0, 0.4]])  # top-1 target 2: no bank query ranks it first


def test_querybank_norm_by_hand():
    # bank tops: 0, 0, 1, 0 → activated {0, 1}; normalisers Σ_b 2^(10 s_bj): 8+4+2+4 = 18, 2+2+4+2 = 10, 4·1 = 4
    assert list(activated_targets(BANK)) == [True, True, False]
    inverted = np.array([[8 / 18, 4 / 10, 2 / 4],
                         [2 / 18, 8 / 10, 4 / 4],
                         [2 / 18, 1 / 10, 16 / 4]])
    np.testing.assert_allclose(querybank_norm(TEST, BANK, beta=T, dynamic=False), inverted, rtol=1e-12)
    dynamic = querybank_norm(TEST, BANK, beta=T)
    np.testing.assert_allclose(dynamic[:2], inverted[:2], rtol=1e-12)
    # dynamic: query 2's top-1 (target 2) is not activated, so its raw scores stay
    np.testing.assert_array_equal(dynamic[2], TEST[2])
    assert list(querybank_rescored_queries(TEST, BANK)) == [True, True, False]
    # re-scored queries 0 and 1 now rank target 2 first: it is no bank query's favourite (normaliser 4)
    assert list(dynamic.argmax(1)) == [2, 2, 2]
    torch_out = querybank_norm(torch.tensor(TEST), torch.tensor(BANK), beta=T)
    assert isinstance(torch_out, torch.Tensor)
    np.testing.assert_allclose(torch_out.numpy(), dynamic, rtol=1e-12)


def test_querybank_norm_checks_shapes():
    with pytest.raises(ValueError, match="same targets"):
        querybank_norm(TEST, BANK[:, :2])
    with pytest.raises(ValueError, match="empty"):
        querybank_norm(TEST, BANK[:0])


def test_registry_and_names():
    assert set(RESCORERS) == {"dsl", "qbnorm"}
    assert RESCORERS["dsl"].needs == ("test_queries",) and RESCORERS["qbnorm"].needs == ("querybank",)
    assert RESCORERS["qbnorm"].directions == ("t2v",)
    assert "information a single-query search does not have" in RESCORERS["dsl"].uses
    assert RESCORERS["dsl"].label("t2v", 3126) == "dual softmax over all 3126 test queries"
    assert parse_rescore(["dsl", "qbnorm,dsl"]) == ["dsl", "qbnorm"] and parse_rescore("qbnorm") == ["qbnorm"]
    assert parse_rescore(None) == []
    with pytest.raises(VideoTextError, match=r"--rescore csls: unknown \(known: dsl, qbnorm\)"):
        parse_rescore("dsl,csls")


def test_rescored_metrics_of_the_hand_matrices():
    from videotext.eval.evaluate import rescored_metrics

    # captions 0, 1, 2 describe videos 1, 0, 2: the plain ranking finds only caption 1's video first
    encoded = SimpleNamespace(refs=[SimpleNamespace(video_id=v) for v in ("b", "a", "c")], video_ids=["a", "b", "c"])
    sims = torch.tensor(HUB) * (T / 100)  # at temperature 100: the weights of HUB at 10·ln 2, rows scaled alike
    assert list(sims.argmax(1)) == [0, 0, 0]
    dsl = rescored_metrics(encoded, sims, "dsl")
    assert dsl["labels"] == {"t2v": "dual softmax over all 3 test queries",
                             "v2t": "dual softmax over all 3 test videos (the v2t queries)"}
    assert "all 3 test queries" in dsl["uses"] and dsl["settings"] == {"temperature": 100.0}
    # every caption now finds its video first (plain: 1 of 3)
    assert dsl["t2v"]["R1"] == pytest.approx(100.0)
    qb = rescored_metrics(encoded, torch.tensor(TEST), "qbnorm", bank_sims=torch.tensor(BANK))
    assert set(qb) >= {"t2v", "labels", "uses", "settings"} and "v2t" not in qb
    assert qb["settings"] == {"beta": 20.0, "dynamic": True, "k": 1, "bank_size": 4}
    assert qb["t2v"]["rescored_queries"] == 2 and qb["labels"]["t2v"].endswith("2 of 3 queries re-scored")


def test_only_the_multi_caption_protocol_rescores():
    from videotext.eval.protocols import evaluate_split

    coot = SimpleNamespace(protocol="hierarchy", name="coot")
    with pytest.raises(VideoTextError, match=r"--rescore dsl: method 'coot' is evaluated by the 'hierarchy' protocol"):
        evaluate_split(coot, None, None, rescore=["dsl"])
