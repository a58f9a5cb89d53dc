"""Benchmark: CLIP frame encoding (the `clip` expert's image tower), fp32 against bf16 autocast.

    python bench/clip_frames.py [--model ViT-B-32] [--batch 16] [--batches 3] [--out bench/results/clip_frames.json]

Random weights (the speed does not depend on them): frames/s of `encode_image` on
224×224 inputs in fp32 and under `torch.autocast(device, bfloat16)`, same process, same
inputs; prints both and the ratio, and the largest cosine distance between the two
(how much bf16 changes the embeddings). One warm-up batch each; keep it short on a shared CPU.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from videotext import openclip


def frames_per_second(model: torch.nn.Module, pixels: torch.Tensor, batches: int, bf16: bool) -> tuple[float, torch.Tensor]:
    device = pixels.device.type
    with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
        out = model(pixels).float()  # warm-up
        began = time.perf_counter()
        for _ in range(batches):
            out = model(pixels).float()
        seconds = time.perf_counter() - began
    return batches * len(pixels) / seconds, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="ViT-B-32")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    visual = openclip.load_clip(args.model).visual.to(args.device).eval()
    size = openclip.image_preprocess(args.model)["size"]
    pixels = torch.randn(args.batch, 3, size, size, generator=torch.Generator().manual_seed(0)).to(args.device)
    fp32, a = frames_per_second(visual, pixels, args.batches, bf16=False)
    bf16, b = frames_per_second(visual, pixels, args.batches, bf16=True)
    distance = float((1 - F.cosine_similarity(a, b, dim=-1)).max())
    result = {"model": args.model, "device": args.device, "threads": torch.get_num_threads(), "batch": args.batch,
              "batches": args.batches, "fp32_frames_per_s": round(fp32, 2), "bf16_frames_per_s": round(bf16, 2),
              "bf16_over_fp32": round(bf16 / fp32, 3), "max_cosine_distance": distance}
    print(f"{args.model} on {args.device} ({result['threads']} threads), batch {args.batch}: "
          f"fp32 {fp32:.1f} frames/s, bf16 autocast {bf16:.1f} frames/s, ratio {bf16 / fp32:.2f}x; "
          f"max cosine distance {distance:.2e}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
