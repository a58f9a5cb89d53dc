"""The index at 10^6 × 256 in one run: exact vs approximate search, recall@10 and per-query
latency p50/p95, build time, memory, and saving / loading the index.

Two data sets (`--data`):

- ``clustered`` (default): embedding-like vectors. Real video embeddings sit
  in a low-dimensional part of the space, in clusters (videos of the same kind), and a
  text query lands near its video, not uniformly. The generator: `--clusters` centres
  drawn in a 32-d latent subspace mapped into 256-d (`unit_vectors` with a basis, as
  bench/index.py's `lowrank`), each vector = its centre + Gaussian noise of
  `--spread` per dimension (relative to a unit centre), L2-normalised; queries are
  fresh points drawn the same way. Searched with HNSW (`Index(kind="hnsw")`, M and
  efConstruction from `--hnsw-m` / `--ef-construction`, swept over efSearch).
- ``random``: isotropic Gaussian vectors, the worst case, searched with IVF.

Exact = `Index(kind="flat")`; approximate = `Index(kind="ivf")` (IVF-flat, nlist lists,
swept over nprobe). HNSW is left out at this size: its graph build takes ~8 min for 10^6
× 256 on 2 cores (bench/index.py measured 95 s for 200 000), IVF builds in about a minute.
Isotropic random vectors are the worst case for any approximate index (no cluster
structure, every neighbour almost equally far): recall here is a lower bound; run
`bench/index.py --data lowrank` for embedding-like data. Latency is per single-query
`search_one` on one thread (the serving path, Python included); builds and the batched
recall search use all threads. Settings are timed back to back on each query, so load
from other processes on a shared machine hits exact and approximate alike.

    python bench/index_scale.py                       # clustered, HNSW, 1 000 000 × 256
    python bench/index_scale.py --data random         # the worst case, IVF, ~4 min on 2 cores
    python bench/index_scale.py --n 100000 --out /tmp/x.json
    python bench/index_scale.py --persist-only        # save/load of 10^6 entries only, ~1 min
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
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


def clustered_vectors(rng: np.random.Generator, centres: np.ndarray, n: int, spread: float,
                      chunk: int = 100_000) -> np.ndarray:
    """`n` unit vectors, each a random centre [C, D] plus Gaussian noise (std `spread` per dim)."""
    out = np.empty((n, centres.shape[1]), np.float32)
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        block = centres[rng.integers(0, len(centres), m)] + spread * rng.standard_normal((m, centres.shape[1]),
                                                                                       dtype=np.float32)
        out[s : s + m] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def clustered_dataset(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(vectors [n, dim], queries [queries, dim], names) of the clustered generator: `args.clusters`
    centres in a 32-d subspace, `args.spread` noise, seeded by `args.seed`."""
    rng = np.random.default_rng(args.seed)
    basis = rng.standard_normal((32, args.dim), dtype=np.float32)
    centres = unit_vectors(rng, args.clusters, args.dim, basis)
    data = clustered_vectors(rng, centres, args.n, args.spread)
    queries = clustered_vectors(rng, centres, args.queries, args.spread)
    return data, queries, [f"video{i:07d}" for i in range(args.n)]


