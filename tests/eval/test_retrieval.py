"""The retrieval metric: hand-computed cases, ties, protocols, NaN, masks, torch, chunks."""
from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from videotext.data.schema import Video, VideoTextDataset
from videotext.eval import retrieval
from videotext.eval.relevance import (
    Relevance,
    as_relevance,
    clip_sentence_relevance,
    dataset_caption_relevance,
    invert_relevance,
    msrvtt_1ka_relevance,
    multi_caption_relevance,
    paragraph_video_relevance,
)
from videotext.eval.retrieval import (
    aggregate_seeds,
    format_mean_std,
    format_table,
    retrieval_metrics,
    retrieval_metrics_both,
)


def reference_ranks(sims: np.ndarray, relevant: list[list[int]]) -> np.ndarray:
    """Plain full-argsort reference (valid without ties): 1 + position of the first
    relevant target in the row sorted by decreasing score."""
    order = np.argsort(-sims, axis=1, kind="stable")  # [n_queries, n_targets]
    ranks = []
    for q, targets in enumerate(relevant):
        is_relevant = np.isin(order[q], list(targets))
        ranks.append(int(np.flatnonzero(is_relevant)[0]) + 1)
    return np.asarray(ranks, dtype=np.float64)


# --- hand-computed cases -------------------------------------------------------------
def test_3x3_one_target_each():
    sims = np.array(
        [
            [0.9, 0.1, 0.5],  # q0 → t0 = 0.9, nothing above            → rank 1
            [0.8, 0.3, 0.7],  # q1 → t1 = 0.3, 0.8 and 0.7 above         → rank 3
            [0.2, 0.6, 0.4],  # q2 → t2 = 0.4, 0.6 above                 → rank 2
        ],
        dtype=np.float32,
    )
    m, ranks = retrieval_metrics(sims, [0, 1, 2], return_ranks=True)
    np.testing.assert_array_equal(ranks, [1, 3, 2])
    assert m["R1"] == pytest.approx(100 / 3)
    assert m["R5"] == m["R10"] == m["R50"] == 100.0
    assert m["MdR"] == 2.0 and m["MnR"] == 2.0
    assert m["geometric_mean"] == pytest.approx((100 / 3 * 100 * 100) ** (1 / 3))
    assert m["n_queries"] == 3


# 4 queries × 5 targets, several relevant targets, ties.
SIMS_4x5 = np.array(
    [
        # q0, relevant {0}: best 0.5; above: t2 (g=1); equal non-relevant: t1, t4 (e=2)
        [0.5, 0.5, 0.9, 0.1, 0.5],
        # q1, relevant {1, 2}: best 0.6 (t2); above: t0 (g=1); equal: t3 (e=1); t1 is relevant, not a competitor
        [0.7, 0.2, 0.6, 0.6, 0.1],
        # q2, relevant {4}: all equal → g=0, e=4
        [0.3, 0.3, 0.3, 0.3, 0.3],
        # q3, relevant {0, 3}: best 0.8 (t3); g=0; equal: t1 (e=1); t0 = 0.4 is relevant, not a competitor
        [0.4, 0.8, 0.1, 0.8, 0.2],
    ]
)
RELEVANT_4x5 = [[0], [1, 2], [4], [0, 3]]


def test_4x5_optimistic():
    # ranks = g + 1 = [2, 2, 1, 1]
    m, ranks = retrieval_metrics(SIMS_4x5, RELEVANT_4x5, ties="optimistic", return_ranks=True)
    np.testing.assert_array_equal(ranks, [2, 2, 1, 1])
    assert m["R1"] == 50.0 and m["R5"] == 100.0
    assert m["MdR"] == 1.5 and m["MnR"] == 1.5


def test_4x5_pessimistic():
    # ranks = g + e + 1 = [4, 3, 5, 2]
    m, ranks = retrieval_metrics(SIMS_4x5, RELEVANT_4x5, ties="pessimistic", ks=(1, 2, 3, 5), return_ranks=True)
    np.testing.assert_array_equal(ranks, [4, 3, 5, 2])
    assert m["R1"] == 0.0 and m["R2"] == 25.0 and m["R3"] == 50.0 and m["R5"] == 100.0
    assert m["MdR"] == 3.5 and m["MnR"] == 3.5


