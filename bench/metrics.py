"""Benchmark: the counting retrieval metric vs a plain full-argsort metric, in one run.

Builds a random tie-free float32 ``[queries, targets]`` matrix (query i's relevant
target is i % targets), then times both implementations, measures the peak memory each
allocates beyond the input (tracemalloc, which sees numpy's allocations), checks that
they give the same R@K / MdR / MnR, prints the ratios and writes JSON.

    python bench/metrics.py                        # 60 000 × 3 000 (720 MB input)
    python bench/metrics.py --queries 6000 --targets 1000 --out /tmp/m.json
"""
from __future__ import annotations

import argparse
import json
import platform
import time
import tracemalloc
from pathlib import Path
from typing import Callable

import numpy as np

from videotext.eval.retrieval import retrieval_metrics, retrieval_metrics_both
from videotext.io import write_json

KS = (1, 5, 10, 50)


def argsort_metrics(sims: np.ndarray, targets: np.ndarray) -> dict[str, float]:
    """The usual reference: sort every row, find where the correct target landed."""
    order = np.argsort(-sims, axis=1)  # [n_queries, n_targets] int64
    ranks = np.argmax(order == targets[:, None], axis=1) + 1.0  # [n_queries]
    out = {f"R{k}": float(100.0 * np.mean(ranks <= k)) for k in KS}
    out["MdR"] = float(np.median(ranks))
    out["MnR"] = float(ranks.mean())
    return out


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


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=60_000)
    parser.add_argument("--targets", type=int, default=3_000)
    parser.add_argument("--repeat", type=int, default=1, help="timed runs of each (best is kept)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "metrics.json")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    # [Q, T]: each row a random permutation of k / T, so no row has two equal scores
    # (uniform random float32 would: ~10 relevant scores tie at this size, on which
    # argsort's arbitrary order and the tie-aware metric legitimately differ)
    sims = np.tile(np.arange(args.targets, dtype=np.float32) / args.targets, (args.queries, 1))
    rng.permuted(sims, axis=1, out=sims)
    targets = np.arange(args.queries) % args.targets  # query i → target i % T
    print(f"sims: {args.queries} × {args.targets} float32 = {sims.nbytes / 2**20:.0f} MiB")

    ours, ours_s, ours_peak = measure(lambda: retrieval_metrics(sims, targets, ks=KS), args.repeat)
    ref, ref_s, ref_peak = measure(lambda: argsort_metrics(sims, targets), args.repeat)

    start = time.perf_counter()
    retrieval_metrics_both(sims, targets, ks=KS)  # t2v + v2t (v2t ranks 60 000 captions per video)
    both_s = time.perf_counter() - start

    torch_s = None
    try:
        import torch

        tensor = torch.from_numpy(sims)  # shares memory
        start = time.perf_counter()
        torch_result = retrieval_metrics(tensor, targets, ks=KS)
        torch_s = time.perf_counter() - start
        assert torch_result == ours, "torch input disagrees with numpy input"
    except ImportError:
        pass

    for ties in ("optimistic", "pessimistic"):  # tie-free: every tie mode agrees
        assert retrieval_metrics(sims, targets, ties, ks=KS) == ours, f"ties={ties} differs: matrix has ties"

    keys = [f"R{k}" for k in KS] + ["MdR", "MnR"]
    mismatch = {k: (ours[k], ref[k]) for k in keys if not np.isclose(ours[k], ref[k], rtol=0, atol=1e-9)}
    if mismatch:
        raise SystemExit(f"metrics differ from the argsort reference: {mismatch}")

    mib = 2**20
    results = {
        "benchmark": "retrieval_metrics (counting, chunked) vs full argsort",
        "queries": args.queries,
        "targets": args.targets,
        "dtype": "float32",
        "input_mib": sims.nbytes / mib,
        "ours": {"seconds": ours_s, "peak_mib": ours_peak / mib},
        "argsort": {"seconds": ref_s, "peak_mib": ref_peak / mib},
        "ours_torch_input_seconds": torch_s,
        "ours_t2v_and_v2t_seconds": both_s,
        "speedup": ref_s / ours_s,
        "memory_ratio": ref_peak / max(ours_peak, 1),
        "metrics_equal": True,
        "metrics": {k: ours[k] for k in keys},
        "machine": {"python": platform.python_version(), "numpy": np.__version__, "cpu": platform.processor()
                    or platform.machine()},
    }
    print(f"ours    : {ours_s:8.3f} s   peak {ours_peak / mib:8.1f} MiB beyond the input")
    print(f"argsort : {ref_s:8.3f} s   peak {ref_peak / mib:8.1f} MiB beyond the input")
    if torch_s is not None:
        print(f"ours, torch tensor input: {torch_s:.3f} s")
    print(f"ours, t2v + v2t         : {both_s:.3f} s")
    print(f"speed-up ×{results['speedup']:.1f}, memory ÷{results['memory_ratio']:.0f}; "
          f"same metrics: {json.dumps(results['metrics'])}")
    write_json(args.out, results)
    print(f"wrote {args.out}")
    return results


if __name__ == "__main__":
    main()
