"""The issue-9 index benchmark in one run: 1 000 000 random 256-d vectors, top-10 queries,
recall@10 of the approximate index against exact search, latency p50/p95 of each.

Exact = `Index(kind="flat")`; approximate = `Index(kind="ivf")` (IVF-flat, nlist lists,
swept over nprobe). HNSW is left out at this size: its graph build takes ~8 min for 10^6
× 256 on 2 cores (bench/index.py measured 95 s for 200 000), IVF builds in about a minute.
Isotropic random vectors are the worst case for any approximate index (no cluster
structure, every neighbour almost equally far): recall here is a lower bound; run
`bench/index.py --data lowrank` for embedding-like data. Latency is per single-query
`search_one` on one thread (the serving path, Python included); builds and the batched
recall search use all threads. Settings are timed back to back on each query, so load
from other processes on a shared machine hits exact and approximate alike.

    python bench/index_scale.py                       # 1 000 000 × 256, ~4 min on 2 cores
    python bench/index_scale.py --n 100000 --out /tmp/x.json
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
sys.path.insert(0, str(Path(__file__).resolve().parent))
from index import recall_at_k, unit_vectors  # noqa: E402  (bench/index.py)
from videotext.io import write_json  # noqa: E402
from videotext.search import Index  # noqa: E402


def interleaved_latency(flat: Index, ivf: Index, nprobes: list[int], queries: np.ndarray,
                        k: int) -> dict:
    """Per-query latency (ms) of every setting, timed back to back on the same query on
    one thread, so load from other processes hits exact and approximate alike."""
    times: dict = {"exact": [], **{n: [] for n in nprobes}}
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        for i, q in enumerate(queries):
            for key in times:
                if key != "exact":
                    ivf.nprobe = key
                index = flat if key == "exact" else ivf
                t = time.perf_counter()
                index.search_one(q, k)
                if i >= 5:  # the first queries warm caches
                    times[key].append((time.perf_counter() - t) * 1e3)
    finally:
        faiss.omp_set_num_threads(threads)
    return times


def percentiles(ms: list[float]) -> dict[str, float]:
    return {"p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--queries", type=int, default=500, help="queries for recall")
    parser.add_argument("--latency-queries", type=int, default=200, help="single queries timed per index")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--nlist", type=int, default=1024, help="IVF lists (~sqrt(n): k-means stays cheap)")
    parser.add_argument("--nprobe", type=int, nargs="+", default=[16, 64, 256, 512])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench/results/index_scale.json")
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    t = time.perf_counter()
    data, queries = unit_vectors(rng, args.n, args.dim), unit_vectors(rng, args.queries, args.dim)
    names = [str(i) for i in range(args.n)]
    print(f"n={args.n} dim={args.dim} queries={args.queries} k={args.k} threads={faiss.omp_get_max_threads()} "
          f"faiss={faiss.__version__} (data {time.perf_counter() - t:.1f}s)", flush=True)
    timed = queries[: args.latency_queries]

    t = time.perf_counter()
    flat = Index(args.dim, kind="flat")
    flat.add(data, names)
    flat_build = time.perf_counter() - t
    exact = [{h.id for h in hits} for hits in flat.search(queries, args.k)]
    t = time.perf_counter()
    ivf = Index(args.dim, kind="ivf", nlist=args.nlist)
    ivf.add(data, names)
    build = time.perf_counter() - t
    nlist = faiss.extract_index_ivf(ivf._faiss).nlist
    print(f"built flat in {flat_build:.1f}s, ivf (nlist={nlist}) in {build:.1f}s", flush=True)
    recalls = {}
    for nprobe in args.nprobe:
        ivf.nprobe = nprobe
        recalls[nprobe] = recall_at_k(ivf, queries, exact, args.k)
    times = interleaved_latency(flat, ivf, args.nprobe, timed, args.k)

    exact_lat = percentiles(times["exact"])
    rows = [{"kind": "flat", "setting": "exact", "build_s": flat_build, "recall": 1.0, **exact_lat}]
    print(f"exact  flat            recall@{args.k} 1.000  p50 {exact_lat['p50_ms']:7.2f} ms  "
          f"p95 {exact_lat['p95_ms']:7.2f} ms", flush=True)
    for nprobe in args.nprobe:
        lat = percentiles(times[nprobe])
        ratio = exact_lat["p50_ms"] / lat["p50_ms"]
        rows.append({"kind": "ivf", "setting": f"nlist={nlist},nprobe={nprobe}", "build_s": build,
                     "recall": recalls[nprobe], "speedup_p50": ratio, **lat})
        print(f"approx ivf nprobe={nprobe:<4d} recall@{args.k} {recalls[nprobe]:.3f}  p50 {lat['p50_ms']:7.2f} ms  "
              f"p95 {lat['p95_ms']:7.2f} ms  exact/approx p50 = {ratio:.1f}x", flush=True)

    write_json(args.out, {
        "bench": "index_scale", "n": args.n, "dim": args.dim, "queries": args.queries,
        "latency_queries": len(timed), "k": args.k, "data": "random", "seed": args.seed, "faiss": faiss.__version__,
        "threads": faiss.omp_get_max_threads(), "cpus": os.cpu_count(),
        "machine": platform.processor() or platform.machine(), "results": rows,
    })
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