def test_4x5_average():
    # ranks = g + 1 + e/2 = [3, 2.5, 3, 1.5]; MdR = median = 2.75, MnR = 10/4
    # P(rank <= K) = clip((K - g) / (e + 1), 0, 1):
    #   K=1: [0/3, 0/2, 1/5, 1/2]      → mean 0.7/4   = 17.5 %
    #   K=2: [1/3, 1/2, 2/5, 1]        → mean 2.2333/4 = 55.83 %
    #   K=3: [2/3, 1, 3/5, 1]          → mean 3.2667/4 = 81.67 %
    #   K=5: all 1                      → 100 %
    m, ranks = retrieval_metrics(SIMS_4x5, RELEVANT_4x5, ks=(1, 2, 3, 5), return_ranks=True)
    np.testing.assert_array_equal(ranks, [3, 2.5, 3, 1.5])
    assert m["R1"] == pytest.approx(17.5)
    assert m["R2"] == pytest.approx(100 * (1 / 3 + 1 / 2 + 2 / 5 + 1) / 4)
    assert m["R3"] == pytest.approx(100 * (2 / 3 + 1 + 3 / 5 + 1) / 4)
    assert m["R5"] == 100.0
    assert m["MdR"] == 2.75 and m["MnR"] == 2.5


@pytest.mark.parametrize("n", [1, 2, 7])
def test_all_equal_matrix(n):
    sims = np.full((n, n), 0.25, dtype=np.float32)
    relevant = np.arange(n)
    opt = retrieval_metrics(sims, relevant, ties="optimistic")
    pes = retrieval_metrics(sims, relevant, ties="pessimistic")
    avg = retrieval_metrics(sims, relevant, ties="average")
    assert opt["R1"] == 100.0 and opt["MnR"] == opt["MdR"] == 1.0
    assert pes["MnR"] == pes["MdR"] == n
    assert pes["R1"] == (100.0 if n == 1 else 0.0)
    assert avg["MnR"] == avg["MdR"] == (n + 1) / 2
    assert avg["R1"] == pytest.approx(100 / n)
    assert avg["R5"] == pytest.approx(100 * min(5, n) / n)


def test_ties_at_the_boundary_of_k():
    # relevant t0 = 0.5; three non-relevant above (g=3), four equal (e=4), one below.
    # The rank is uniform on 4..8.
    sims = np.array([[0.5, 0.9, 0.9, 0.9, 0.5, 0.5, 0.5, 0.5, 0.1]])
    avg = retrieval_metrics(sims, [0], ks=(3, 4, 5, 8))
    assert avg["R3"] == 0.0  # K < g + 1
    assert avg["R4"] == pytest.approx(100 * 1 / 5)  # only the first of the 5 tie orders
    assert avg["R5"] == pytest.approx(100 * 2 / 5)  # (K - g) / (e + 1)
    assert avg["R8"] == 100.0  # K = g + e + 1: every order
    opt = retrieval_metrics(sims, [0], ties="optimistic", ks=(3, 4, 8))
    assert (opt["R3"], opt["R4"], opt["MnR"]) == (0.0, 100.0, 4.0)
    pes = retrieval_metrics(sims, [0], ties="pessimistic", ks=(5, 7, 8))
    assert (pes["R7"], pes["R8"], pes["MnR"]) == (0.0, 100.0, 8.0)


