"""Benchmark: what checking digests (`videotext.digests`) costs when the largest files are loaded.

Two loads, each timed with the digests recorded at write time (checked as the files are read) and
without them (the same files with their records moved aside: the path of a folder written before
digests), alternating, best of `--rounds`, on files already in the page cache (the disk is out of it):

- a FAISS index of `--entries` (default 10^6) entries × 256 (flat): `open_store(folder)`, which
  hashes index.faiss as FAISS streams it, entries.parquet and index.json as they are read;
- a checkpoint of `--gigabytes` (default 1) GB of float32 weights, with its training state and
  metadata, loaded into its model: `load_weights` (the whole file hashed once, then mapped by
  safetensors and copied into the model's parameters), `load_state`, `load_meta`.

It also prints the hashing speed of CRC-32 (the digest used) and of sha256 on 256 MB.

    python bench/digests.py                   # 10^6 entries and 1 GB: ~3 min and ~8 GB of memory
    python bench/digests.py --entries 100000 --gigabytes 0.1
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from videotext import digests  # noqa: E402


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} cores"


def hash_speed(mb: int = 256) -> dict[str, float]:
    data = os.urandom(mb << 20)
    out = {}
    for name, step in (("crc32", lambda block, state: zlib.crc32(block, state)),
                       ("sha256", None)):
        started = time.perf_counter()
        if step is None:
            hasher = hashlib.sha256()
            for start in range(0, len(data), digests.BLOCK):
                hasher.update(data[start : start + digests.BLOCK])
        else:
            state = 0
            for start in range(0, len(data), digests.BLOCK):
                state = step(data[start : start + digests.BLOCK], state)
        out[name] = mb / (time.perf_counter() - started)
    return out


def records_aside(folder: Path) -> list[tuple[Path, Path]]:
    moves = [(record, record.with_name(record.name + ".aside")) for record in folder.rglob(f"*{digests.SUFFIX}")]
    return moves


def timed_pair(load, folder: Path, rounds: int) -> dict[str, float]:
    """Best seconds of `load()` with the records and without them (moved aside), alternating."""
    moves = records_aside(folder)
    best = {"checked": float("inf"), "unchecked": float("inf")}
    load()  # warm the page cache
    for _ in range(rounds):
        for label in ("checked", "unchecked"):
            if label == "unchecked":
                for record, aside in moves:
                    os.replace(record, aside)
            digests._verified.clear()  # each round checks again (a process checks each version once)
            started = time.perf_counter()
            load()
            best[label] = min(best[label], time.perf_counter() - started)
            if label == "unchecked":
                for record, aside in moves:
                    os.replace(aside, record)
    return best


def index_folder(work: Path, entries: int, dim: int = 256) -> Path:
    from videotext.search.entries import Entry
    from videotext.search.index import Index

    rng = np.random.default_rng(0)
    index = Index(dim, model="bench", kind="flat")
    for start in range(0, entries, 100_000):
        count = min(100_000, entries - start)
        vectors = rng.standard_normal((count, dim), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        index.add(vectors, [Entry(f"v{i}", path=f"/videos/v{i % 5000}.mp4", start=float(i % 60), end=float(i % 60 + 4),
                                  video_id=f"v{i % 5000}") for i in range(start, start + count)])
    folder = index.save(work / "index")
    del index
    return folder


def checkpoint_folder(work: Path, gigabytes: float) -> tuple[Path, torch.nn.Module]:
    from videotext.train.checkpoint import save_checkpoint

    per_layer = 4096 * 4096  # 64 MB of float32 per layer
    layers = max(1, round(gigabytes * (1 << 30) / (per_layer * 4)))
    model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096, bias=False) for _ in range(layers)])
    folder = save_checkpoint(work / "run" / "checkpoints" / "last", model, {"method": "bench", "step": 1},
                             {"step": 1, "scheduler": {"last_epoch": 1}})
    return folder, model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--gigabytes", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "digests.json")
    args = parser.parse_args()
    from videotext.search.index import open_store
    from videotext.train.checkpoint import load_meta, load_state, load_weights

    speeds = hash_speed()
    print(f"hashing 256 MB: crc32 {speeds['crc32']:.0f} MB/s, sha256 {speeds['sha256']:.0f} MB/s "
          f"({speeds['crc32'] / speeds['sha256']:.2f}x); {load_average()}")
    work = Path(tempfile.mkdtemp(prefix="bench-digests-"))
    report = {"machine": platform.processor() or platform.machine(), "hash_mb_per_s": speeds}
    try:
        folder = index_folder(work, args.entries)
        size = sum(p.stat().st_size for p in folder.iterdir() if not p.name.startswith("."))
        load = lambda: len(open_store(folder))  # noqa: E731
        best = timed_pair(load, folder, args.rounds)
        report["index"] = {"entries": args.entries, "bytes": size, **best, "ratio": best["checked"] / best["unchecked"],
                           "load": load_average()}
        print(f"index of {args.entries} entries ({size / 1e9:.2f} GB): open_store {best['checked']:.2f} s checked, "
              f"{best['unchecked']:.2f} s unchecked: {best['checked'] / best['unchecked']:.2f}x; {load_average()}")
        shutil.rmtree(folder)

        folder, model = checkpoint_folder(work, args.gigabytes)
        size = sum(p.stat().st_size for p in folder.iterdir() if not p.name.startswith("."))
        load = lambda: (load_weights(folder, model), load_state(folder), load_meta(folder))  # noqa: E731
        best = timed_pair(load, folder, args.rounds)
        report["checkpoint"] = {"bytes": size, **best, "ratio": best["checked"] / best["unchecked"],
                                "load": load_average()}
        print(f"checkpoint of {size / 1e9:.2f} GB: weights + state + meta {best['checked']:.2f} s checked, "
              f"{best['unchecked']:.2f} s unchecked: {best['checked'] / best['unchecked']:.2f}x; {load_average()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
