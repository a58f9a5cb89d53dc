"""The index in Milvus Lite and in FAISS side by side, in one run, on embedding-like vectors.

    python bench/milvus_scale.py                      # 10^6 x 256 (about 15-25 min on 2 cores)
    python bench/milvus_scale.py --n 100000 --out /tmp/m.json

Data: `bench/index_scale.py`'s clustered generator (centres in a 32-d subspace, Gaussian noise,
unit vectors; queries drawn the same way). Exact top-10 from FAISS flat is the reference.
Rows, each with insert (build) time, single-query latency p50/p95 at k = 10 (Python included,
one query per call, the serving path), recall@10 against exact, and size on disk:

- FAISS HNSW (`Index(kind="hnsw")`, M 16, efConstruction 64, efSearch 64)
- Milvus Lite FLAT (exact) and Milvus Lite HNSW (M 32, efConstruction 100, ef 128), through
  `videotext.search.milvus.MilvusIndex`, i.e. the calls `index build --store milvus:PATH.db` makes.
Insertion into Milvus goes through `MilvusIndex.add` in batches of 50 000 vectors with their ids.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from index_scale import clustered_dataset, percentiles  # noqa: E402  (bench/index_scale.py)
from videotext.io import write_json  # noqa: E402
from videotext.search import Index  # noqa: E402
from videotext.search.milvus import MilvusIndex  # noqa: E402

BATCH = 50_000


def folder_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) / 2**20


def path_mb(path: Path) -> float:
    return folder_mb(path) if path.is_dir() else path.stat().st_size / 2**20


def measure(name: str, index, queries: np.ndarray, exact: list[set[str]], k: int, timed: int) -> dict:
    """Recall@k over every query (batched search) and single-query latency over `timed` of them."""
    found = index.search(queries, k)
    recall = float(np.mean([len({h.id for h in hits} & want) / k for hits, want in zip(found, exact)]))
    latencies = []
    for q in queries[:timed]:
        t = time.perf_counter()
        index.search(q[None], k)
        latencies.append((time.perf_counter() - t) * 1000)
    row = {"index": name, "recall_at_k": recall, **percentiles(latencies)}
    print(f"{name:24s} recall@{k} {recall:.3f}  p50 {row['p50_ms']:.2f} ms  p95 {row['p95_ms']:.2f} ms", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--latency-queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--clusters", type=int, default=10_000)
    parser.add_argument("--spread", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--milvus-kinds", nargs="+", default=["flat", "hnsw"], choices=["flat", "hnsw", "ivf"])
    parser.add_argument("--out", default="bench/results/milvus_scale.json")
    args = parser.parse_args()

    data, queries, names = clustered_dataset(args)
    print(f"n={args.n} dim={args.dim} queries={args.queries} k={args.k} faiss={faiss.__version__} "
          f"threads={faiss.omp_get_max_threads()}", flush=True)
    flat = Index(args.dim, kind="flat")
    flat.add(data, names)
    exact = [{h.id for h in hits} for hits in flat.search(queries, args.k)]
    del flat
    rows = []
    work = Path(tempfile.mkdtemp(prefix="milvus_scale."))
    try:
        t = time.perf_counter()
        hnsw = Index(args.dim, kind="hnsw", hnsw_m=16, ef_construction=64, ef_search=64)
        hnsw.add(data, names)
        build = time.perf_counter() - t
        row = measure("faiss hnsw", hnsw, queries, exact, args.k, args.latency_queries)
        row.update(insert_s=build, disk_mb=folder_mb(hnsw.save(work / "faiss")))
        rows.append(row)
        del hnsw
        for kind in args.milvus_kinds:
            db = work / f"milvus-{kind}.db"
            t = time.perf_counter()
            milvus = MilvusIndex(f"milvus:{db}", args.dim, kind=kind, collection="bench")
            for start in range(0, args.n, BATCH):
                milvus.add(data[start : start + BATCH], names[start : start + BATCH])
            milvus.save(work / f"milvus-{kind}-folder")  # flushes
            insert = time.perf_counter() - t
            row = measure(f"milvus lite {kind}", milvus, queries, exact, args.k, args.latency_queries)
            row.update(insert_s=insert, disk_mb=sum(path_mb(p) for p in work.glob(f"{db.name}*")))  # file + its lock/wal
            rows.append(row)
            milvus.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for row in rows:
        print(f"{row['index']:24s} insert {row['insert_s']:.1f} s  disk {row['disk_mb']:.0f} MB")
    write_json(args.out, {"bench": "milvus_scale", "n": args.n, "dim": args.dim, "queries": args.queries,
                          "k": args.k, "seed": args.seed, "cpus": os.cpu_count(),
                          "machine": platform.processor() or platform.machine(), "results": rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