# --- multi-caption protocol, both directions -------------------------------------------
CAPTION_VIDEO_IDS = ["a", "a", "b", "c", "c"]
VIDEO_IDS = ["a", "b", "c"]
SIMS_5x3 = np.array(
    [
        [0.9, 0.1, 0.2],  # c0 (a): rank 1
        [0.3, 0.8, 0.1],  # c1 (a): b above → rank 2
        [0.2, 0.7, 0.6],  # c2 (b): rank 1
        [0.5, 0.4, 0.45],  # c3 (c): a above → rank 2
        [0.1, 0.2, 0.3],  # c4 (c): rank 1
    ]
)
# v2t = SIMS_5x3.T:
#   a: [0.9, 0.3, 0.2, 0.5, 0.1], relevant {c0, c1}: best 0.9         → rank 1
#   b: [0.1, 0.8, 0.7, 0.4, 0.2], relevant {c2}: c1 = 0.8 above        → rank 2
#   c: [0.2, 0.1, 0.6, 0.45, 0.3], relevant {c3, c4}: best 0.45, c2 above → rank 2


def test_multi_caption_both_directions():
    relevant = multi_caption_relevance(CAPTION_VIDEO_IDS, VIDEO_IDS)
    np.testing.assert_array_equal(relevant, [0, 0, 1, 2, 2])
    both = retrieval_metrics_both(SIMS_5x3, relevant)
    t2v, v2t = both["t2v"], both["v2t"]
    assert t2v["R1"] == 60.0 and t2v["MdR"] == 1.0 and t2v["MnR"] == pytest.approx(1.4)
    assert t2v["n_queries"] == 5
    assert v2t["R1"] == pytest.approx(100 / 3) and v2t["MdR"] == 2.0 and v2t["MnR"] == pytest.approx(5 / 3)
    assert v2t["n_queries"] == 3


def test_invert_relevance():
    inverse = invert_relevance([0, 0, 1, 2, 2], n_targets=3)
    assert inverse.to_lists() == [[0, 1], [2], [3, 4]]
    assert invert_relevance([[0, 2], [], [2]], n_targets=4).to_lists() == [[0], [], [0, 2], []]


def test_masked_queries():
    relevant = multi_caption_relevance(CAPTION_VIDEO_IDS, VIDEO_IDS)
    mask = np.array([True, False, True, True, True])  # c1 has no caption text
    m, ranks = retrieval_metrics(SIMS_5x3, relevant, query_mask=mask, return_ranks=True)
    np.testing.assert_array_equal(ranks, [1, np.nan, 1, 2, 1])
    assert m["R1"] == 75.0 and m["n_queries"] == 4
    both = retrieval_metrics_both(SIMS_5x3, relevant, query_mask=mask)
    # v2t without c1 as a candidate: b's c2 = 0.7 is now the best → ranks [1, 1, 2]
    assert both["v2t"]["R1"] == pytest.approx(200 / 3) and both["v2t"]["MnR"] == pytest.approx(4 / 3)
    # all captions of video c skipped → c is skipped as a v2t query
    mask_c = np.array([True, True, True, False, False])
    v2t = retrieval_metrics_both(SIMS_5x3, relevant, query_mask=mask_c)["v2t"]
    assert v2t["n_queries"] == 2 and v2t["MnR"] == 1.5  # a → 1, b → 2


def test_target_mask_removes_competitors():
    # q0 relevant t0 = 0.5, t1 = 0.9 above it; removing t1 gives rank 1
    sims = np.array([[0.5, 0.9, 0.1]])
    assert retrieval_metrics(sims, [0])["MnR"] == 2.0
    assert retrieval_metrics(sims, [0], target_mask=np.array([True, False, True]))["MnR"] == 1.0


def test_nan_scores_count_as_minus_inf():
    sims = np.array(
        [
            [np.nan, 0.5, 0.2],  # relevant NaN = -inf: two scores above → rank 3
            [0.3, np.nan, 0.2],  # a NaN competitor is never above → rank 1
            [np.nan, np.nan, 0.1],  # best = -inf: 0.1 above (g=1), NaN t1 ties (e=1)
            [np.nan, -np.inf, 0.1],  # same with a -inf competitor
        ]
    )
    _, opt = retrieval_metrics(sims, [0, 0, 0, 0], ties="optimistic", return_ranks=True)
    _, pes = retrieval_metrics(sims, [0, 0, 0, 0], ties="pessimistic", return_ranks=True)
    _, avg = retrieval_metrics(sims, [0, 0, 0, 0], return_ranks=True)
    np.testing.assert_array_equal(opt, [3, 1, 2, 2])
    np.testing.assert_array_equal(pes, [3, 1, 3, 3])
    np.testing.assert_array_equal(avg, [3, 1, 2.5, 2.5])
    # torch path (bf16 is not handed to numpy), one row per chunk
    _, chunked = retrieval_metrics(torch.tensor(sims).bfloat16(), [0, 0, 0, 0], chunk_size=1, return_ranks=True)
    np.testing.assert_array_equal(chunked, avg)


