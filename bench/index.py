"""Approximate vs exact search in `videotext.search.Index`: recall@k and per-query latency.

Random L2-normalised vectors (the hardest case for approximate search: no cluster
structure; real embeddings do better) are indexed exactly (flat) and approximately
(HNSW, IVF) in one run. Recall@k is measured against the exact top-k; latency is per
single-query `search_one` call on one thread (the serving path, Python overhead
included); builds and recall use all threads.

    python bench/index.py                    # 1 000 000 × 256
    python bench/index.py --n 200000 --out bench/results/index.json
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from videotext.io import write_json  # noqa: E402
from videotext.search import Index  # noqa: E402


def unit_vectors(rng: np.random.Generator, n: int, dim: int, basis: np.ndarray | None = None,
                 chunk: int = 100_000) -> np.ndarray:
    """Gaussian vectors, normalised; with `basis` [r, dim], mostly inside its r-d span."""
    out = np.empty((n, dim), np.float32)
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        if basis is None:
            block = rng.standard_normal((m, dim), dtype=np.float32)
        else:
            block = rng.standard_normal((m, len(basis)), dtype=np.float32) @ basis
            block += 0.1 * rng.standard_normal((m, dim), dtype=np.float32)
        out[s : s + m] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def latency_ms(index: Index, queries: np.ndarray, k: int) -> dict[str, float]:
    """Per-query latency on one thread: a single query gains nothing from FAISS's OpenMP
    (it parallelises over queries), and idle-thread wake-ups made timings noisy."""
    threads, times = faiss.omp_get_max_threads(), []
    faiss.omp_set_num_threads(1)
    try:
        for q in queries[:10]:  # warm-up
            index.search_one(q, k)
        for q in queries:
            t = time.perf_counter()
            index.search_one(q, k)
            times.append((time.perf_counter() - t) * 1e3)
    finally:
        faiss.omp_set_num_threads(threads)
    return {"p50_ms": float(np.percentile(times, 50)), "p95_ms": float(np.percentile(times, 95))}


def recall_at_k(index: Index, queries: np.ndarray, exact: list[set[str]], k: int) -> float:
    got = index.search(queries, k)
    return float(np.mean([len({h.id for h in hits} & truth) / k for hits, truth in zip(got, exact)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000, help="indexed vectors")
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--ef-search", type=int, nargs="+", default=[64, 128, 256, 512], help="HNSW settings to sweep")
    parser.add_argument("--nprobe", type=int, nargs="+", default=[0, 32, 512], help="IVF settings (0 = the default)")
    parser.add_argument("--data", choices=["random", "lowrank"], default="random",
                        help="random: isotropic (worst case); lowrank: 32-d latent + noise, closer to real embeddings")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench/results/index.json")
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    basis = rng.standard_normal((32, args.dim), dtype=np.float32) if args.data == "lowrank" else None
    data, queries = unit_vectors(rng, args.n, args.dim, basis), unit_vectors(rng, args.queries, args.dim, basis)
    names = [str(i) for i in range(args.n)]
    print(f"data={args.data} n={args.n} dim={args.dim} queries={args.queries} k={args.k} "
          f"threads={faiss.omp_get_max_threads()} faiss={faiss.__version__}", flush=True)

    t = time.perf_counter()
    flat = Index(args.dim, kind="flat")
    flat.add(data, names)
    flat_build = time.perf_counter() - t
    exact = [{h.id for h in hits} for hits in flat.search(queries, args.k)]
    exact_latency = latency_ms(flat, queries, args.k)
    rows = [{"kind": "flat", "setting": "exact", "build_s": flat_build, "recall": 1.0, **exact_latency}]
    print(f"flat  build {flat_build:7.1f}s  recall@{args.k} 1.000  "
          f"p50 {exact_latency['p50_ms']:7.3f} ms  p95 {exact_latency['p95_ms']:7.3f} ms", flush=True)

    for kind, knob, values in (("hnsw", "ef_search", args.ef_search), ("ivf", "nprobe", args.nprobe)):
        t = time.perf_counter()
        index = Index(args.dim, kind=kind)
        index.add(data, names)
        build = time.perf_counter() - t
        for value in values:
            setattr(index, knob, value or None)
            shown = value if kind == "hnsw" else index._ivf_nprobe()
            recall = recall_at_k(index, queries, exact, args.k)
            lat = latency_ms(index, queries, args.k)
            speedup = exact_latency["p50_ms"] / lat["p50_ms"]
            extra = {"nlist": faiss.extract_index_ivf(index._faiss).nlist} if kind == "ivf" else {"M": index.hnsw_m}
            rows.append({"kind": kind, "setting": f"{knob}={shown}", "build_s": build, "recall": recall,
                         "speedup_p50": speedup, **lat, **extra})
            print(f"{kind:5} build {build:7.1f}s  recall@{args.k} {recall:.3f}  p50 {lat['p50_ms']:7.3f} ms  "
                  f"p95 {lat['p95_ms']:7.3f} ms  {knob}={shown}  {extra}  exact/approx p50 = {speedup:.1f}x", flush=True)
        del index

    write_json(args.out, {
        "bench": "index", "n": args.n, "dim": args.dim, "queries": args.queries, "k": args.k,
        "data": args.data, "seed": args.seed,
        "faiss": faiss.__version__, "threads": faiss.omp_get_max_threads(), "cpus": os.cpu_count(),
        "machine": platform.processor() or platform.machine(), "results": rows,
    })
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
