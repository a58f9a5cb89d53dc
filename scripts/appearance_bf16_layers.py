"""Which layers of the appearance network does bf16 hurt most? (why FP32_UNDER_BF16 is what it is)

    python scripts/appearance_bf16_layers.py VIDEO_FOLDER [--videos 40] [--size 128] [--top 10]

Decodes the centre frame of every second of the first `--videos` videos, runs the
fp32 network (batch norms folded, as extraction does), then for each convolution alone
rounds its weights to bf16 and prints 1 − the minimum cosine of the pooled features to
fp32, largest first; then the whole network under bf16 autocast, with and without the
layers of `FP32_UNDER_BF16` kept in fp32.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from videotext.data import video as V
from videotext.data.experts.appearance import (
    FP32_UNDER_BF16, build_efficientnet_lite0, center_crop_frames, fold_batch_norms, keep_in_fp32,
)
from videotext.data.media_files import find_videos


def pooled(network: torch.nn.Module, x: torch.Tensor, bf16: bool = False) -> torch.Tensor:
    """Pooled features [N, 1280] of normalised frames x [N, 3, S, S], 32 at a time."""
    out = []
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for start in range(0, len(x), 32):
            out.append(network.forward_head(network.forward_features(x[start : start + 32]), pre_logits=True).float())
    return torch.cat(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--videos", type=int, default=40)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    crops = []
    for path in sorted(find_videos(args.folder).values())[: args.videos]:
        times = np.arange(int(V.probe(path).duration)) + 0.5
        crops.append(center_crop_frames(V.read_frames(path, times, size=args.size), args.size))
    frames = torch.from_numpy(np.concatenate(crops)).permute(0, 3, 1, 2).float().div(255).sub(0.5).div(0.5)
    frames = frames.contiguous(memory_format=torch.channels_last)  # [N, 3, S, S], (x − 0.5) / 0.5
    network = build_efficientnet_lite0()
    fold_batch_norms(network)
    reference = pooled(network, frames)

    def loss(features: torch.Tensor) -> float:
        return 1.0 - float(torch.nn.functional.cosine_similarity(features, reference).min())

    rows = []
    for name, module in network.named_modules():
        if isinstance(module, torch.nn.Conv2d):
            saved = module.weight.detach().clone()
            with torch.no_grad():
                module.weight.copy_(saved.bfloat16().float())
            rows.append((loss(pooled(network, frames)), name, tuple(saved.shape)))
            with torch.no_grad():
                module.weight.copy_(saved)
    print(f"{len(frames)} frames at {args.size} px; 1 − min cosine to fp32 with one convolution's weights in bf16:")
    for value, name, shape in sorted(rows, reverse=True)[: args.top]:
        print(f"  {value:.2e}  {name} {shape}")
    print(f"every layer under bf16 autocast: {loss(pooled(network, frames, bf16=True)):.2e}")
    keep_in_fp32(network)
    print(f"with {', '.join(FP32_UNDER_BF16)} in fp32: {loss(pooled(network, frames, bf16=True)):.2e}")


if __name__ == "__main__":
    main()