def test_query_without_relevant_target_raises_unless_masked():
    sims = np.eye(3)
    with pytest.raises(ValueError, match="query 1 has no relevant target"):
        retrieval_metrics(sims, [[0], [], [2]])
    with pytest.raises(ValueError, match="query 2 has no relevant target"):
        retrieval_metrics(sims, np.array([0, 1, -1]))
    m = retrieval_metrics(sims, [[0], [], [2]], query_mask=np.array([True, False, True]))
    assert m["R1"] == 100.0 and m["n_queries"] == 2
    with pytest.raises(ValueError, match="v2t"):  # video 2 has no caption at all
        retrieval_metrics_both(np.eye(3), [0, 1, 1])


def test_bad_inputs_raise():
    sims = np.eye(3)
    with pytest.raises(ValueError, match="3 queries"):
        retrieval_metrics(sims, [0, 1])
    with pytest.raises(ValueError, match="target 5"):
        retrieval_metrics(sims, [0, 1, 5])
    with pytest.raises(ValueError, match="ties"):
        retrieval_metrics(sims, [0, 1, 2], ties="random")
    with pytest.raises(ValueError, match="0/1"):
        retrieval_metrics(sims, np.array([[0, 2, 0], [1, 0, 0], [0, 0, 1]]))
    with pytest.raises(ValueError, match="query_mask"):
        retrieval_metrics(sims, [0, 1, 2], query_mask=[1, 1, 0])


def test_relevance_forms_agree():
    scipy_sparse = pytest.importorskip("scipy.sparse")
    dense = np.zeros((4, 5), dtype=bool)
    for q, targets in enumerate(RELEVANT_4x5):
        dense[q, targets] = True
    forms = [
        RELEVANT_4x5,
        [set(t) for t in RELEVANT_4x5],
        [[0, 0], [2, 1], 4, np.array([3, 0])],  # ints, arrays, duplicates
        dense,
        dense.astype(np.int8),
        torch.from_numpy(dense),
        scipy_sparse.csr_matrix(dense),
        as_relevance(RELEVANT_4x5, 4, 5),
    ]
    expected = retrieval_metrics(SIMS_4x5, RELEVANT_4x5)
    for form in forms:
        assert as_relevance(form, 4, 5).to_lists() == RELEVANT_4x5
        assert retrieval_metrics(SIMS_4x5, form) == expected
    # same-length rows must not be mistaken for a matrix
    assert as_relevance([[0, 1], [1, 2]], 2, 3).to_lists() == [[0, 1], [1, 2]]
    assert isinstance(as_relevance(np.array([2, 0]), 2, 3), Relevance)


# --- torch, chunks, property test ------------------------------------------------------
def _tied_matrix(seed: int, n_queries: int = 40, n_targets: int = 13) -> tuple[np.ndarray, list[list[int]]]:
    rng = np.random.default_rng(seed)
    sims = np.round(rng.random((n_queries, n_targets)) * 4) / 4  # 5 levels: many ties
    relevant = [sorted(rng.choice(n_targets, size=rng.integers(1, 4), replace=False).tolist())
                for _ in range(n_queries)]
    return sims.astype(np.float32), relevant


