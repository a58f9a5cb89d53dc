"""Benchmark: the counting retrieval metric vs the CE / MMT sorting metric, in one run.

Builds a random tie-free float32 ``[queries, videos]`` matrix laid out as the CE / MMT
code expects (queries ``i * per_video … (i + 1) * per_video - 1`` are the captions of
video i, per_video = queries // videos; 59 800 × 2 990 is MSR-VTT's full test, 20
captions a video), then times `retrieval_metrics` against the reference, measures the
peak memory each allocates beyond the input (tracemalloc, which sees numpy's
allocations), checks that they give the same R@K / MdR / MnR, prints the ratios and
writes JSON. It also times one read of the input (`np.max` of the matrix), the floor of any metric
that looks at every score, on one thread and split over the threads the metric counts on. Both directions are also timed against the reference's video→text loop.

The reference does what ``model/metric.py`` of Collaborative Experts and MMT does
(``t2v_metrics``, ``v2t_metrics``; their tie averaging is not reached on a tie-free
matrix): negate the matrix, ``np.sort`` every row (a sort, not an argsort), gather
each caption's correct distance through a flat index built one caption at a time,
locate it in its sorted row by exact equality (a difference and ``np.where`` over the
whole matrix), and rank = that position + 1. Video→text loops over the videos: sort
the video's row of caption distances, locate each of its captions, keep the best
position. The bench also prints the index loop's own time and the ratio without it.

    python bench/metrics.py                        # 59 800 × 2 990 (682 MiB input)
    python bench/metrics.py --queries 6000 --targets 1000 --out /tmp/m.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np

from videotext.eval.retrieval import counting_threads, retrieval_metrics, retrieval_metrics_both
from videotext.io import write_json

KS = (1, 5, 10, 50)


def _from_positions(positions: np.ndarray) -> dict[str, float]:
    """R@K (percent), MdR, MnR from 0-based positions in the sorted rows."""
    n = len(positions)
    out = {f"R{k}": 100.0 * float(np.sum(positions < k)) / n for k in KS}
    out["MdR"] = float(np.median(positions)) + 1.0
    out["MnR"] = float(np.mean(positions)) + 1.0
    return out


def correct_flat_index(n_queries: int, n_videos: int) -> np.ndarray:
    """Flat index of each caption's (caption, video) entry, one Python call per caption
    as the CE / MMT code builds it: [Q] int64, video by video."""
    per_video = n_queries // n_videos
    return np.array([np.ravel_multi_index((q, v), (n_queries, n_videos))
                     for v in range(n_videos) for q in range(v * per_video, (v + 1) * per_video)])


def sort_t2v_metrics(sims: np.ndarray) -> dict[str, float]:
    """Text→video as the CE / MMT code ranks it: full sort of each negated row."""
    dists = -sims  # [Q, V] float32 copy
    ordered = np.sort(dists, axis=1)  # [Q, V]
    correct = dists.reshape(-1)[correct_flat_index(*sims.shape)][:, None]  # [Q, 1]
    rows, positions = np.where((ordered - correct) == 0)  # [Q, V] difference, [Q, V] bool
    if len(rows) > len(sims):
        raise SystemExit("the matrix has ties: the sort reference would average their positions")
    return _from_positions(positions.astype(np.float64))


def sort_v2t_metrics(sims: np.ndarray) -> dict[str, float]:
    """Video→text as the CE / MMT code ranks it: a loop over videos, a sort per video,
    the best position among the video's captions."""
    dists = -sims.T  # [V, Q]
    n_videos, n_queries = dists.shape
    per_video = n_queries // n_videos
    best = np.empty(n_videos)
    for v in range(n_videos):
        row = dists[v, :]
        ordered = np.sort(row)  # [Q]
        positions = [np.where((ordered - row[c]) == 0)[0] for c in range(v * per_video, (v + 1) * per_video)]
        if any(len(p) > 1 for p in positions):
            raise SystemExit("the matrix has ties: the sort reference would average their positions")
        best[v] = min(p.mean() for p in positions)
    return _from_positions(best)


