"""Benchmark: the frozen text tower's cache fill before the first step, on a 200 000-caption manifest.

Writes a manifest of 10 000 videos with 20 captions each (MSR-VTT's shape: 200 000 captions of
5-14 words, 9.5 on average as MSR-VTT's 9.3, drawn from the synthetic vocabulary; no media), reads it back, and times what
the trainer runs before its first step (`videotext.train.trainer.frozen_text_caches`) for a `dual`
method with the shipped MiniLM frozen, at the method's measured inference precision (`auto`: bf16
on a CPU with AVX512-BF16 or AMX), with its progress bar. In the same run it times the
reference on a sample of the captions: the cache filled batch by batch as the training batches
ask (64 captions in training order, fp32), as the trainer did before the fill. Prints captions/s
of both, the ratio, and the whole fill's seconds.

    python bench/text_cache.py                       # 200 000 captions, reference on 4 096
    python bench/text_cache.py --videos 500 --sample 1024
"""
from __future__ import annotations

import argparse
import os
import platform
import random
import tempfile
import time
from pathlib import Path

import torch

from videotext.data.schema import Video, VideoTextDataset
from videotext.data.synthetic.vocab import COLOURS, SHAPES
from videotext.io import write_json
from videotext.models import build_method
from videotext.runtime import network_precision, set_threads
from videotext.text.encoder import CachedTextEncoder
from videotext.train.trainer import frozen_text_caches

WORDS = ["a", "the", "then", "and", "after", "that", "moves", "left", "right", "up", "down", "grows", "shrinks",
         "spins", "appears", "vanishes", "slowly", "quickly", "small", "large", "while", "next", "to",
         *COLOURS, *SHAPES]


def manifest(path: Path, videos: int, per_video: int, seed: int = 0) -> Path:
    """A manifest of `videos` media-less videos with `per_video` captions each (repeats are rare and
    encoded once, as the trainer encodes them)."""
    rng = random.Random(seed)
    items = []
    for v in range(videos):
        captions = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 14))) for _ in range(per_video)]
        items.append(Video(id=f"v{v:05d}", captions=captions, duration=10.0))
    dataset = VideoTextDataset("captions", items, {"train": [v.id for v in items]}, root=path.parent)
    dataset.save(path)
    return path


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=10_000)
    parser.add_argument("--per-video", type=int, default=20)
    parser.add_argument("--sample", type=int, default=4096, help="captions the reference fills")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: the physical cores)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "text_cache.json")
    args = parser.parse_args(argv)
    threads = set_threads(args.threads)
    load_start = os.getloadavg()

    with tempfile.TemporaryDirectory() as folder:
        path = manifest(Path(folder) / "manifest.json", args.videos, args.per_video)
        dataset = VideoTextDataset.load(path)
    split = dataset.split("train")
    captions = [c for video in split for c in video.captions]
    method = build_method("dual", {"freeze_text": True}, expert_dims={"a": 4}).train()
    dtype = network_precision("dual", "auto", torch.device("cpu"))
    tower = next(m for m in method.modules() if isinstance(m, CachedTextEncoder))

    # the reference: training-order batches of 64 at fp32, as the training batches asked before
    sample = captions[: args.sample]
    tower._cache.clear()
    tower.cache_dtype = None
    start = time.perf_counter()
    with torch.no_grad():
        for i in range(0, len(sample), 64):
            tower(tower.tokenize(sample[i : i + 64]))
    reference_s = time.perf_counter() - start
    reference_rate = len(sample) / reference_s

    tower._cache.clear()
    start = time.perf_counter()
    encoded = frozen_text_caches(method, dtype, [split], progress=True)
    fill_s = time.perf_counter() - start
    rate = encoded / fill_s
    results = {"benchmark": "frozen text cache fill before the first step", "captions": encoded,
               "videos": args.videos, "threads": threads, "precision": str(dtype or "fp32"),
               "fill_seconds": fill_s, "captions_per_s": rate,
               "reference": {"captions": len(sample), "seconds": reference_s, "captions_per_s": reference_rate},
               "speedup": rate / reference_rate, "machine": platform.processor() or platform.machine(),
               "load_average_start": list(load_start), "load_average_end": list(os.getloadavg())}
    print(f"fill: {encoded} captions in {fill_s:.1f} s ({rate:.0f} captions/s, {results['precision']}, "
          f"{threads} threads); reference (training-order batches of 64, fp32) {reference_rate:.0f} captions/s "
          f"on {len(sample)}: ×{results['speedup']:.2f}")
    write_json(args.out, results)
    print(f"wrote {args.out}")
    return results


if __name__ == "__main__":
    main()
