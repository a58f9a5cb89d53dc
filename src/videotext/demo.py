"""`videotext demo`: the whole job end to end on data that ships with the project.

synthesize (or read Tux Paint) → extract features → train the baseline → select on
validation → test once → index the test videos → answer example queries → HTML report.
Data and features are cached under `data/` (both steps resume); the run directory is
made anew each time.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from videotext.config import PACKAGED, load_config
from videotext.data.experts import extract_features
from videotext.data.readers import read_dataset
from videotext.data.schema import VideoTextDataset
from videotext.data.synthetic import synthesize
from videotext.data.video import probe, read_frames
from videotext.errors import VideoTextError
from videotext.eval.evaluate import encode_split, evaluate_encoded, order_sensitive_mask
from videotext.eval.report import write_report
from videotext.inference import LoadedModel
from videotext.io import write_json
from videotext.train.trainer import Trainer, read_metrics_log

# the features the demo reads, beside the videos: their own folder, as a feature store refuses a second
# configuration and the benchmark's records (videotext.benchmark, folder `features`) were extracted
# with the appearance network at 128 px
DEMO_FEATURES = "demo-features"
# the demo's test split must hold >= 500 videos (a chance R@1 of <= 0.2 %); 2 000 videos
# split 64 / 10 / 26 give about 1 280 / 200 / 520
DEMO_VIDEOS = 2000
DEMO_SPLITS = (0.64, 0.10, 0.26)


def prepare_synthetic(data_dir: Path, videos: int, seed: int, progress: bool) -> Path:
    synthesize(data_dir, num_videos=videos, seed=seed, workers=2, progress=progress, split_fractions=DEMO_SPLITS)
    return data_dir / "manifest.json"


def prepare_tuxpaint(data_dir: Path, seed: int) -> Path:
    stamps = Path(os.environ.get("VIDEOTEXT_ASSETS", Path.home() / ".cache/videotext/debian")) / "tuxpaint" / "stamps"
    if not stamps.is_dir():
        raise VideoTextError(f"{stamps}: Tux Paint stamps not found; run `make assets` first")
    dataset = read_dataset("tuxpaint", stamps, seed=seed)
    dataset.root = stamps
    manifest = data_dir / "manifest.json"
    dataset.save(manifest)
    return manifest


def run_demo(data: str = "synthetic", out: str | Path = "runs/demo", videos: int = DEMO_VIDEOS, seed: int = 0,
             epochs: int | None = None, data_root: str | Path = "data", progress: bool = True,
             overrides: list[str] | None = None) -> dict[str, Any]:
    """Run the demo pipeline; returns the summary printed by the CLI."""
    timings: dict[str, float] = {}
    start = time.time()
    out = Path(out)
    if data == "synthetic":
        data_dir = Path(data_root) / f"synthetic-{videos}-seed{seed}"
        manifest = prepare_synthetic(data_dir, videos, seed, progress)
        config_file = PACKAGED / "dual" / "synthetic.yaml"
    elif data == "tuxpaint":
        data_dir = Path(data_root) / "tuxpaint"
        manifest = prepare_tuxpaint(data_dir, seed)
        config_file = PACKAGED / "dual" / "tuxpaint.yaml"
    else:
        raise VideoTextError(f"--data: expected synthetic or tuxpaint, got {data!r}")
    timings["data"] = time.time() - start

    features = data_dir / (DEMO_FEATURES if data == "synthetic" else "features")
    extra = [f"data.manifest={manifest.resolve()}", f"data.features={features.resolve()}",
             f"out_dir={out}"] + (["train.epochs=%d" % epochs] if epochs else []) + list(overrides or [])
    config = load_config(config_file, extra)
    tick = time.time()
    extract_features(manifest, config.data.experts, features, progress=progress,
                     **_extraction_options(data))
    timings["extract"] = time.time() - tick

    if out.exists():
        shutil.rmtree(out)
    tick = time.time()
    trainer = Trainer(config, out, progress=progress)
    test = trainer.fit()
    timings["train"] = time.time() - tick

    tick = time.time()
    summary = summarise(trainer, test, data)
    timings["report"] = time.time() - tick
    timings["total"] = time.time() - start
    summary["timings_s"] = {k: round(v, 1) for k, v in timings.items()}
    summary["serve_command"] = f"videotext serve {out / 'index'}"  # the search page over the demo index
    write_json(out / "demo_summary.json", summary)
    return summary


def _extraction_options(data: str) -> dict[str, Any]:
    """The synthetic videos are 128 px, 6 s, 8 fps: one step per second, the appearance network
    at 96 px and flow at 64 px keep extraction within the demo's budget on 2 cores. 96 px was
    chosen on the validation split (t2v geometric mean 90.7 at 96 px, 90.2 at 112 and at 128 px,
    the size the videos are made at) and reads 0.56x the pixels of 128. Two workers each decode
    and embed their own videos (`networks_in_workers`): for the appearance expert alone that ran
    1.25-1.55x faster than its network in the main process next to two decoding workers, and for
    the demo's three experts about as fast (bench/extract.py). Up to 32 frames per forward pass:
    at 128 px that ran 1.8x faster than 256 frames."""
    settings: dict[str, Any] = {"workers": 2, "batch_size": 32, "prefetch": 4, "networks_in_workers": True}
    if data != "synthetic":
        return settings
    return {**settings, "rate": 1.0, "options": {"appearance": {"input_size": 96},
                                     "motion": {"flow_size": 64, "frames_per_step": 3}}}


def summarise(trainer: Any, test: dict[str, Any], data: str) -> dict[str, Any]:
    """Test metrics with ranks, the order-dependent subset, example queries, and the report."""
    run_dir = trainer.run_dir
    test_set = trainer.data.split(trainer.config.data.test_split)
    encoded = encode_split(trainer.method, test_set, trainer.data.read_features, device=trainer.device)
    full = evaluate_encoded(trainer.method, encoded, return_ranks=True)
    n_videos = len(encoded.video_ids)
    chance_r1 = 100.0 / n_videos
    summary: dict[str, Any] = {
        "data": data, "test_videos": n_videos, "test_captions": len(encoded.refs),
        "t2v": test["t2v"], "v2t": test["v2t"], "chance_R1": chance_r1,
        "t2v_R1_over_chance": test["t2v"]["R1"] / chance_r1,
    }
    tables = {}
    order_mask = order_sensitive_mask(test_set, encoded)
    if order_mask.any() and not order_mask.all():
        ordered = evaluate_encoded(trainer.method, encoded, query_mask=order_mask)
        summary["order_dependent"] = {"t2v": ordered["t2v"], "v2t": ordered["v2t"],
                                      "n_captions": int(order_mask.sum())}
        tables[f"Captions whose meaning depends on event order only ({int(order_mask.sum())} queries)"] = {
            "t2v": ordered["t2v"], "v2t": ordered["v2t"]}

    examples = example_queries(trainer, test_set, encoded, full["ranks"]["t2v"])
    notes = [f"Method: {trainer.config.method}; data: {data}; test split: {n_videos} videos, "
             f"{len(encoded.refs)} captions (evaluated once, with the checkpoint selected on validation).",
             f"Chance text→video R@1 = {chance_r1:.3f} %; achieved {test['t2v']['R1']:.2f} % "
             f"= {summary['t2v_R1_over_chance']:.1f}× chance."]
    ranks = {"t2v": full["ranks"]["t2v"], "v2t": full["ranks"]["v2t"], "n_targets": n_videos}
    report = write_report(run_dir, title=f"videotext demo — {data}", metrics_log=read_metrics_log(run_dir),
                          test_metrics={"t2v": test["t2v"], "v2t": test["v2t"]}, ranks=ranks,
                          examples=examples, tables=tables, notes=notes)
    summary["report"] = str(report)
    summary["examples"] = [{"query": e["query"], "correct_rank": e.get("correct_rank"),
                            "top": [r["id"] for r in e["results"]]} for e in examples]
    return summary


def example_queries(trainer: Any, test_set: VideoTextDataset, encoded: Any, ranks: np.ndarray,
                    count: int = 6) -> list[dict[str, Any]]:
    """Search an index of the test videos with a few test captions; thumbnails for the report."""
    model = LoadedModel(trainer.run_dir, trainer.method, trainer.config, trainer.device)
    index = model.build_index(test_set, trainer.run_dir / "index", features_dir=trainer.config.data.features,
                              progress=False)
    picks = np.linspace(0, len(encoded.refs) - 1, count).astype(int)
    examples = []
    for i in picks:
        ref = encoded.refs[i]
        hits = model.search(ref.text, index, k=5)
        results = [{"id": h.id, "score": h.score, "start": h.start, "end": h.end,
                    "thumbnail": thumbnail(test_set, h.id)} for h in hits]
        examples.append({"query": ref.text, "correct_ids": [ref.video_id], "results": results,
                         "correct_rank": float(ranks[i])})
    return examples


def thumbnail(dataset: VideoTextDataset, video_id: str, size: int = 160) -> np.ndarray:
    """A frame from the middle of a video (or the image itself) as uint8 [H, W, 3]."""
    from PIL import Image

    video = dataset[video_id]
    path = dataset.media_path(video)
    if video.kind == "image":
        with Image.open(path) as img:
            img = img.convert("RGBA")
            background = Image.new("RGBA", img.size, (255, 255, 255, 255))
            img = Image.alpha_composite(background, img).convert("RGB")
            img.thumbnail((size, size))
            return np.asarray(img)

    info = probe(path)
    frame = read_frames(path, [info.duration / 2])[0]
    img = Image.fromarray(frame)
    img.thumbnail((size, size))
    return np.asarray(img)
