"""The synthetic long-video moment set and the learned head on it: what they cost and what the head finds.

    python bench/moments.py set      # the set's sizes, its rendering cost (recorded while rendering) and
                                     # the extraction cost per hour of video, measured on a few test videos
    nice -n 19 python bench/moments.py train --seeds 0,1,2     # moment_detr/synthetic, one seed at a time

`set` reads the manifest made by ``videotext synth data/moments --moments`` (its meta records the
rendering CPU seconds of every video, counted in the worker that rendered it) and extracts the
demo's experts (appearance at 96 px, motion at 64 px with 3 frames a step, audio; one step a
second) for the `--extract-videos` shortest test videos in this process, timing its CPU, into a
scratch store. It writes ``results/benchmark/moments/set.json``.

`train` trains `moment_detr/synthetic` on the set's train split, selecting on val (`train.threads=1`),
resumes a seed that was stopped, then predicts the test split once with the selected weights and
writes, per seed, ``results/benchmark/moments/moment_detr/seed_S.json`` (test metrics from
`videotext.eval.moments`, training and prediction CPU seconds, the validation curve) and
``predictions_seed_S.jsonl`` (every test query's spans, best first, in QVHighlights' submission
format: {"qid", "query", "vid", "pred_relevant_windows": [[start, end, score], ...]}). Run directories
go to runs/moments/moment_detr/seed_S. The figures the docs quote are under ``results.moment_detr.table``
(keys without dots: R1_30 = R1@0.3 …).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from videotext.io import write_json  # noqa: E402

RECORDS = ROOT / "results" / "benchmark" / "moments"
EXTRACT_OPTIONS = {"appearance": {"input_size": 96}, "motion": {"flow_size": 64, "frames_per_step": 3}}
EXPERTS = ["appearance", "motion", "audio"]
#: citable names (no dots) of the moment metrics, as the docs quote them
TABLE = {"R1_30": "R1@0.3", "R1_50": "R1@0.5", "R1_70": "R1@0.7", "R5_30": "R5@0.3", "R5_50": "R5@0.5",
         "R5_70": "R5@0.7", "mIoU": "mIoU", "mAP_50": "mAP@0.5", "mAP_75": "mAP@0.75", "mAP": "mAP"}


def machine() -> dict:
    return {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def _shown(path: Path) -> str:
    """`path` relative to the repository when it is inside it (records name no machine's folders)."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def distractors_per_query(dataset) -> list[int]:
    """Per query: events of its video that share its object (another action) or its action (a look of the
    same colour or shape), as `videotext.data.synthetic.moments` counts them."""
    from videotext.data.synthetic.moments import _distractors

    out = []
    for video in dataset:
        counts: dict[tuple, int] = {}
        spans: dict[tuple, list] = {}
        for e in video.meta["events"]:
            kind = (e["colour"], e["shape"], e["action"])
            counts[kind] = counts.get(kind, 0) + 1
            spans.setdefault(kind, []).append((e["start"], e["end"]))
        for moment in video.moments:
            kind = next(k for k, s in spans.items() if sorted(s) == sorted(moment.spans))
            out.append(_distractors(kind, counts))
    return out


def measure_set(manifest: Path, extract_videos: int) -> dict:
    import numpy as np

    from videotext.data.experts import extract_features
    from videotext.data.schema import VideoTextDataset

    dataset = VideoTextDataset.load(manifest)
    meta = dataset.meta
    durations = [v.duration for v in dataset]
    spans = [len(m.spans) for v in dataset for m in v.moments]
    distractors = distractors_per_query(dataset)
    test = sorted(dataset.split("test"), key=lambda v: v.duration)[:extract_videos]
    scratch = Path(tempfile.mkdtemp(prefix="moments-extract-"))
    try:
        subset = dataset.subset([v.id for v in test], "extract-sample")
        cpu, wall = time.process_time(), time.perf_counter()
        summary = extract_features(subset, EXPERTS, scratch / "features", rate=1.0, workers=0, threads=1,
                                   progress=False, options=EXTRACT_OPTIONS)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    hours = sum(v.duration for v in test) / 3600
    total_hours = sum(durations) / 3600
    record = {
        "manifest": _shown(manifest), "seed": meta["seed"], "sizes": meta["sizes"],
        "videos": len(dataset), "hours": round(total_hours, 3),
        "minutes": {"min": min(durations) / 60, "median": float(np.median(durations)) / 60, "max": max(durations) / 60},
        "spans_per_query": {str(n): spans.count(n) for n in sorted(set(spans))},
        "distractors_per_query": {"min": int(min(distractors)), "median": float(np.median(distractors)),
                                  "max": int(max(distractors))},
        "render": {"cpu_s": meta["cost"]["render_cpu_s"], "cpu_s_per_hour": meta["cost"]["render_cpu_s"] / total_hours,
                   "size": meta["size"], "fps": meta["fps"], "rendered_videos": meta["cost"]["rendered_videos"]},
        "extract": {"experts": EXPERTS, "options": EXTRACT_OPTIONS, "videos": len(test), "hours": round(hours, 4),
                    "cpu_s": round(cpu, 1), "wall_s": round(wall, 1), "cpu_s_per_hour": round(cpu / hours, 1),
                    "failed": summary["failed"], "threads": 1, "workers": 0},
        "machine": machine(),
    }
    record["extract"]["cpu_s_whole_set"] = round(record["extract"]["cpu_s_per_hour"] * total_hours, 0)
    write_json(RECORDS / "set.json", record)
    return record


def train_seed(seed: int, manifest: Path, features: Path, overrides: list[str], runs: Path) -> dict:
    from videotext.config import load_config
    from videotext.eval.moment_eval import predict_moments, predictions_records
    from videotext.eval.moments import moment_metrics
    from videotext.train.trainer import Trainer, read_metrics_log

    settings = [f"data.manifest={manifest}", f"data.features={features}", "train.threads=1", f"train.seed={seed}",
                *overrides]
    shown = [f"data.manifest={_shown(manifest)}", f"data.features={_shown(features)}", *settings[2:]]
    config = load_config("moment_detr/synthetic", settings)
    run_dir = runs / f"seed_{seed}"
    trainer = Trainer(config, run_dir, resume=(run_dir / "checkpoints" / "last").exists(), progress=False)
    result = trainer.fit()  # the test split once, with the weights selected on val, now loaded
    test = trainer.data.split(config.data.test_split)
    cpu = time.process_time()
    predictions, _, _ = predict_moments(trainer.method, test, trainer.data.read_features, device=trainer.device)
    predict_cpu = time.process_time() - cpu
    again = moment_metrics(predictions, {q.qid: q.spans for q in test.moment_queries()})
    assert all(abs(again[k] - result["moments"][k]) < 1e-9 for k in result["moments"]), "predictions differ from the test"
    lines = predictions_records(test, predictions)
    path = RECORDS / "moment_detr" / f"predictions_seed_{seed}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    log = read_metrics_log(run_dir)
    train = [line for line in log if line["kind"] == "train"]
    val = [line for line in log if line["kind"] == "val"]
    record = {
        "benchmark": "moments", "row": "moment_detr", "seed": seed, "config": "moment_detr/synthetic",
        "overrides": shown, "epochs": config.train.epochs, "threads": 1, "select_metric": config.train.select_metric,
        "best_step": result["best_step"], "test_split": config.data.test_split,
        "results": {"moment_detr": {"moments": result["moments"], "highlight": result["highlight"],
                                    "highlight_truth": result["highlight_truth"], "n_queries": result["n_queries"],
                                    "n_videos": result["n_videos"],
                                    "table": {k: result["moments"][v] for k, v in TABLE.items()}}},
        "parameters": sum(p.numel() for p in trainer.method.parameters()),
        "trainable_parameters": sum(p.numel() for p in trainer.method.parameters() if p.requires_grad),
        "train_cpu_s": train[-1]["train_cpu_s"], "train_s": train[-1]["train_s"], "predict_test_cpu_s": round(predict_cpu, 1),
        "val_curve": [[line["epoch"], line["moments"]["mAP"], line["moments"]["R1@0.5"]] for line in val],
        "predictions": str(path.relative_to(ROOT)), "machine": machine(),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json(RECORDS / "moment_detr" / f"seed_{seed}.json", record)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("set", help="sizes and costs of the set")
    one.add_argument("--manifest", type=Path, default=ROOT / "data" / "moments" / "manifest.json")
    one.add_argument("--extract-videos", type=int, default=4)
    two = sub.add_parser("train", help="moment_detr on the set, one seed at a time")
    two.add_argument("--manifest", type=Path, default=ROOT / "data" / "moments" / "manifest.json")
    two.add_argument("--features", type=Path, default=ROOT / "data" / "moments" / "features")
    two.add_argument("--seeds", default="0,1,2")
    two.add_argument("--runs", type=Path, default=ROOT / "runs" / "moments" / "moment_detr")
    two.add_argument("--set", dest="overrides", action="append", default=[], help="config override a.b=value")
    args = parser.parse_args()
    if args.command == "set":
        print(json.dumps(measure_set(args.manifest, args.extract_videos), indent=1))
        return
    for seed in [int(s) for s in args.seeds.split(",")]:
        if (RECORDS / "moment_detr" / f"seed_{seed}.json").is_file():
            print(f"seed {seed}: recorded already")
            continue
        record = train_seed(seed, args.manifest.resolve(), args.features.resolve(), args.overrides, args.runs)
        print(f"seed {seed}: " + json.dumps(record["results"]["moment_detr"]["table"]) +
              f" train {record['train_cpu_s']:.0f} CPU-s", flush=True)


if __name__ == "__main__":
    main()
