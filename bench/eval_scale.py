"""Benchmark: a 5 000 × 5 000 evaluation from features, end to end, fp32 vs `--precision auto`.

Encodes `--captions` captions (the demo's dual encoder: frozen MiniLM text tower, mean
pooling) and `--videos` videos (the demo's experts: appearance 1280, motion 80, audio
128, 6 steps each, random features), builds the [captions, videos] similarity and counts
t2v and v2t metrics (the one metric, both directions), once in fp32 (the reference)
and once at `--precision auto` (bf16 where the CPU has AVX512-BF16/AMX), in one
process on the same model and inputs. Prints seconds per stage, the totals, their
ratio, and the largest R@1 difference between the two. The Support-set paper reports
its 5 000 × 5 000 evaluation in under 30 s on a V100.

    python bench/eval_scale.py                     # 5 000 captions × 5 000 videos, 2 threads
    python bench/eval_scale.py --captions 1000 --videos 1000 --threads 1
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

from videotext.config import PACKAGED, load_config
from videotext.data.loaders import collate_video_features
from videotext.encode import encode_texts
from videotext.eval.retrieval import retrieval_metrics
from videotext.io import write_json
from videotext.models import build_method
from videotext.models.base import concat_embeddings
from videotext.runtime import autocast, full_precision, resolve_precision, set_threads, to_float32

CONFIG = PACKAGED / "dual" / "synthetic.yaml"  # the demo's config (configs live in the package)
DIMS = {"appearance": 1280, "motion": 80, "audio": 128}
WORDS = ("red blue green yellow purple orange circle square triangle star moves spins grows shrinks appears "
         "vanishes left right up down then after slowly quickly small large").split()


def captions(count: int, rng: np.random.Generator) -> list[str]:
    """Demo-like captions of 8 to 14 words."""
    return ["a " + " ".join(rng.choice(WORDS, size=rng.integers(8, 15))) for _ in range(count)]


def evaluate(method, texts: list[str], videos: list[dict], dtype, batch_size: int = 256) -> tuple[dict, dict]:
    """(seconds per stage, metrics) of one full evaluation at `dtype` (None = fp32)."""
    seconds, text_parts, video_parts = {}, [], []
    for module in method.modules():  # the frozen text tower caches outputs per caption: start cold
        if isinstance(getattr(module, "_cache", None), dict):
            module._cache.clear()
    with torch.inference_mode(), autocast(dtype):
        began = time.perf_counter()
        text_parts.append(encode_texts(method, texts, batch_size))  # the library's path (length-sorted batches)
        seconds["encode_text"] = time.perf_counter() - began
        began = time.perf_counter()
        for start in range(0, len(videos), batch_size):
            batch = collate_video_features(videos[start : start + batch_size], list(DIMS))
            video_parts.append(to_float32(method.encode_video(batch)))
        seconds["encode_video"] = time.perf_counter() - began
        began = time.perf_counter()
        with full_precision():
            sims = method.similarity(concat_embeddings(text_parts), concat_embeddings(video_parts)).float()
        seconds["similarity"] = time.perf_counter() - began
    began = time.perf_counter()
    relevant = np.arange(len(texts)) % len(videos)  # caption i describes video i mod n
    metrics = {"t2v": retrieval_metrics(sims, relevant)}
    inverse = [np.flatnonzero(relevant == v) for v in range(len(videos))]
    metrics["v2t"] = retrieval_metrics(sims.T, inverse)
    seconds["metrics"] = time.perf_counter() - began
    seconds["total"] = sum(seconds.values())
    return seconds, metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--captions", type=int, default=5000)
    parser.add_argument("--videos", type=int, default=5000)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = the physical cores)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "eval_scale.json"))
    args = parser.parse_args()
    threads = set_threads(args.threads)
    rng = np.random.default_rng(0)
    config = load_config(CONFIG)
    torch.manual_seed(0)
    method = build_method("dual", config.model, expert_dims=DIMS).eval()
    texts = captions(args.captions, rng)
    videos = [{name: rng.standard_normal((6, dim)).astype(np.float32) for name, dim in DIMS.items()}
              for _ in range(args.videos)]
    runs = {"fp32": None, "auto": resolve_precision("auto")}
    results = {}
    for name, dtype in runs.items():
        seconds, metrics = evaluate(method, texts, videos, dtype)
        results[name] = {"seconds": {k: round(v, 2) for k, v in seconds.items()},
                         "dtype": str(dtype or torch.float32), "t2v_R1": metrics["t2v"]["R1"],
                         "v2t_R1": metrics["v2t"]["R1"]}
        s = seconds
        print(f"{name:4s} ({results[name]['dtype']}): text {s['encode_text']:.1f}s  video {s['encode_video']:.1f}s  "
              f"similarity {s['similarity']:.2f}s  metrics both ways {s['metrics']:.2f}s  total {s['total']:.1f}s")
    ratio = results["fp32"]["seconds"]["total"] / results["auto"]["seconds"]["total"]
    r1 = max(abs(results["fp32"][k] - results["auto"][k]) for k in ("t2v_R1", "v2t_R1"))
    print(f"{args.captions} x {args.videos} on {threads} threads: fp32 {results['fp32']['seconds']['total']:.1f}s, "
          f"auto {results['auto']['seconds']['total']:.1f}s, ratio {ratio:.2f}x; max |Δ R@1| {r1:.2f} "
          f"(the Support-set paper: < 30 s on a V100)")
    write_json(args.out, {"bench": "eval_scale", "captions": args.captions, "videos": args.videos, "threads": threads,
                          "runs": results, "fp32_over_auto": ratio, "max_abs_R1_diff": r1,
                          "torch": torch.__version__, "machine": platform.machine()})
    print(json.dumps({"written": args.out}))


if __name__ == "__main__":
    main()