def measure(fn: Callable[[], dict], repeat: int) -> tuple[dict, float, int]:
    """(result, best wall time in s over `repeat` untraced runs, peak traced bytes of one run)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    tracemalloc.start()
    try:
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, min(times), peak


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def threaded_max(sims: np.ndarray, threads: int) -> float:
    """One read of the input split over `threads` threads (numpy lets go of the GIL in `np.max`)."""
    if threads <= 1:
        return float(np.max(sims))
    edges = np.linspace(0, len(sims), threads + 1).astype(int)
    with ThreadPoolExecutor(threads) as pool:
        return max(pool.map(lambda lo_hi: float(np.max(sims[lo_hi[0]:lo_hi[1]])), zip(edges, edges[1:])))


def tie_free_matrix(n_queries: int, n_videos: int, rng: np.random.Generator) -> np.ndarray:
    """[Q, V] float32 with no two equal scores in any row or any column.

    Uniform random float32 would tie (~10 relevant scores at this size, more within a
    column of 59 800 captions), and on ties the sort's averaged position and the
    expected R@K legitimately differ. Score (u_i + w_j) mod m with u and w distinct
    random integers below m = max(Q, V) is distinct along rows and along columns,
    exact in float32 below 2^24, and divided by m into [0, 1).
    """
    m = max(n_queries, n_videos)
    if 2 * m >= 2**24:
        raise SystemExit(f"{n_queries} × {n_videos}: too large for exact float32 integers")
    u = rng.permutation(m)[:n_queries].astype(np.float32)  # [Q] distinct
    w = rng.permutation(m)[:n_videos].astype(np.float32)  # [V] distinct
    sims = np.add.outer(u, w)  # [Q, V] integers below 2m, exact
    np.fmod(sims, np.float32(m), out=sims)
    sims /= np.float32(m)
    return sims


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=59_800, help="captions (a multiple of --targets)")
    parser.add_argument("--targets", type=int, default=2_990, help="videos")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each (best is kept)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "metrics.json")
    args = parser.parse_args(argv)
    if args.queries % args.targets:
        raise SystemExit("--queries must be a multiple of --targets (the same number of captions a video)")

    load_start = os.getloadavg()
    sims = tie_free_matrix(args.queries, args.targets, np.random.default_rng(args.seed))
    per_video = args.queries // args.targets
    videos = np.arange(args.queries) // per_video  # [Q] caption i → video i // per_video
    print(f"sims: {args.queries} × {args.targets} float32 = {sims.nbytes / 2**20:.0f} MiB, "
          f"{per_video} captions a video")

    read_s = min(_timed(lambda: np.max(sims)) for _ in range(args.repeat))  # one pass over the input
    threads = counting_threads()  # the threads `retrieval_metrics` counts a large matrix on
    read_threads_s = min(_timed(lambda: threaded_max(sims, threads)) for _ in range(args.repeat))
    ours, ours_s, ours_peak = measure(lambda: retrieval_metrics(sims, videos, ks=KS), args.repeat)
    ref, ref_s, ref_peak = measure(lambda: sort_t2v_metrics(sims), args.repeat)
    both, both_s, both_peak = measure(lambda: retrieval_metrics_both(sims, videos, ks=KS), args.repeat)
    start = time.perf_counter()
    ref_v2t = sort_v2t_metrics(sims)
    ref_v2t_s = time.perf_counter() - start
    start = time.perf_counter()
    correct_flat_index(args.queries, args.targets)  # part of the reference's time
    index_s = time.perf_counter() - start

    torch_s = None
    try:
        import torch

        tensor = torch.from_numpy(sims)  # shares memory
        start = time.perf_counter()
        torch_result = retrieval_metrics(tensor, videos, ks=KS)
        torch_s = time.perf_counter() - start
        assert torch_result == ours, "torch input disagrees with numpy input"
    except ImportError:
        pass

    for ties in ("optimistic", "pessimistic"):  # tie-free: every tie mode agrees
        assert retrieval_metrics(sims, videos, ties, ks=KS) == ours, f"ties={ties} differs: matrix has ties"
    assert both["t2v"] == ours

    keys = [f"R{k}" for k in KS] + ["MdR", "MnR"]
    for name, mine, theirs in (("t2v", ours, ref), ("v2t", both["v2t"], ref_v2t)):
        mismatch = {k: (mine[k], theirs[k]) for k in keys if not np.isclose(mine[k], theirs[k], rtol=0, atol=1e-9)}
        if mismatch:
            raise SystemExit(f"{name} metrics differ from the sort reference: {mismatch}")

    mib = 2**20
    results = {
        "benchmark": "retrieval_metrics (counting, cache-sized blocks) vs the CE / MMT sort",
        "queries": args.queries,
        "targets": args.targets,
        "dtype": "float32",
        "input_mib": sims.nbytes / mib,
        "repeat": args.repeat,
        "ours": {"seconds": ours_s, "peak_mib": ours_peak / mib},
        "reference": {"seconds": ref_s, "peak_mib": ref_peak / mib},
        "speedup": ref_s / ours_s,
        "read_once_seconds": read_s,
        "ours_over_read_once": ours_s / read_s,
        "threads": threads,
        "read_once_threads_seconds": read_threads_s,
        "ours_over_read_once_threads": ours_s / read_threads_s,
        "load_average_start": list(load_start),
        "load_average_end": list(os.getloadavg()),
        "reference_index_loop_seconds": index_s,
        "speedup_without_index_loop": (ref_s - index_s) / ours_s,
        "memory_ratio": ref_peak / max(ours_peak, 1),
        "ours_t2v_and_v2t": {"seconds": both_s, "peak_mib": both_peak / mib},
        "reference_v2t_seconds": ref_v2t_s,
        "speedup_t2v_and_v2t": (ref_s + ref_v2t_s) / both_s,
        "ours_torch_input_seconds": torch_s,
        "metrics_equal": True,
        "metrics": {k: ours[k] for k in keys},
        "metrics_v2t": {k: both["v2t"][k] for k in keys},
        "machine": {"python": platform.python_version(), "numpy": np.__version__, "cpu": platform.processor()
                    or platform.machine()},
    }
    print(f"one read of the input (np.max): {read_s:.3f} s on one thread, {read_threads_s:.3f} s on {threads}")
    print(f"t2v  ours     : {ours_s:8.3f} s   peak {ours_peak / mib:8.1f} MiB beyond the input "
          f"({ours_s / read_s:.2f}× one read, {ours_s / read_threads_s:.2f}× one read on {threads} threads)")
    print(f"t2v  reference: {ref_s:8.3f} s   peak {ref_peak / mib:8.1f} MiB beyond the input "
          f"(of which {index_s:.3f} s its index of correct entries, caption by caption)")
    print(f"both ours     : {both_s:8.3f} s   peak {both_peak / mib:8.1f} MiB")
    print(f"both reference: {ref_s + ref_v2t_s:8.3f} s   (v2t loop {ref_v2t_s:.3f} s)")
    if torch_s is not None:
        print(f"ours, torch tensor input: {torch_s:.3f} s")
    print(f"t2v speed-up ×{results['speedup']:.1f} (×{results['speedup_without_index_loop']:.1f} without "
          f"that index loop), memory ÷{results['memory_ratio']:.0f}; "
          f"t2v + v2t speed-up ×{results['speedup_t2v_and_v2t']:.1f}; "
          f"same metrics: {json.dumps(results['metrics'])}")
    write_json(args.out, results)
    print(f"wrote {args.out}")
    return results


if __name__ == "__main__":
    main()
