"""Benchmark: Frozen in Time video encoder inference, bf16 autocast vs our fp32 path.

Clip encoding (`FrozenInTime.encode_clips`, `torch.inference_mode()`) at the `small` and
`base` presets on random clips, three ways, alternating on the same weights and inputs:
`fp32` (our fused-attention fp32 path, which runs at the official code's speed:
bench/frozen_attention.py); `bf16 autocast` alone (`videotext.runtime.autocast`); and the
library's bf16 path, what `load_model(..., precision="bf16")` (and `auto` on a bf16 CPU) runs:
`cast_for_inference` stores the space-time tower's weights in bf16, under autocast. Prints
clips/s, the ratios, and the minimum cosine of each bf16 output to fp32.

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
from videotext.models import build_method
from videotext.models.frozen import PRESETS, FrozenInTime
from videotext.runtime import autocast, cpu_supports_bf16, set_threads

BATCH = {"small": 16, "base": 2}


def encode(method: FrozenInTime, clips: torch.Tensor, dtype: torch.dtype | None) -> tuple[float, torch.Tensor]:
    """Seconds of one clip encoding and its fp32 output [B, E]."""
    start = time.perf_counter()
    with torch.inference_mode(), autocast(dtype):
        out = method.encode_clips(clips)
    return time.perf_counter() - start, out.float()


def bench_preset(preset: str, batch: int, frames: int, steps: int) -> dict:
    size = PRESETS[preset]
    torch.manual_seed(0)
    method = build_method("frozen", {"preset": preset, "num_frames": frames, "freeze_text": True,
                                     "time_init": "random"}).eval()
    clips = torch.randn(batch, frames, 3, size["img_size"], size["img_size"])
    library = copy.deepcopy(method)
    library.cast_for_inference(torch.bfloat16)  # as load_model does under bf16
    models = {"fp32": (method, None), "bf16": (method, torch.bfloat16), "bf16_weights": (library, torch.bfloat16)}
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
              f"({r['bf16']:.2f}x, min cos {c['bf16']:.5f}) | library bf16 (weights) {s['bf16_weights']:7.2f} "
              f"({r['bf16_weights']:.2f}x, min cos {c['bf16_weights']:.5f})")
    write_json(args.out, {"bench": "frozen_precision", "rows": rows, "threads": threads,
                          "torch": torch.__version__, "machine": platform.machine()})
    print(json.dumps({"written": args.out}))


if __name__ == "__main__":
    main()
