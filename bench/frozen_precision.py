"""Benchmark: Frozen in Time video encoder inference, bf16 autocast vs our fp32 path.

Forward passes (encoding, `torch.inference_mode()`) of the space-time transformer at the
`small` and `base` presets on random clips, with `--precision fp32` (our fused-attention
fp32 path, which runs at the official code's speed: bench/frozen_attention.py) and
`--precision bf16` (`videotext.runtime.autocast`), and with the weights themselves cast
to bf16 (no per-op casts: what a deployment that only encodes can do), alternating on
the same weights and inputs; prints clips/s, the ratios, and the minimum cosine of each
bf16 output to fp32.

    python bench/frozen_precision.py                  # small (batch 16) and base (batch 2), 4 frames
    python bench/frozen_precision.py --presets base --steps 5
"""
from __future__ import annotations

import argparse
import copy
import json
import platform
import time
from pathlib import Path

import torch

from videotext.io import write_json
from videotext.models.frozen import PRESETS
from videotext.models.layers.space_time import SpaceTimeTransformer
from videotext.runtime import autocast, cpu_supports_bf16, set_threads

BATCH = {"small": 16, "base": 2}


def encode(model: SpaceTimeTransformer, clips: torch.Tensor, dtype: torch.dtype | None) -> tuple[float, torch.Tensor]:
    """Seconds of one forward pass and its fp32 output [B, D]."""
    start = time.perf_counter()
    with torch.inference_mode(), autocast(dtype):
        out = model(clips.to(next(model.parameters()).dtype))
    return time.perf_counter() - start, out.float()


def bench_preset(preset: str, batch: int, frames: int, steps: int) -> dict:
    size = PRESETS[preset]
    torch.manual_seed(0)
    model = SpaceTimeTransformer(size["img_size"], size["patch_size"], size["video_dim"], size["depth"],
                                 size["heads"], max_frames=frames, time_init="random").eval()
    model.set_fused(True)
    clips = torch.randn(batch, frames, 3, size["img_size"], size["img_size"])
    models = {"fp32": (model, None), "bf16": (model, torch.bfloat16),
              "bf16_weights": (copy.deepcopy(model).to(torch.bfloat16), None)}
    best = {name: float("inf") for name in models}
    outputs = {}
    for step in range(steps + 1):  # step 0 warms up; alternate so load drift hits all alike
        for name, (network, dtype) in models.items():
            seconds, outputs[name] = encode(network, clips, dtype)
            if step > 0:
                best[name] = min(best[name], seconds)
    speed = {name: batch / seconds for name, seconds in best.items()}
    cosine = {name: float(torch.nn.functional.cosine_similarity(outputs["fp32"], outputs[name], dim=1).min())
              for name in ("bf16", "bf16_weights")}
    return {"preset": preset, "batch": batch, "frames": frames, "clips_per_s": speed,
            "over_fp32": {name: speed[name] / speed["fp32"] for name in cosine}, "min_cosine": cosine}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["small", "base"], choices=sorted(PRESETS))
    parser.add_argument("--frames", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = the physical cores)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "frozen_precision.json"))
    args = parser.parse_args()
    threads = set_threads(args.threads)
    rows = []
    print(f"Frozen video encoder inference, {args.frames} frames, {threads} threads, "
          f"CPU bf16: {cpu_supports_bf16()}")
    for preset in args.presets:
        row = bench_preset(preset, BATCH.get(preset, 4), args.frames, args.steps)
        rows.append(row)
        s, r, c = row["clips_per_s"], row["over_fp32"], row["min_cosine"]
        print(f"  {preset:5s} batch {row['batch']:2d}: fp32 {s['fp32']:7.2f} clips/s | bf16 autocast {s['bf16']:7.2f} "
              f"({r['bf16']:.2f}x, min cos {c['bf16']:.5f}) | bf16 weights {s['bf16_weights']:7.2f} "
              f"({r['bf16_weights']:.2f}x, min cos {c['bf16_weights']:.5f})")
    write_json(args.out, {"bench": "frozen_precision", "rows": rows, "threads": threads,
                          "torch": torch.__version__, "machine": platform.machine()})
    print(json.dumps({"written": args.out}))


if __name__ == "__main__":
    main()
