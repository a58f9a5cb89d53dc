"""Benchmark: MMT's chunked mixture similarity (eq. 6) vs the per-pair computation.

The per-pair reference computes every (caption, video, expert) score and weight as a
[n_text, n_video, M] tensor, then reduces over experts (what the official
`sharded_cross_view_inner_product` does). The chunked version folds the weights into
the embeddings and needs two matrix products per chunk of captions. Both run in this
process on the same random embeddings (with missing experts); the script checks they
agree, prints the time ratio and writes JSON.

    python bench/mmt_similarity.py                      # 1 000 captions × 1 000 videos, 7 experts, d 512
    python bench/mmt_similarity.py --texts 5000 --videos 2000 --out /tmp/mmt_sim.json
"""
from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path
from typing import Callable

import torch

from videotext.io import write_json
from videotext.models.mmt import mixture_similarity, mixture_similarity_reference


def best_time(fn: Callable[[], torch.Tensor], repeat: int) -> tuple[torch.Tensor, float]:
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return out, min(times)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--videos", type=int, default=1000)
    parser.add_argument("--experts", type=int, default=7)  # MSR-VTT: 7 experts (§4.2)
    parser.add_argument("--dim", type=int, default=512)  # d_model (§4.2)
    parser.add_argument("--chunk", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "mmt_similarity.json")
    args = parser.parse_args(argv)

    g = torch.Generator().manual_seed(0)
    norm = torch.nn.functional.normalize
    text = {"experts": norm(torch.randn(args.texts, args.experts, args.dim, generator=g), dim=-1),
            "weights": torch.randn(args.texts, args.experts, generator=g).softmax(-1)}
    video = {"experts": norm(torch.randn(args.videos, args.experts, args.dim, generator=g), dim=-1),
             "available": (torch.rand(args.videos, args.experts, generator=g) > 0.2).float()}  # 20 % missing
    with torch.inference_mode():
        fast, fast_s = best_time(lambda: mixture_similarity(text, video, args.chunk), args.repeat)
        slow, slow_s = best_time(lambda: mixture_similarity_reference(text, video), args.repeat)
    max_diff = float((fast - slow).abs().max())
    per_pair_bytes = 3 * args.texts * args.videos * args.experts * 4  # scores, weights, product [T, V, M] fp32
    chunk_bytes = min(args.chunk, args.texts) * (args.experts * args.dim + 2 * args.videos) * 4
    result = {
        "texts": args.texts, "videos": args.videos, "experts": args.experts, "dim": args.dim, "chunk": args.chunk,
        "chunked_s": fast_s, "per_pair_s": slow_s, "speedup": slow_s / fast_s, "max_abs_diff": max_diff,
        "per_pair_temporaries_MB": per_pair_bytes / 2**20, "chunked_temporaries_MB": chunk_bytes / 2**20,
        "torch_threads": torch.get_num_threads(), "machine": platform.machine(), "torch": torch.__version__,
    }
    print(f"MMT similarity {args.texts} captions × {args.videos} videos, {args.experts} experts, d {args.dim}")
    print(f"  chunked   {fast_s * 1e3:8.1f} ms   (~{result['chunked_temporaries_MB']:.0f} MB temporaries per chunk)")
    print(f"  per-pair  {slow_s * 1e3:8.1f} ms   (~{result['per_pair_temporaries_MB']:.0f} MB of [T, V, M] tensors)")
    print(f"  speed-up  {result['speedup']:.1f}×   max |difference| {max_diff:.2e}")
    if max_diff > 1e-4:
        raise SystemExit(f"chunked and per-pair similarities differ by {max_diff}")
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
