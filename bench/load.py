"""Load test of the search service over loopback: N concurrent clients, M requests.

Starts `videotext serve INDEX` in a subprocess on a free loopback port (so the server's
memory is measured on its own and the client does not share its GIL), then 50 httpx
async clients send 2 000 requests: 80 % `/search` with captions stored in the index
(k=10), 10 % `/thumbnail`, 10 % `/health`. Reports throughput, latency p50/p95/p99,
the error count (non-2xx or transport errors) and the server's RSS before (after start
and a warm-up) and after, plus after a second identical round (memory must not grow).

    python bench/load.py runs/demo/index
    python bench/load.py runs/demo/index --clients 50 --requests 2000 --out bench/results/load.json
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import numpy as np


def request_paths(index_dir: Path, n: int, seed: int = 0) -> list[str]:
    """The request mix: search by stored captions, thumbnails of stored ids, health."""
    from videotext.search import Index

    ids, captions = [], []
    for entry in Index.load(index_dir).entries():  # any index format (entries.parquet, or the older JSON lines)
        ids.append(entry.id)
        captions.extend(entry.meta.get("captions") or [])
    captions = captions or ["a red circle moves to the left"]
    rng = random.Random(seed)
    paths = []
    for _ in range(n):
        roll = rng.random()
        if roll < 0.8:
            paths.append(f"/search?q={quote(rng.choice(captions))}&k=10")
        elif roll < 0.9 and ids:
            paths.append(f"/thumbnail/{quote(rng.choice(ids), safe='')}")
        else:
            paths.append("/health")
    return paths


async def run_load(client: httpx.AsyncClient, paths: list[str], clients: int) -> dict:
    """Send `paths` with `clients` concurrent workers; per-request latency and errors."""
    queue = iter(enumerate(paths))
    latencies = np.zeros(len(paths))
    errors: list[str] = []

    async def worker() -> None:
        for i, path in queue:  # a shared iterator: each request is taken once
            t = time.perf_counter()
            try:
                response = await client.get(path)
                if not 200 <= response.status_code < 300:
                    errors.append(f"{response.status_code} {path}")
            except httpx.HTTPError as err:
                errors.append(f"{type(err).__name__} {path}")
            latencies[i] = time.perf_counter() - t

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    wall = time.perf_counter() - start
    ms = latencies * 1e3
    return {"requests": len(paths), "clients": clients, "wall_s": wall, "throughput_rps": len(paths) / wall,
            "p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95)),
            "p99_ms": float(np.percentile(ms, 99)), "errors": len(errors), "error_samples": errors[:5]}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit("server did not become ready")


async def rounds(url: str, paths: list[str], clients: int, pid: int, warmup: list[str]) -> dict:
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        await run_load(client, warmup, min(clients, 8))
        before = rss_mb(pid)
        first = await run_load(client, paths, clients)
        after = rss_mb(pid)
        second = await run_load(client, paths, clients)
        after2 = rss_mb(pid)
    return {**first, "rss_mb_before": before, "rss_mb_after": after, "second_round": second,
            "rss_mb_after_second_round": after2}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index", type=Path)
    parser.add_argument("--run", type=Path, default=None, help="run dir (default: the index's)")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench/results/load.json")
    args = parser.parse_args()

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "videotext.cli", "serve", str(args.index), "--port", str(port)]
    if args.run:
        cmd += ["--run", str(args.run)]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(url, proc)
        paths = request_paths(args.index, args.requests, args.seed)
        result = asyncio.run(rounds(url, paths, args.clients, proc.pid, paths[:50]))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    result.update({"bench": "load", "index": str(args.index), "cpus": os.cpu_count(),
                   "omp_threads": env["OMP_NUM_THREADS"]})
    print(f"{result['requests']} requests, {result['clients']} clients: {result['throughput_rps']:.1f} req/s, "
          f"p50 {result['p50_ms']:.1f} ms, p95 {result['p95_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms, "
          f"errors {result['errors']}; server RSS {result['rss_mb_before']:.0f} → {result['rss_mb_after']:.0f} MB "
          f"(second round: {result['second_round']['throughput_rps']:.1f} req/s, "
          f"p95 {result['second_round']['p95_ms']:.1f} ms, errors {result['second_round']['errors']}, "
          f"RSS {result['rss_mb_after_second_round']:.0f} MB)")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from videotext.io import write_json

    write_json(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
