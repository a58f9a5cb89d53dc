"""The one retrieval metric of the project: R@K, MdR, MnR for every method and protocol.

`retrieval_metrics(sims, relevant)` ranks, for every query (a row of `sims`), its
best-scoring relevant target among all targets. `relevant` is always explicit — one
target index per query, a list of target sets, or a 0/1 matrix — and never inferred
from the matrix shape. Every protocol (MSR-VTT 1k-A, the full multi-caption test,
paragraph↔video, clip↔sentence) is a way of building `relevant` (see
`videotext.eval.relevance`), not another metric.

Rank definition (1-based). Let ``best`` be the highest score among a query's relevant
targets, ``g`` the number of *non-relevant* targets scoring strictly more than ``best``
and ``e`` the number of non-relevant targets scoring exactly ``best``. Other relevant
targets are never competitors. Then

- ``ties="optimistic"``:  rank = g + 1 (ties broken in favour of the relevant target);
- ``ties="pessimistic"``: rank = g + e + 1 (ties broken against it);
- ``ties="average"``:     ties broken uniformly at random, so the rank is uniform on
  g+1 … g+e+1. The reported rank is its expectation g + 1 + e/2, and a query counts
  towards R@K with the *probability* that its rank is <= K,
  ``clip((K - g) / (e + 1), 0, 1)`` — i.e. R@K is the expected recall over random
  tie orderings. Without ties all three modes agree with a plain sort.

NaN scores count as -inf (a model that outputs NaN for a pair ranks it last; a NaN
best relevant score ties with every other NaN/-inf score). Recalls are in percent;
MdR is the median and MnR the mean of the per-query ranks.

The metric counts instead of sorting: each query's scores are compared against its
best relevant score (two comparisons, two counts), never sorted. On CPU the matrix is
read once, in cache-sized blocks of queries (~256k elements) that stay in cache for
both comparisons; the 0/1 flags are counted 8 at a time as 64-bit popcounts. A
transposed matrix (``sims.T`` of a C-ordered one, as v2t passes) is read along its
memory rows instead, blocks of targets against every query at once. Memory beyond
the input is O(block × n_targets) and no float64 copy of the matrix is made, so a
59 800 × 2 990 matrix costs a few MB extra (``bench/metrics.py`` times it against the
sort of the CE / MMT code). Torch tensors are counted on their own device in their
own dtype, in chunks of ~4M elements (CPU tensors other than bfloat16 are read
through numpy, sharing memory, which counts faster).
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Iterable, Literal, Mapping, Sequence, overload

import numpy as np

from videotext.eval.relevance import Relevance, as_relevance, invert_relevance, is_tensor

TIE_MODES = ("optimistic", "pessimistic", "average")
DEFAULT_KS = (1, 5, 10, 50)
#: Result-table columns in the papers' order, (metric key, header): every table of the project uses these.
TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("R1", "R@1"), ("R5", "R@5"), ("R10", "R@10"), ("R50", "R@50"), ("MdR", "MdR"), ("MnR", "MnR"))
# matrix elements compared at once on CPU: a float32 block and its flags stay in L2
_BLOCK_ELEMENTS = 1 << 18
# matrix elements of one chunk of a tensor on its device ([chunk, n_targets])
_TORCH_CHUNK_ELEMENTS = 1 << 22
_BITWISE_COUNT = getattr(np, "bitwise_count", None)  # numpy >= 2.0: popcount
# matrices of at least this many elements are counted on several threads (a few ms to start them)
_THREADED_ELEMENTS = 1 << 23


# --- the metric ------------------------------------------------------------------------
@overload
def retrieval_metrics(sims: Any, relevant: Any, ties: str = ..., query_mask: Any = ..., ks: Sequence[int] = ...,
                      chunk_size: int | None = ..., target_mask: Any = ...,
                      return_ranks: Literal[False] = ...) -> dict[str, float]: ...


@overload
def retrieval_metrics(sims: Any, relevant: Any, ties: str = ..., query_mask: Any = ..., ks: Sequence[int] = ...,
                      chunk_size: int | None = ..., target_mask: Any = ...,
                      *, return_ranks: Literal[True]) -> tuple[dict[str, float], np.ndarray]: ...


def retrieval_metrics(
    sims: Any,
    relevant: Any,
    ties: str = "average",
    query_mask: Any = None,
    ks: Sequence[int] = DEFAULT_KS,
    chunk_size: int | None = None,
    target_mask: Any = None,
    return_ranks: bool = False,
) -> dict[str, float] | tuple[dict[str, float], np.ndarray]:
    """R@K (percent), MdR, MnR and the geometric mean of R@1/5/10 of a score matrix.

    Args:
        sims: ``[n_queries, n_targets]`` scores, higher = better (numpy array or torch
            tensor, any float dtype, any device). NaN counts as -inf.
        relevant: each query's correct target(s), any form `videotext.eval.relevance` accepts.
        ties: "average" (expected rank and expected R@K under random tie-breaking),
            "optimistic" or "pessimistic"; see the module docstring.
        query_mask: bool ``[n_queries]``; False skips the query (e.g. a missing caption).
        ks: the K of the R@K keys; R1, R5 and R10 are always computed (geometric mean).
        chunk_size: queries compared at once; None picks a cache-sized block on CPU
            (~256k matrix elements) and ~4M elements for a tensor on an accelerator.
            A column-major matrix (``x.T``) is read in blocks of targets instead.
        target_mask: bool ``[n_targets]``; False removes the target from the ranking
            (it is neither a competitor nor a relevant target).
        return_ranks: also return the per-query ranks, float64 ``[n_queries]``, NaN
            for skipped queries (for rank histograms).

    Returns:
        ``{"R1", "R5", "R10", "R50", ..., "MdR", "MnR", "geometric_mean", "n_queries"}``
        (and the ranks when `return_ranks`).

    Raises:
        ValueError: a query that is not skipped has no relevant target, or shapes,
            indices or `ties` are wrong.
    """
    if ties not in TIE_MODES:
        raise ValueError(f"ties={ties!r}: expected one of {TIE_MODES}")
    if len(getattr(sims, "shape", ())) != 2:
        sims = np.asarray(sims)
        if sims.ndim != 2:
            raise ValueError(f"sims must be 2-D [n_queries, n_targets], got shape {sims.shape}")
    n_queries, n_targets = (int(s) for s in sims.shape)
    rel = as_relevance(relevant, n_queries, n_targets)
    keep_query = _as_mask(query_mask, n_queries, "query_mask")
    keep_target = _as_mask(target_mask, n_targets, "target_mask")
    if keep_target is not None:  # removed targets can not be relevant either
        rel = rel.restrict(keep_targets=keep_target)

    queries = np.arange(n_queries) if keep_query is None else np.flatnonzero(keep_query)
    if len(queries) == 0:
        raise ValueError("no query to evaluate: query_mask is all False (or sims has no rows)")
    missing = queries[rel.counts[queries] == 0]
    if len(missing):
        raise ValueError(
            f"query {int(missing[0])} has no relevant target ({len(missing)} such queries); "
            "fix `relevant` or skip them with query_mask"
        )

    greater, equal = _count_competitors(sims, rel, queries, chunk_size, keep_target)
    if ties == "optimistic":
        better, tied = greater, np.zeros_like(equal)
    elif ties == "pessimistic":
        better, tied = greater + equal, np.zeros_like(equal)
    else:
        better, tied = greater, equal
    ranks = better + 1.0 + tied / 2.0  # [n_evaluated] float64

    metrics: dict[str, float] = {}
    for k in sorted(set(int(k) for k in ks) | {1, 5, 10}):
        hit = np.clip((k - better) / (tied + 1.0), 0.0, 1.0)  # P(rank <= k)
        metrics[f"R{k}"] = float(100.0 * hit.mean())
    metrics["MdR"] = float(np.median(ranks))
    metrics["MnR"] = float(ranks.mean())
    metrics["geometric_mean"] = float((metrics["R1"] * metrics["R5"] * metrics["R10"]) ** (1.0 / 3.0))
    metrics["n_queries"] = int(len(queries))
    if not return_ranks:
        return metrics
    all_ranks = np.full(n_queries, np.nan)
    all_ranks[queries] = ranks
    return metrics, all_ranks


def _as_mask(mask: Any, n: int, name: str) -> np.ndarray | None:
    if mask is None:
        return None
    if is_tensor(mask):
        mask = mask.detach().cpu().numpy()
    mask = np.asarray(mask)
    if mask.shape != (n,) or mask.dtype != bool:
        raise ValueError(f"{name} must be a bool array of shape ({n},), got {mask.dtype} {mask.shape}")
    return mask


def _count_competitors(
    sims: Any,
    rel: Relevance,
    queries: np.ndarray,  # [n_evaluated] sorted row indices
    chunk_size: int | None,
    keep_target: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per evaluated query: #non-relevant targets scoring > and == its best relevant score."""
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    is_torch = is_tensor(sims)
    if is_torch:
        sims = sims.detach()
        if sims.device.type == "cpu" and sims.dtype != _torch().bfloat16:
            sims, is_torch = sims.numpy(), False  # shares memory; numpy counts faster on CPU
    removed = None if keep_target is None or keep_target.all() else np.flatnonzero(~keep_target)
    best, relevant_ties = _best_relevant(sims, rel, queries, is_torch)  # [n] float64, [n] int64
    if is_torch:
        greater, greater_equal = _count_torch(sims, best, queries, chunk_size, removed)
    else:
        # comparisons are exact in the matrix's own float dtype: best came from it
        dtype = sims.dtype if np.issubdtype(sims.dtype, np.floating) else np.dtype(np.float64)
        cuts = best.astype(dtype)  # [n]
        if _column_major(sims) and 8 * len(queries) >= sims.shape[0]:
            greater, greater_equal = _count_columns(sims.T, cuts, queries, keep_target)
        else:
            block_rows = chunk_size or max(1, _BLOCK_ELEMENTS // max(int(sims.shape[1]), 1))
            # where a block's scores equal to the cuts are exactly the relevant ties (no other
            # target ties), its per-row count of equal scores is known without counting rows
            known_ties = np.where(best > -np.inf, relevant_ties, -1)  # [n]; -1: count (NaN rows)
            greater, greater_equal = _count_rows(sims, cuts, queries, block_rows, removed, known_ties)
    greater = greater.astype(np.int64)
    greater_equal = greater_equal.astype(np.int64)
    nan_best = np.flatnonzero(best == -np.inf)
    if len(nan_best):  # NaN = -inf: NaN scores tie with a -inf best relevant score
        greater_equal[nan_best] += _count_nan(sims, queries[nan_best], removed, is_torch)
    return greater, greater_equal - greater - relevant_ties


def _best_relevant(sims: Any, rel: Relevance, queries: np.ndarray, is_torch: bool) -> tuple[np.ndarray, np.ndarray]:
    """Best relevant score of each query (float64, NaN → -inf) and how many relevant targets equal it."""
    counts = rel.counts[queries]  # [n], all >= 1
    if not is_torch and bool((counts == 1).all()):  # one relevant target a query: its score is the best
        vals = np.asarray(sims[queries, rel.indices[rel.indptr[queries]]], dtype=np.float64)  # [n]
        vals[np.isnan(vals)] = -np.inf
        return vals, np.ones(len(queries), dtype=np.int64)
    offsets = np.zeros(len(queries), dtype=np.int64)
    np.cumsum(counts[:-1], out=offsets[1:])
    local = np.repeat(np.arange(len(queries)), counts)  # [p] query of each pair
    pos = np.arange(int(counts.sum())) - np.repeat(offsets, counts) + np.repeat(rel.indptr[queries], counts)
    cols = rel.indices[pos]  # [p] target index
    if is_torch:
        torch = _torch()
        index = (torch.from_numpy(queries[local]).to(sims.device), torch.from_numpy(cols).to(sims.device))
        vals = sims[index].double().cpu().numpy()
    else:
        vals = np.asarray(sims[queries[local], cols], dtype=np.float64)
    vals[np.isnan(vals)] = -np.inf
    best = np.maximum.reduceat(vals, offsets)  # [n]
    ties = np.add.reduceat((vals == best[local]).astype(np.int64), offsets)  # [n]
    return best, ties


def _column_major(sims: np.ndarray) -> bool:
    """True for a transposed C-ordered matrix (``x.T``): each query's scores are strided."""
    return sims.ndim == 2 and sims.flags.f_contiguous and not sims.flags.c_contiguous


def _count_rows(
    sims: np.ndarray, cuts: np.ndarray, queries: np.ndarray, block_rows: int, removed: np.ndarray | None,
    known_ties: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """#targets > and >= each query's cut, a block of query rows at a time, on up to `counting_threads()`
    threads (numpy lets go of the GIL in its loops) for a large matrix, each a run of blocks."""
    n_targets = int(sims.shape[1])
    count_dtype = np.uint16 if n_targets < 1 << 16 else np.uint64
    greater = np.empty(len(queries), dtype=count_dtype)
    greater_equal = np.empty(len(queries), dtype=count_dtype)
    blocks = -(-len(queries) // block_rows)
    workers = min(counting_threads(), blocks) if len(queries) * n_targets >= _THREADED_ELEMENTS else 1
    if workers <= 1:
        _count_row_blocks(sims, cuts, queries, block_rows, removed, known_ties, greater, greater_equal, 0, len(queries))
        return greater, greater_equal
    from concurrent.futures import ThreadPoolExecutor

    edges = [block_rows * (blocks * w // workers) for w in range(workers)] + [len(queries)]
    with ThreadPoolExecutor(workers) as pool:
        runs = [pool.submit(_count_row_blocks, sims, cuts, queries, block_rows, removed, known_ties, greater,
                            greater_equal, low, high) for low, high in zip(edges, edges[1:])]
        for run in runs:
            run.result()
    return greater, greater_equal


def _count_row_blocks(
    sims: np.ndarray, cuts: np.ndarray, queries: np.ndarray, block_rows: int, removed: np.ndarray | None,
    known_ties: np.ndarray, greater: np.ndarray, greater_equal: np.ndarray, low: int, high: int,
) -> None:
    """`_count_rows` for evaluated queries [low, high), into `greater` and `greater_equal`.

    A block ([block_rows, n_targets]) and its flags stay in cache between the two
    comparisons, so the matrix is read from memory once. The 0/1 flag bytes are counted
    8 at a time as the popcount of 64-bit words (rows padded to a multiple of 8 flags).
    Equal scores are counted per row only in a block where they are more than the known
    relevant ties (`known_ties`, -1 where unknown): usually the block's one total says so.
    """
    n_targets = int(sims.shape[1])
    count_dtype = greater.dtype
    # at least one padding byte: against a broadcast [c, 1] cut, numpy compares into a
    # contiguous [c, n] output about 2× slower than into rows of a wider buffer (measured)
    width = -(-(n_targets + 1) // 8) * 8
    flags = np.zeros((block_rows, width), dtype=bool)  # [b, width]; the padding stays False
    words = flags.view(np.uint64)  # [b, width // 8]
    bits = np.empty(words.shape, dtype=np.uint8)  # [b, width // 8] popcount of each word
    contiguous = sims.flags.c_contiguous
    to_float = not np.issubdtype(sims.dtype, np.floating)
    for start in range(low, high, block_rows):
        rows = queries[start : min(high, start + block_rows)]  # [c]
        c = len(rows)
        if rows[-1] - rows[0] == c - 1 and contiguous:  # a view, no copy
            block = sims[int(rows[0]) : int(rows[-1]) + 1]
        else:
            block = np.ascontiguousarray(sims[rows])  # [c, n_targets] copy
        if to_float:
            block = block.astype(np.float64)
        cut = cuts[start : start + c, None]  # [c, 1]
        flag = flags[:c, :n_targets]
        np.greater(block, cut, out=flag)
        if removed is not None:
            flag[:, removed] = False
        _count_flags(flags[:c], words[:c], bits[:c], count_dtype, greater[start : start + c])
        np.equal(block, cut, out=flag)
        if removed is not None:
            flag[:, removed] = False
        ties = known_ties[start : start + c]
        # each row holds at least its relevant ties among its equal scores: one total tells
        if ties.min() >= 0 and np.count_nonzero(flags[:c]) == int(ties.sum()):
            np.add(greater[start : start + c], ties, out=greater_equal[start : start + c], casting="unsafe")
        else:
            _count_flags(flags[:c], words[:c], bits[:c], count_dtype, greater_equal[start : start + c])
            greater_equal[start : start + c] += greater[start : start + c]


def counting_threads() -> int:
    """Threads that count a large matrix: the physical cores (`videotext.runtime`), at most 8."""
    from videotext.runtime import physical_cores  # torch: the metric alone imports numpy only

    return min(8, physical_cores())


def _count_flags(flags: np.ndarray, words: np.ndarray, bits: np.ndarray, count_dtype: Any, out: np.ndarray) -> None:
    """Row-wise number of True: [c, width] bool → `out` [c] count_dtype."""
    if _BITWISE_COUNT is None:  # numpy < 2.0
        np.add.reduce(flags.view(np.uint8), axis=1, dtype=count_dtype, out=out)
        return
    _BITWISE_COUNT(words, out=bits)
    np.add.reduce(bits, axis=1, dtype=count_dtype, out=out)


def _count_columns(
    by_target: np.ndarray, cuts: np.ndarray, queries: np.ndarray, keep_target: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """`_count_rows` for a column-major matrix, read along its memory rows.

    ``by_target`` is the C-ordered ``[n_targets, n_queries]`` matrix (``sims.T``). Blocks
    of up to 255 targets are compared against every query's cut at once (a [n_queries]
    row broadcast) and summed over targets in uint8 without overflow. Every query is
    counted (unevaluated ones against a NaN cut); only `queries` are returned.
    """
    n_targets, n_queries = (int(s) for s in by_target.shape)
    cut = np.full(n_queries, np.nan, dtype=cuts.dtype)  # [n_queries]
    cut[queries] = cuts
    targets = np.arange(n_targets) if keep_target is None else np.flatnonzero(keep_target)
    block_targets = max(1, min(255, _BLOCK_ELEMENTS // max(n_queries, 1)))
    # [b, n_queries] in a padded buffer, for the same reason as in `_count_rows`
    flags = np.empty((block_targets, n_queries + 8), dtype=bool)[:, :n_queries]
    partial = np.empty(n_queries, dtype=np.uint8)  # [n_queries] count within one block
    greater = np.zeros(n_queries, dtype=np.int64)
    greater_equal = np.zeros(n_queries, dtype=np.int64)
    to_float = not np.issubdtype(by_target.dtype, np.floating)
    for start in range(0, len(targets), block_targets):
        rows = targets[start : start + block_targets]  # [c]
        c = len(rows)
        if rows[-1] - rows[0] == c - 1:
            block = by_target[int(rows[0]) : int(rows[-1]) + 1]  # a view
        else:
            block = by_target[rows]  # [c, n_queries] copy
        if to_float:
            block = block.astype(np.float64)
        flag = flags[:c]
        for compare, out in ((np.greater, greater), (np.greater_equal, greater_equal)):
            compare(block, cut, out=flag)
            np.add.reduce(flag.view(np.uint8), axis=0, dtype=np.uint8, out=partial)
            out += partial
    return greater[queries], greater_equal[queries]


def _count_torch(
    sims: Any, best: np.ndarray, queries: np.ndarray, chunk_size: int | None, removed: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """#targets > and >= each query's best relevant score, on the tensor's own device."""
    torch = _torch()
    n_targets = int(sims.shape[1])
    chunk_size = chunk_size or max(1, _TORCH_CHUNK_ELEMENTS // max(n_targets, 1))
    gone = None if removed is None else torch.from_numpy(removed).to(sims.device)
    greater = np.empty(len(queries), dtype=np.int64)
    greater_equal = np.empty(len(queries), dtype=np.int64)
    for start in range(0, len(queries), chunk_size):
        rows = queries[start : start + chunk_size]  # [c]
        if rows[-1] - rows[0] == len(rows) - 1:  # contiguous: a view, no copy
            block = sims[int(rows[0]) : int(rows[-1]) + 1]
        else:
            block = sims[torch.from_numpy(rows).to(sims.device)]
        block = _as_float(block, True)  # [c, n_targets]
        # exact: each best came from the block's dtype
        cut = torch.from_numpy(best[start : start + len(rows)]).to(block.dtype).to(block.device)[:, None]
        for flag, out in ((block > cut, greater), (block >= cut, greater_equal)):
            if gone is not None:
                flag[:, gone] = False
            out[start : start + len(rows)] = flag.sum(dim=1).cpu().numpy()
    return greater, greater_equal


def _count_nan(sims: Any, rows: np.ndarray, removed: np.ndarray | None, is_torch: bool) -> np.ndarray:
    """Number of NaN scores of each of `rows` among the kept targets: [len(rows)] int64."""
    n_targets = int(sims.shape[1])
    out = np.empty(len(rows), dtype=np.int64)
    step = max(1, _TORCH_CHUNK_ELEMENTS // max(n_targets, 1))
    for start in range(0, len(rows), step):
        chunk = rows[start : start + step]
        if is_torch:
            torch = _torch()
            nan = torch.isnan(sims[torch.from_numpy(chunk).to(sims.device)])  # [c, n_targets]
            if removed is not None:
                nan[:, torch.from_numpy(removed).to(sims.device)] = False
            out[start : start + len(chunk)] = nan.sum(dim=1).cpu().numpy()
        else:
            nan = np.isnan(_as_float(sims[chunk], False))  # [c, n_targets]
            if removed is not None:
                nan[:, removed] = False
            out[start : start + len(chunk)] = np.count_nonzero(nan, axis=1)
    return out


def _as_float(block: Any, is_torch: bool) -> Any:
    if is_torch:
        return block if block.is_floating_point() else block.double()
    return block if np.issubdtype(block.dtype, np.floating) else block.astype(np.float64)


def _torch():
    import torch

    return torch


def retrieval_metrics_both(
    sims_t2v: Any,
    relevant_t2v: Any,
    ties: str = "average",
    query_mask: Any = None,
    ks: Sequence[int] = DEFAULT_KS,
    chunk_size: int | None = None,
) -> dict[str, dict[str, float]]:
    """Text→video and video→text metrics of one ``[n_texts, n_videos]`` matrix.

    v2t ranks the texts for each video (``sims_t2v.T``); a video's relevant texts are all
    texts that have it as relevant (`invert_relevance`). Texts skipped by `query_mask`
    are skipped as t2v queries *and* removed from the v2t candidates; a video whose
    texts are all skipped is skipped in v2t. A video no text refers to at all raises.
    """
    n_texts, n_videos = (int(s) for s in sims_t2v.shape)
    rel = as_relevance(relevant_t2v, n_texts, n_videos)
    t2v = retrieval_metrics(sims_t2v, rel, ties, query_mask, ks, chunk_size)
    keep_text = _as_mask(query_mask, n_texts, "query_mask")
    inverse = invert_relevance(rel, n_videos)
    video_mask = None
    if keep_text is not None:
        kept = invert_relevance(rel.restrict(keep_queries=keep_text), n_videos)
        video_mask = (inverse.counts == 0) | (kept.counts > 0)  # all-skipped → skip; none at all → error
    try:
        v2t = retrieval_metrics(
            sims_t2v.T, inverse, ties, video_mask, ks, chunk_size, target_mask=keep_text
        )
    except ValueError as exc:
        raise ValueError(f"v2t (rows = videos): {exc}") from None
    return {"t2v": t2v, "v2t": v2t}


# --- reporting -------------------------------------------------------------------------
def aggregate_seeds(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean, std and n of every numeric metric over runs (seeds).

    std is the sample standard deviation (ddof=1), as papers report mean ± std; it is
    0.0 when there is one run. Nested dicts (``{"t2v": {...}, "v2t": {...}}``) are
    aggregated per key. Keys missing from some runs are aggregated over the others.
    """
    if not runs:
        raise ValueError("aggregate_seeds needs at least one run")
    out: dict[str, Any] = {}
    keys = list(dict.fromkeys(k for run in runs for k in run))
    for key in keys:
        values = [run[key] for run in runs if key in run]
        if all(isinstance(v, Mapping) for v in values):
            out[key] = aggregate_seeds(values)
        elif all(isinstance(v, numbers.Real) for v in values):
            array = np.asarray(values, dtype=np.float64)
            std = float(array.std(ddof=1)) if len(array) > 1 else 0.0
            out[key] = {"mean": float(array.mean()), "std": std, "n": len(array)}
    return out


def format_mean_std(value: Mapping[str, Any] | float, std: float | None = None, digits: int = 1) -> str:
    """``"42.1 ± 0.3"`` from a mean and std, or from an `aggregate_seeds` entry
    (a single run, or no std, prints the value alone)."""
    if isinstance(value, Mapping):
        mean = float(value["mean"])
        std = float(value["std"]) if value.get("n", 2) > 1 else None
    else:
        mean = float(value)
    if std is None or (isinstance(std, float) and math.isnan(std)):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def format_table(
    metrics_by_direction: Mapping[str, Any],
    digits: int = 1,
    style: str = "markdown",
    columns: Iterable[tuple[str, str]] = TABLE_COLUMNS,
) -> str:
    """Results as in the papers: one row per direction (t2v, v2t), columns R@1 R@5 R@10
    R@50 MdR MnR. Values may be plain metrics or `aggregate_seeds` entries (mean ± std).
    A single metrics dict (no directions) becomes one "t2v" row."""
    if style not in ("markdown", "plain"):
        raise ValueError(f"style={style!r}: expected 'markdown' or 'plain'")
    if "R1" in metrics_by_direction:
        metrics_by_direction = {"t2v": metrics_by_direction}
    columns = list(columns)
    header = ["", *(label for _, label in columns)]
    body = []
    for direction, metrics in metrics_by_direction.items():
        cells = [direction]
        for key, _ in columns:
            value = metrics.get(key)
            cells.append("-" if value is None else format_mean_std(value, digits=digits))
        body.append(cells)
    if style == "markdown":
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths)))
        for r in [header, *body]
    )