@pytest.mark.parametrize("ties", ["optimistic", "pessimistic", "average"])
def test_torch_input_equals_numpy(ties):
    sims, relevant = _tied_matrix(0)
    mask = np.ones(len(sims), dtype=bool)
    mask[[3, 10, 11]] = False
    ref, ref_ranks = retrieval_metrics(sims, relevant, ties, mask, return_ranks=True)
    for tensor in (torch.from_numpy(sims), torch.from_numpy(sims).to(torch.bfloat16),
                   torch.from_numpy(sims).double()):
        m, ranks = retrieval_metrics(tensor, relevant, ties, torch.from_numpy(mask), return_ranks=True)
        assert m == ref
        np.testing.assert_array_equal(ranks, ref_ranks)
    both_np = retrieval_metrics_both(sims, relevant, ties)
    assert retrieval_metrics_both(torch.from_numpy(sims), relevant, ties) == both_np
    assert retrieval_metrics_both(torch.from_numpy(sims).bfloat16(), relevant, ties) == both_np  # exact: k/4


@pytest.mark.parametrize("ties", ["optimistic", "pessimistic", "average"])
def test_chunk_sizes_give_identical_results(ties):
    sims, relevant = _tied_matrix(1)
    target_mask = np.arange(sims.shape[1]) != 4
    # skip every 5th query, and those whose only relevant target is the removed one
    mask = (np.arange(len(sims)) % 5 != 2) & np.array([targets != [4] for targets in relevant])
    results = [
        retrieval_metrics(sims, relevant, ties, mask, ks=(1, 2, 3, 5, 10), chunk_size=chunk,
                          target_mask=target_mask, return_ranks=True)
        for chunk in (1, 7, 10_000, None)
    ]
    results.append(retrieval_metrics(torch.from_numpy(sims).bfloat16(), relevant, ties, mask, ks=(1, 2, 3, 5, 10),
                                     chunk_size=7, target_mask=target_mask, return_ranks=True))
    for m, ranks in results[1:]:
        assert m == results[0][0]
        np.testing.assert_array_equal(ranks, results[0][1])


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_queries=st.integers(1, 30),
    n_targets=st.integers(1, 60),
    chunk_size=st.sampled_from([1, 3, None]),
)
def test_tie_free_matrices_match_full_argsort(seed, n_queries, n_targets, chunk_size):
    rng = np.random.default_rng(seed)
    sims = rng.standard_normal((n_queries, n_targets))  # continuous: no ties
    relevant = [rng.choice(n_targets, size=rng.integers(1, min(3, n_targets) + 1), replace=False).tolist()
                for _ in range(n_queries)]
    expected = reference_ranks(sims, relevant)
    for ties in ("optimistic", "pessimistic", "average"):
        m, ranks = retrieval_metrics(sims, relevant, ties, chunk_size=chunk_size, return_ranks=True)
        np.testing.assert_array_equal(ranks, expected)
        for k in (1, 5, 10, 50):
            assert m[f"R{k}"] == pytest.approx(100 * np.mean(expected <= k))
        assert m["MdR"] == np.median(expected) and m["MnR"] == pytest.approx(expected.mean())


def test_memory_is_bounded_by_the_chunk():
    sims = np.random.default_rng(0).random((20_000, 500), dtype=np.float32)  # 40 MB
    tracemalloc.start()
    try:
        retrieval_metrics(sims, np.arange(20_000) % 500)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < sims.nbytes / 4  # a full argsort would need 2× the input for int64 indices


# --- counting kernels against a brute-force count and the CE / MMT sort ------------------
def brute_force_metrics(sims: np.ndarray, relevant: list[list[int]], ties: str, ks=(1, 5, 10, 50),
                        query_mask=None, target_mask=None) -> tuple[dict, np.ndarray]:
    """The module docstring's definition, one query at a time: g (non-relevant targets
    above the best relevant score) and e (equal to it), NaN as -inf."""
    scores = np.where(np.isnan(sims.astype(np.float64)), -np.inf, sims.astype(np.float64))
    keep = np.ones(sims.shape[1], dtype=bool) if target_mask is None else target_mask
    queries = np.arange(len(sims)) if query_mask is None else np.flatnonzero(query_mask)
    g, e = [], []
    for q in queries:
        is_relevant = np.zeros(sims.shape[1], dtype=bool)
        is_relevant[[t for t in relevant[q] if keep[t]]] = True
        best = scores[q, is_relevant].max()
        others = scores[q, keep & ~is_relevant]
        g.append(int((others > best).sum()))
        e.append(int((others == best).sum()))
    greater, equal = np.asarray(g, dtype=np.int64), np.asarray(e, dtype=np.int64)
    better, tied = {"optimistic": (greater, 0 * equal), "pessimistic": (greater + equal, 0 * equal),
                    "average": (greater, equal)}[ties]
    ranks = better + 1.0 + tied / 2.0
    metrics = {f"R{k}": float(100.0 * np.clip((k - better) / (tied + 1.0), 0.0, 1.0).mean())
               for k in sorted(set(ks) | {1, 5, 10})}
    metrics.update(MdR=float(np.median(ranks)), MnR=float(ranks.mean()))
    all_ranks = np.full(len(sims), np.nan)
    all_ranks[queries] = ranks
    return metrics, all_ranks


