"""Benchmark: space-time transformer training throughput, fused vs plain attention.

Forward + backward of the Frozen in Time video encoder (`small` preset by default:
4 blocks, D = 192, 3 heads, P = 8, 64×64 frames, 4 frames) on random clips, with
`scaled_dot_product_attention` and with the einsum softmax attention, in one process
on the same weights; checks that both give the same output, prints clips/s and the
ratio, and writes JSON.

    python bench/frozen_attention.py                      # small preset, batch 16, 4 frames
    python bench/frozen_attention.py --preset base --batch 2 --frames 4 --steps 2
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from videotext.io import write_json
from videotext.models.frozen import PRESETS
from videotext.models.layers.space_time import SpaceTimeTransformer


def one_step(model: SpaceTimeTransformer, clips: torch.Tensor) -> float:
    """Seconds of one forward + backward."""
    start = time.perf_counter()
    model(clips).square().mean().backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def throughput(model: SpaceTimeTransformer, clips: torch.Tensor, steps: int) -> dict[str, float]:
    """Clips/s of each attention, best of `steps` steps taken alternately (so machine-load drift
    hits both alike), after one warm-up step each."""
    best = {"plain": float("inf"), "fused": float("inf")}
    for step in range(steps + 1):
        for name in best:
            model.set_fused(name == "fused")
            seconds = one_step(model, clips)
            if step > 0:
                best[name] = min(best[name], seconds)
    return {name: clips.shape[0] / seconds for name, seconds in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small", choices=sorted(PRESETS))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--frames", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "frozen_attention.json"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    size = PRESETS[args.preset]
    torch.manual_seed(0)
    model = SpaceTimeTransformer(size["img_size"], size["patch_size"], size["video_dim"], size["depth"],
                                 size["heads"], max_frames=args.frames, time_init="random")
    clips = torch.randn(args.batch, args.frames, 3, size["img_size"], size["img_size"])
    with torch.no_grad():
        model.set_fused(True)
        fused_out = model(clips)
        model.set_fused(False)
        plain_out = model(clips)
    max_diff = float((fused_out - plain_out).abs().max())
    results = throughput(model, clips, args.steps)
    ratio = results["fused"] / results["plain"]
    report = {
        "bench": "frozen_attention", "preset": args.preset, "batch": args.batch, "frames": args.frames,
        "tokens_per_clip": 1 + args.frames * (size["img_size"] // size["patch_size"]) ** 2,
        "clips_per_s": results, "fused_over_plain": ratio, "max_abs_output_diff": max_diff,
        "threads": torch.get_num_threads(), "torch": torch.__version__, "machine": platform.machine(),
    }
    print(f"space-time transformer ({args.preset}, {args.frames} frames, batch {args.batch}) forward+backward:")
    print(f"  plain einsum attention : {results['plain']:8.2f} clips/s")
    print(f"  fused SDPA attention   : {results['fused']:8.2f} clips/s")
    print(f"  ratio fused / plain    : {ratio:8.2f}x   (max |Δ output| = {max_diff:.2e})")
    write_json(args.out, report)
    print(json.dumps({"written": args.out}))


if __name__ == "__main__":
    main()