def rss_mb() -> float:
    """Resident memory of this process (MB), from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def save_load_seconds(index: Index) -> dict[str, float]:
    """Seconds to save `index` (entries.parquet + FAISS file) and to load it back, and the
    entries alone (`write_entries` / `read_entries`; the target is <= 5 s at 10^6)."""
    from videotext.search.index import _gc_paused, read_entries, write_entries

    folder = Path(tempfile.mkdtemp(prefix="vt-index-scale-"))
    try:
        t = time.perf_counter()
        index.save(folder / "index")
        saved = time.perf_counter() - t
        t = time.perf_counter()
        loaded = Index.load(folder / "index")
        load = time.perf_counter() - t
        assert len(loaded) == len(index)
        del loaded
        size = sum(p.stat().st_size for p in (folder / "index").iterdir()) / 2**20
        entries = (folder / "index" / "entries.parquet").stat().st_size / 2**20
        t = time.perf_counter()
        write_entries(folder / "entries.parquet", index._entries)
        entries_save = time.perf_counter() - t
        t = time.perf_counter()
        with _gc_paused():  # as Index.load reads them
            assert len(read_entries(folder / "entries.parquet")) == len(index)
        entries_load = time.perf_counter() - t
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {"save_s": saved, "load_s": load, "folder_mb": size, "entries_mb": entries,
            "entries_save_s": entries_save, "entries_load_s": entries_load}


def print_persistence(persist: dict[str, float], n: int) -> None:
    print(f"save {persist['save_s']:.1f}s, load {persist['load_s']:.1f}s of {n} entries "
          f"(folder {persist['folder_mb']:.0f} MB, entries.parquet {persist['entries_mb']:.0f} MB); "
          f"entries alone: save {persist['entries_save_s']:.1f}s, load {persist['entries_load_s']:.1f}s", flush=True)


def persist_main(args: argparse.Namespace) -> None:
    """Only saving and loading: an exact index of `n` clustered vectors (no HNSW build, which
    takes minutes), so the persistence figures can be re-timed on a quiet machine quickly."""
    rng = np.random.default_rng(args.seed)
    centres = unit_vectors(rng, args.clusters, args.dim, rng.standard_normal((32, args.dim), dtype=np.float32))
    flat = Index(args.dim, kind="flat")
    flat.add(clustered_vectors(rng, centres, args.n, args.spread), [f"video{i:07d}" for i in range(args.n)])
    persist = save_load_seconds(flat)
    print_persistence(persist, args.n)
    write_json(args.out, {"bench": "index_scale", "data": "persist-only", "kind": "flat", "n": args.n,
                          "dim": args.dim, "faiss": faiss.__version__, "persistence": persist})
    print(f"wrote {args.out}")


def interleaved_latency(flat: Index, ivf: Index, nprobes: list[int], queries: np.ndarray,
                        k: int, attribute: str = "nprobe") -> dict:
    """Per-query latency (ms) of every setting, timed back to back on the same query on
    one thread, so load from other processes hits exact and approximate alike."""
    times: dict = {"exact": [], **{n: [] for n in nprobes}}
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        for i, q in enumerate(queries):
            for key in times:
                if key != "exact":
                    setattr(ivf, attribute, key)
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


def sweep(flat: Index, approx: Index, attribute: str, values: list[int], queries: np.ndarray, timed: np.ndarray,
          exact: list[set[str]], k: int, flat_build: float, row: dict) -> list[dict]:
    """Recall@k and single-query latency of `approx` for each value of its `attribute`
    (nprobe, ef_search) against exact search; prints one line each, returns the rows."""
    recalls = {}
    for value in values:
        setattr(approx, attribute, value)
        recalls[value] = recall_at_k(approx, queries, exact, k)
    times = interleaved_latency(flat, approx, values, timed, k, attribute)
    exact_lat = percentiles(times["exact"])
    rows = [{"kind": "flat", "setting": "exact", "build_s": flat_build, "recall": 1.0, **exact_lat}]
    print(f"exact  flat               recall@{k} 1.000  p50 {exact_lat['p50_ms']:7.2f} ms  "
          f"p95 {exact_lat['p95_ms']:7.2f} ms", flush=True)
    for value in values:
        lat = percentiles(times[value])
        ratio = exact_lat["p50_ms"] / lat["p50_ms"]
        rows.append({**row, "setting": f"{row['setting']},{attribute}={value}", "recall": recalls[value],
                     "speedup_p50": ratio, **lat})
        print(f"approx {row['kind']} {attribute}={value:<4d} recall@{k} {recalls[value]:.3f}  p50 {lat['p50_ms']:7.2f} ms  "
              f"p95 {lat['p95_ms']:7.2f} ms  exact/approx p50 = {ratio:.1f}x", flush=True)
    return rows


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
    parser.add_argument("--data", choices=["clustered", "random"], default="clustered")
    parser.add_argument("--clusters", type=int, default=10_000, help="clustered: number of centres")
    parser.add_argument("--spread", type=float, default=0.05, help="clustered: noise std per dimension")
    parser.add_argument("--hnsw-m", type=int, default=16)
    parser.add_argument("--ef-construction", type=int, default=64)
    parser.add_argument("--ef-search", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--persist-only", action="store_true",
                        help="only save/load an exact index of --n clustered vectors (seconds, not minutes)")
    parser.add_argument("--out", default=None, help="default bench/results/index_scale_<data>.json")
    args = parser.parse_args()
    args.out = args.out or f"bench/results/index_scale_{'persist' if args.persist_only else args.data}.json"
    if args.persist_only:
        return persist_main(args)
    if args.data == "clustered":
        return clustered_main(args)

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
    rows = sweep(flat, ivf, "nprobe", args.nprobe, queries, timed, exact, args.k, flat_build,
                 {"kind": "ivf", "setting": f"nlist={nlist}", "build_s": build})

    write_json(args.out, {
        "bench": "index_scale", "n": args.n, "dim": args.dim, "queries": args.queries,
        "latency_queries": len(timed), "k": args.k, "data": "random", "seed": args.seed, "faiss": faiss.__version__,
        "threads": faiss.omp_get_max_threads(), "cpus": os.cpu_count(),
        "machine": platform.processor() or platform.machine(), "results": rows,
    })
    print(f"wrote {args.out}")


def clustered_main(args: argparse.Namespace) -> None:
    """Embedding-like data, HNSW vs exact; build time, memory, save/load."""
    t = time.perf_counter()
    data, queries, names = clustered_dataset(args)
    print(f"clustered: n={args.n} dim={args.dim} clusters={args.clusters} spread={args.spread} "
          f"queries={args.queries} k={args.k} threads={faiss.omp_get_max_threads()} faiss={faiss.__version__} "
          f"(data {time.perf_counter() - t:.1f}s)", flush=True)
    t = time.perf_counter()
    flat = Index(args.dim, kind="flat")
    flat.add(data, names)
    flat_build = time.perf_counter() - t
    exact = [{h.id for h in hits} for hits in flat.search(queries, args.k)]
    before = rss_mb()
    t = time.perf_counter()
    hnsw = Index(args.dim, kind="hnsw", hnsw_m=args.hnsw_m, ef_construction=args.ef_construction)
    hnsw.add(data, names)
    build = time.perf_counter() - t
    memory = rss_mb() - before
    print(f"built flat in {flat_build:.1f}s, hnsw (M={args.hnsw_m}, efConstruction={args.ef_construction}) in "
          f"{build:.1f}s, +{memory:.0f} MB resident", flush=True)
    rows = sweep(flat, hnsw, "ef_search", args.ef_search, queries, queries[: args.latency_queries], exact, args.k,
                 flat_build, {"kind": "hnsw", "setting": f"M={args.hnsw_m},efC={args.ef_construction}",
                              "build_s": build, "memory_mb": memory})
    del flat
    persist = save_load_seconds(hnsw)
    print_persistence(persist, args.n)
    write_json(args.out, {
        "bench": "index_scale", "data": "clustered", "n": args.n, "dim": args.dim, "clusters": args.clusters,
        "spread": args.spread, "queries": args.queries, "latency_queries": min(args.latency_queries, args.queries),
        "k": args.k, "seed": args.seed, "faiss": faiss.__version__, "threads": faiss.omp_get_max_threads(),
        "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(), "results": rows,
        "persistence": persist,
    })
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