def _kernel_case(seed: int, n_queries: int, n_targets: int, tied: bool) -> tuple[np.ndarray, list[list[int]]]:
    rng = np.random.default_rng(seed)
    if tied:
        sims = np.round(rng.random((n_queries, n_targets)) * 6) / 6  # 7 levels
        sims[rng.random(sims.shape) < 0.05] = np.nan
        sims[rng.random(sims.shape) < 0.05] = -np.inf
        sims[0] = np.nan  # a query whose best relevant score is NaN (= -inf)
    else:  # each row a permutation of distinct values, exact in float16 too
        sims = rng.permuted(np.tile(np.arange(n_targets) / 1024, (n_queries, 1)), axis=1)
    relevant = [sorted(rng.choice(n_targets, size=rng.integers(1, min(3, n_targets) + 1), replace=False).tolist())
                for _ in range(n_queries)]
    return sims, relevant


@pytest.mark.parametrize("tied", [False, True], ids=["tie-free", "tied"])
@pytest.mark.parametrize("n_targets", [1, 8, 13, 300])
@pytest.mark.parametrize("layout", ["C", "transposed", "strided"])
def test_counting_kernels_match_brute_force(monkeypatch, tied, n_targets, layout):
    """Every CPU kernel (row blocks, column blocks for ``x.T``, gathered rows), block
    boundaries, dtypes, masks: R@K, MdR, MnR and ranks equal to a brute-force count."""
    sims, relevant = _kernel_case(n_targets, 23, n_targets, tied)
    rng = np.random.default_rng(1)
    query_mask = rng.random(len(sims)) < 0.8
    target_mask = np.ones(n_targets, dtype=bool)
    if n_targets > 1:
        target_mask[rng.choice(n_targets, size=max(1, n_targets // 5), replace=False)] = False
    relevant_kept = [r if target_mask[r].any() else r + [int(np.flatnonzero(target_mask)[0])] for r in relevant]
    for dtype in (np.float64, np.float32, np.float16, np.int32):
        typed = (np.nan_to_num(sims, nan=-7, neginf=-9) * 6).astype(dtype) if dtype == np.int32 else sims.astype(dtype)
        if layout == "transposed":
            typed = np.ascontiguousarray(typed.T).T  # column-major, as v2t passes sims.T
        elif layout == "strided":
            wide = np.zeros((len(typed), 2 * n_targets), dtype=dtype)
            wide[:, ::2] = typed
            typed = wide[:, ::2]
        for block_elements in (1 << 18, 40):  # one block; many, some of them partial
            monkeypatch.setattr(retrieval, "_BLOCK_ELEMENTS", block_elements)
            for ties in ("optimistic", "pessimistic", "average"):
                for kwargs, rel in (({}, relevant), ({"query_mask": query_mask}, relevant),
                                    ({"query_mask": query_mask, "target_mask": target_mask}, relevant_kept)):
                    expected, expected_ranks = brute_force_metrics(typed, rel, ties, **kwargs)
                    m, ranks = retrieval_metrics(typed, rel, ties, return_ranks=True, **kwargs)
                    np.testing.assert_array_equal(ranks, expected_ranks)
                    assert {k: m[k] for k in expected} == expected, (dtype, block_elements, ties, kwargs)


def test_popcount_fallback_and_wide_rows(monkeypatch):
    """numpy < 2.0 has no bitwise_count; rows of 2^16 targets and more count in uint64."""
    sims, relevant = _kernel_case(5, 9, 300, tied=True)
    expected = retrieval_metrics(sims, relevant)
    monkeypatch.setattr(retrieval, "_BITWISE_COUNT", None)
    assert retrieval_metrics(sims, relevant) == expected
    monkeypatch.undo()
    wide = np.tile(np.arange(70_000, dtype=np.float32), (3, 1))  # [3, 70 000]
    wide[1] = 0.0  # all tied
    relevant = [[69_999], [5], [0]]
    for ties in ("optimistic", "pessimistic", "average"):
        expected, expected_ranks = brute_force_metrics(wide, relevant, ties)
        m, ranks = retrieval_metrics(wide, relevant, ties, return_ranks=True)
        np.testing.assert_array_equal(ranks, expected_ranks)
        assert {k: m[k] for k in expected} == expected


def ce_mmt_t2v(sims: np.ndarray) -> dict[str, float]:
    """Text→video metric as the CE / MMT code computes it (``model/metric.py``): sort each
    row of the negated matrix, find where the correct video's distance lands (query i's
    video is i // (n_queries // n_videos)) and average the positions of equal distances."""
    n_queries, n_videos = sims.shape
    dists = -sims
    ordered = np.sort(dists, axis=1)
    correct = dists[np.arange(n_queries), np.arange(n_queries) // (n_queries // n_videos)][:, None]
    rows, cols = np.nonzero(ordered == correct)
    cols = np.bincount(rows, weights=cols, minlength=n_queries) / np.bincount(rows, minlength=n_queries)
    out = {f"R{k}": 100.0 * float(np.sum(cols < k)) / n_queries for k in (1, 5, 10, 50)}
    out.update(MdR=float(np.median(cols) + 1), MnR=float(np.mean(cols) + 1))
    return out


@pytest.mark.parametrize("tied", [False, True], ids=["tie-free", "tied"])
def test_equals_the_ce_mmt_sort(tied):
    """On a multi-caption layout (20 captions a video, as MSR-VTT's full test), the
    "average" ranks are the CE / MMT averaged positions: MdR and MnR agree with and
    without ties, and every R@K agrees without ties. (With ties R@K differs by design:
    the CE / MMT code thresholds the averaged position, this metric is the expected recall.)"""
    rng = np.random.default_rng(3)
    n_videos, per_video = 60, 20
    if tied:
        sims = (np.round(rng.random((n_videos * per_video, n_videos)) * 8) / 8).astype(np.float32)
    else:
        sims = rng.permuted(np.tile(np.arange(n_videos, dtype=np.float32) / n_videos, (n_videos * per_video, 1)),
                            axis=1)
    relevant = np.arange(n_videos * per_video) // per_video
    ours, ref = retrieval_metrics(sims, relevant, ks=(1, 5, 10, 50)), ce_mmt_t2v(sims)
    assert ours["MdR"] == ref["MdR"]
    # equal up to the order of float operations (mean vs sum / n)
    assert ours["MnR"] == pytest.approx(ref["MnR"], rel=1e-12)
    if not tied:
        assert {k: ours[k] for k in ("R1", "R5", "R10", "R50")} == pytest.approx(
            {k: ref[k] for k in ("R1", "R5", "R10", "R50")}, rel=1e-12)
    else:
        assert ours["R1"] != pytest.approx(ref["R1"])  # the matrix does have ties at rank 1


# --- protocols ------------------------------------------------------------------------
def test_protocol_helpers():
    np.testing.assert_array_equal(msrvtt_1ka_relevance(4), [0, 1, 2, 3])
    np.testing.assert_array_equal(paragraph_video_relevance(["v2", "v0"], ["v0", "v1", "v2"]), [2, 0])
    clips = [("v0", 0), ("v0", 1), ("v1", 0)]
    sentences = [["v1", 0], ("v0", 1), ("v0", 0), ("v0", 1)]  # lists (from JSON) work too
    np.testing.assert_array_equal(clip_sentence_relevance(sentences, clips), [2, 1, 0, 1])
    with pytest.raises(ValueError, match="query 1: id 'zz'"):
        multi_caption_relevance(["a", "zz"], ["a", "b"])
    with pytest.raises(ValueError, match="appears twice"):
        multi_caption_relevance(["a"], ["a", "a"])


def test_dataset_caption_relevance():
    dataset = VideoTextDataset(
        "tiny",
        [Video("v0", captions=["a red ball", "a ball"]), Video("v1", captions=[]), Video("v2", captions=["x"])],
    )
    relevant, refs = dataset_caption_relevance(dataset)
    np.testing.assert_array_equal(relevant, [0, 0, 2])
    assert [r.text for r in refs] == ["a red ball", "a ball", "x"]
    relevant, refs = dataset_caption_relevance(dataset, ["v2", "v0"])
    np.testing.assert_array_equal(relevant, [1, 1, 0])


# --- reports --------------------------------------------------------------------------
def test_aggregate_seeds_and_format():
    runs = [{"R1": 40.0, "MdR": 2.0, "n_queries": 10}, {"R1": 42.0, "MdR": 2.0, "n_queries": 10},
            {"R1": 44.0, "MdR": 3.0, "n_queries": 10}]
    agg = aggregate_seeds(runs)
    assert agg["R1"] == {"mean": 42.0, "std": 2.0, "n": 3}  # sample std (ddof=1)
    assert agg["MdR"]["std"] == pytest.approx(math.sqrt(1 / 3))
    assert format_mean_std(agg["R1"]) == "42.0 ± 2.0"
    assert format_mean_std(42.123, 0.345, digits=2) == "42.12 ± 0.34"
    single = aggregate_seeds(runs[:1])
    assert single["R1"] == {"mean": 40.0, "std": 0.0, "n": 1} and format_mean_std(single["R1"]) == "40.0"
    nested = aggregate_seeds([{"t2v": runs[0], "v2t": runs[1]}, {"t2v": runs[2], "v2t": runs[1]}])
    assert nested["t2v"]["R1"]["mean"] == 42.0 and nested["v2t"]["R1"]["std"] == 0.0


def test_format_table():
    both = retrieval_metrics_both(SIMS_5x3, [0, 0, 1, 2, 2])
    table = format_table(both)
    lines = table.splitlines()
    assert lines[0] == "|  | R@1 | R@5 | R@10 | R@50 | MdR | MnR |"
    assert lines[2] == "| t2v | 60.0 | 100.0 | 100.0 | 100.0 | 1.0 | 1.4 |"
    assert lines[3] == "| v2t | 33.3 | 100.0 | 100.0 | 100.0 | 2.0 | 1.7 |"
    agg = aggregate_seeds([both, both])
    assert "60.0 ± 0.0" in format_table(agg, style="plain").splitlines()[1]


@pytest.mark.parametrize("tied", [False, True], ids=["tie-free", "tied"])
def test_threaded_row_counting_matches_brute_force(monkeypatch, tied):
    """A large matrix is counted by several threads, each a run of row blocks (here forced on a
    small one: 3 threads over many blocks of 2 rows, the last run shorter)."""
    sims, relevant = _kernel_case(300, 41, 300, tied)
    monkeypatch.setattr(retrieval, "_THREADED_ELEMENTS", 1)
    monkeypatch.setattr(retrieval, "counting_threads", lambda: 3)
    monkeypatch.setattr(retrieval, "_BLOCK_ELEMENTS", 600)
    mask = np.random.default_rng(2).random(len(sims)) < 0.7
    for ties in ("optimistic", "pessimistic", "average"):
        for kwargs in ({}, {"query_mask": mask}):
            expected, expected_ranks = brute_force_metrics(sims.astype(np.float32), relevant, ties, **kwargs)
            m, ranks = retrieval_metrics(sims.astype(np.float32), relevant, ties, return_ranks=True, **kwargs)
            np.testing.assert_array_equal(ranks, expected_ranks)
            assert {k: m[k] for k in expected} == expected
