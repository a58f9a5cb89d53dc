"""Benchmark: does bf16 feature extraction change what a trained run retrieves?

    python bench/extract_precision.py [--run runs/demo] [--split test] [--out bench/results/extract_precision.json]

Extracts the split's videos twice with the run's own extraction settings and the demo's
runtime settings (`videotext.demo._extraction_options`: 2 workers that decode and embed
their own videos), once at `--precision fp32` and once at `bf16`, then evaluates the run's fp32 model
on each store. Prints, for every expert with a network, the per-step feature cosine (min
and mean over all steps), the video embeddings' cosine (min and mean), text→video and
video→text R@1 on both stores with their difference, and each extraction's videos/s. The
bar: embeddings within cosine 0.999, R@1 within 0.5. Needs a trained run whose
manifest points at videos (`make demo` writes runs/demo).
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch

from videotext.data.experts import extract_features
from videotext.data.features import FeatureStore
from videotext.io import write_json
from videotext.data.loaders import VideoFeatures
from videotext.demo import _extraction_options
from videotext.eval.protocols import evaluate_split
from videotext.inference import load_model
from videotext.data.run_data import RunData


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two [N, D] arrays (fp64); 1 where both rows are zero (a step without motion)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    both_zero = ~a.any(1) & ~b.any(1)
    return np.where(both_zero, 1.0, (a * b).sum(1) / np.maximum(norms, 1e-300))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", default="runs/demo")
    parser.add_argument("--split", default="test")
    parser.add_argument("--out", default="bench/results/extract_precision.json")
    args = parser.parse_args()
    model = load_model(args.run, precision="fp32")
    data = RunData(model.config)
    dataset = data.split(args.split)
    settings = {k: v for k, v in _extraction_options("").items() if k != "options"}  # workers, batch, prefetch
    results: dict = {"run": str(args.run), "split": args.split, "videos": len(dataset), **settings}
    stores, embeddings = {}, {}
    with tempfile.TemporaryDirectory(prefix="vt-precision-") as tmp:
        for precision in ("fp32", "bf16"):
            folder = Path(tmp) / precision
            summary = extract_features(dataset, model.experts, folder, progress=False, precision=precision,
                                       **settings, **model.extraction_settings())
            stores[precision] = store = FeatureStore(folder)
            reader = VideoFeatures(store, model.experts, model.config.data.max_steps_per_expert)
            with torch.inference_mode():
                metrics = evaluate_split(model.method, dataset, reader, device=model.device)
                embeddings[precision] = model.encode_videos(dataset, reader).float().numpy()
            results[precision] = {"videos_per_s": round(summary["videos_per_s"], 2),
                                  "t2v_R1": metrics["t2v"]["R1"], "v2t_R1": metrics["v2t"]["R1"]}
            print(f"{precision}: extraction {summary['videos_per_s']:.2f} videos/s; test t2v R@1 "
                  f"{metrics['t2v']['R1']:.2f}, v2t R@1 {metrics['v2t']['R1']:.2f}")
        for expert in model.experts:
            keys = sorted(stores["fp32"].keys(expert))
            a = np.concatenate([stores["fp32"].get(expert, k)[0] for k in keys])
            b = np.concatenate([stores["bf16"].get(expert, k)[0] for k in keys])
            c = cosines(a, b)
            results[f"{expert}_feature_cosine"] = {"min": float(c.min()), "mean": float(c.mean()), "steps": len(c)}
            print(f"{expert} features bf16 vs fp32: min cosine {c.min():.5f}, mean {c.mean():.6f} ({len(c)} steps)")
    c = cosines(embeddings["fp32"], embeddings["bf16"])
    results["video_embedding_cosine"] = {"min": float(c.min()), "mean": float(c.mean())}
    results["t2v_R1_difference"] = results["bf16"]["t2v_R1"] - results["fp32"]["t2v_R1"]
    results["v2t_R1_difference"] = results["bf16"]["v2t_R1"] - results["fp32"]["v2t_R1"]
    print(f"video embeddings (fp32 model) from bf16 vs fp32 features: min cosine {c.min():.5f}, mean {c.mean():.6f}; "
          f"R@1 bf16 − fp32: t2v {results['t2v_R1_difference']:+.2f}, v2t {results['v2t_R1_difference']:+.2f}")
    write_json(args.out, results)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
