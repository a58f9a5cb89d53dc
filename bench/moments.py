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
(keys without dots: R1_30 = R1@0.3 …). `train --guide runs/moments/dual` trains row `moment_detr_guided`
instead (`moment_detr/synthetic`'s settings with the `dual` run of the same seed held frozen as the
head's guide, `--guide-context` steps a vector; runs in runs/moments/moment_detr_guided), then row
`moment_detr_saliency` from the same runs: the head's whole-video saliency as the step scores of the
span finder, its settings chosen on val (`saliency_spans`). `--epochs N` trains at another epoch cap
(the training-length rule's cure for a row still rising at its cap: docs/benchmark.md) as rows of their
own, `moment_detr_guided-N` and `moment_detr_saliency-N` (runs in runs/moments/moment_detr_guided-N).

    nice -n 19 python bench/moments.py search --seeds 0,1,2   # windows and training-free spans, per seed
    python bench/moments.py table                             # the rows side by side, paired
    python bench/moments.py diagnose RUN...                   # a moment_detr run in its oracle windows
    python bench/moments.py vary context_weight --epochs 60 --seeds 0,1,2,3,4   # a control of a saliency row

`search` answers the test queries as `videotext search` does today, within each query's own video
(`where video_id == ...`, as the field scores moment retrieval): with the demo's `dual` run trained
with seed S on the demo's data (`configs/dual/synthetic.yaml` over ``data/synthetic-2000-seed0``, which
`videotext demo` makes; `train.threads=1`, into runs/moments/dual/seed_S), it builds a `--window 10`
index of the test videos from the set's own features (their extraction settings are the demo's,
checked expert by expert, so nothing is extracted again) and asks each query twice:

    windows   `SearchableIndex.search(q, k=10)`: the index's 10-s windows (every 5 s), best first
    spans     `SearchableIndex.search(q, k=10, moments=True)`: spans from the moment track (`find_spans`
              with the library's defaults, chosen on other videos by bench/moment_spans.py)

Per seed it writes ``results/benchmark/moments/{windows,spans}/seed_S.json`` (metrics from
`videotext.eval.moments`, the run's training CPU-s, the index build's CPU-s, CPU-ms per query).
`table` reads the rows' records and writes ``results/benchmark/moments/table.json``: mean ± std
over seeds 0, 1, 2 (`TABLE_SEEDS`), and the paired differences between rows seed by seed with their
95 % Student-t interval (`videotext.eval.compare.paired_difference`); rows run on more seeds again
over all of theirs (`more_seeds`). `search --choose-on-val` adds row `spans_val`: the
moment track's context (`index build --moment-context`: 1, 3, 5 or 9 steps) and the six span
settings (`span_grid`) chosen together on the set's val split for each run (`spans_chosen_on_val`). `diagnose` reads
moment_detr runs in the window centred on each query's moment (`diagnose`), into
``results/benchmark/moments/diagnosis.json``. `vary NAME --epochs N` answers a saliency row's test queries
again with one span setting at each value of its grid, the others as each run chose them on val
(`vary_setting`, into ``results/benchmark/moments/moment_detr_saliency-N-by-NAME/``): a control, it
chooses nothing.
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
LONGEST = (0, 6)  # the longest proposal in steps, chosen on val with the rest: none (the library's default) or 6
CONTEXTS = (1, 3, 5, 9)  # moment-track contexts (`index build --moment-context`) row spans_val chooses among
#: citable names (no dots) of the moment metrics, as the docs quote them
TABLE = {"R1_30": "R1@0.3", "R1_50": "R1@0.5", "R1_70": "R1@0.7", "R5_30": "R5@0.3", "R5_50": "R5@0.5",
         "R5_70": "R5@0.7", "mIoU": "mIoU", "mAP_50": "mAP@0.5", "mAP_75": "mAP@0.75", "mAP": "mAP"}


def machine() -> dict:
    return {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def _shown(path: Path) -> str:
    """`path` relative to the repository when it is inside it (records name no machine's folders)."""
    path = Path(os.path.abspath(path))
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


def guide_settings(guide: Path | None, context: int) -> tuple[list[str], dict]:
    """Row `moment_detr_guided`: the overrides that load the `dual` runs under `guide` (seed_S for seed
    S) frozen into the head's guide, and that run's model config; none for row `moment_detr`."""
    if guide is None:
        return [], {}
    from videotext.config import read_config_file

    model = read_config_file(guide / "seed_0" / "config.yaml")["model"]  # the seeds differ in their seed only
    return [f"train.init_from={guide}", "train.init_into=guide", "train.freeze=[guide]", "model.guide_method=dual",
            f"model.guide_context={context}"], model


def head_rows(guided: bool, epochs: int | None) -> tuple[str, str]:
    """The rows a training writes: the head's own spans and its saliency decoding (guided runs only);
    a cap other than the config's 30 epochs is a row of its own, named with it (`moment_detr_guided-60`)."""
    tail = f"-{epochs}" if epochs else ""
    return ("moment_detr_guided" if guided else "moment_detr") + tail, "moment_detr_saliency" + tail


def train_seed(seed: int, manifest: Path, features: Path, overrides: list[str], runs: Path,
               guide: Path | None = None, guide_context: int = 1, epochs: int | None = None) -> dict:
    from videotext.config import load_config
    from videotext.eval.moment_eval import predict_moments, predictions_records
    from videotext.eval.moments import moment_metrics
    from videotext.train.trainer import Trainer, read_metrics_log

    row = head_rows(guide is not None, epochs)[0]
    guided, guide_model = guide_settings(guide, guide_context)
    settings = [f"data.manifest={manifest}", f"data.features={features}", "train.threads=1", f"train.seed={seed}",
                *guided, *([f"train.epochs={epochs}"] if epochs else []), *overrides]
    shown = [f"data.manifest={_shown(manifest)}", f"data.features={_shown(features)}", *settings[2:]]
    shown = [f"train.init_from={_shown(guide)}" if s.startswith("train.init_from=") else s for s in shown]
    config = load_config("moment_detr/synthetic", settings)
    if guide_model:
        config.model["guide_model"] = guide_model
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
    path = RECORDS / row / f"predictions_seed_{seed}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    log = read_metrics_log(run_dir)
    train = [line for line in log if line["kind"] == "train"]
    val = [line for line in log if line["kind"] == "val"]
    record = {
        "benchmark": "moments", "row": row, "seed": seed, "config": "moment_detr/synthetic",
        "overrides": shown, "epochs": config.train.epochs, "threads": 1, "select_metric": config.train.select_metric,
        "best_step": result["best_step"], "test_split": config.data.test_split,
        "results": {row: {"moments": result["moments"], "highlight": result["highlight"],
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
    write_json(RECORDS / row / f"seed_{seed}.json", record)
    return record


DEMO_DATA = ROOT / "data" / "synthetic-2000-seed0"  # `videotext demo` (make demo) makes it
ROWS = ("windows", "spans", "spans_val", "moment_detr", "moment_detr_guided", "moment_detr_saliency",
        "moment_detr_guided-60", "moment_detr_saliency-60")
PAIRS = (("spans", "windows"), ("spans_val", "windows"), ("spans_val", "spans"), ("moment_detr", "spans"),
         ("moment_detr", "spans_val"), ("moment_detr", "windows"), ("moment_detr_guided", "spans_val"),
         ("moment_detr_guided", "moment_detr"), ("moment_detr_guided", "windows"),
         ("moment_detr_saliency", "spans_val"), ("moment_detr_saliency", "moment_detr_guided"),
         ("moment_detr_saliency", "windows"), ("moment_detr_guided-60", "moment_detr_guided"),
         ("moment_detr_saliency-60", "moment_detr_saliency"), ("moment_detr_saliency-60", "spans_val"),
         ("moment_detr_guided-60", "spans_val"))
QUOTED = ("R1_50", "R1_70", "mAP")  # the columns of the table
TABLE_SEEDS = (0, 1, 2)  # the table's seeds, every row; rows run on more seeds get a section of their own


def same_extraction(a: Path, b: Path) -> dict:
    """Each expert's extraction config in feature stores `a` and `b`; an error where they differ (the
    run would read features unlike those it was trained on)."""
    from videotext.data.features import FeatureStore

    out = {}
    for expert in EXPERTS:
        left, right = (FeatureStore(path).info(expert)["config"] for path in (a, b))
        if left != right:
            raise SystemExit(f"{expert}: {a} holds {left}, {b} holds {right}: not the features the run reads")
        out[expert] = left
    return out


def train_dual(seed: int, demo_data: Path, runs: Path) -> Path:
    """The demo's `dual` run (its config, its data) with `seed`, one thread; resumed when stopped."""
    from videotext.config import PACKAGED, load_config
    from videotext.train.trainer import Trainer

    run_dir = runs / f"seed_{seed}"
    if (run_dir / "test_metrics.json").is_file():
        return run_dir
    config = load_config(PACKAGED / "dual" / "synthetic.yaml", [
        f"data.manifest={demo_data / 'manifest.json'}", f"data.features={demo_data / 'demo-features'}",
        f"train.seed={seed}", "train.threads=1", f"out_dir={run_dir}"])
    Trainer(config, run_dir, resume=(run_dir / "checkpoints" / "last").exists(), progress=False).fit()
    return run_dir


def linked_store(features: Path, folder: Path) -> Path:
    """A feature store folder whose expert files link to `features`' (the index build records its
    sources beside them there, never in the set's own store)."""
    folder.mkdir(parents=True, exist_ok=True)
    for expert in EXPERTS:
        link = folder / f"{expert}.h5"
        if not link.exists():
            link.symlink_to((features / f"{expert}.h5").resolve())
    return folder


def answers(index_folder: Path, queries: list, moments: bool) -> tuple[dict, float]:
    """Each query's top 10 (start, end, score) within its own video, and the CPU-ms per query."""
    import videotext

    opened = videotext.open_index(index_folder, threads=1).warm()
    opened.search(queries[0].query, k=10, moments=moments)  # the first query's one-off loads
    predictions, cpu = {}, time.process_time()
    for q in queries:
        hits = opened.search(q.query, k=10, where=f'video_id == "{q.video.id}"', moments=moments)
        predictions[q.qid] = [(hit.start, hit.end, hit.score) for hit in hits]
    return predictions, 1000 * (time.process_time() - cpu) / len(queries)


def search_seed(seed: int, manifest: Path, features: Path, demo_data: Path, runs: Path) -> dict:
    """Rows `windows` and `spans` for the run of `seed` (module docstring)."""
    import torch

    import videotext
    from videotext.data.schema import VideoTextDataset
    from videotext.eval.moments import moment_metrics
    from videotext.train.trainer import read_metrics_log

    torch.set_num_threads(1)
    extraction = same_extraction(demo_data / "demo-features", features)
    run_dir = train_dual(seed, demo_data, runs / "dual")
    train = [line for line in read_metrics_log(run_dir) if line["kind"] == "train"][-1]
    dataset = VideoTextDataset.load(manifest)
    test = dataset.split("test")
    index_folder = runs / "index" / f"seed_{seed}"
    if (index_folder / "published.json").is_file():
        shutil.rmtree(index_folder)  # built again, so that its cost is measured
    store = linked_store(features, runs / "index-features")
    cpu, wall = time.process_time(), time.perf_counter()
    report = videotext.build_index(str(run_dir), test, index_folder, features=store, window=10.0, progress=False,
                                   threads=1)
    build = {"cpu_s": round(time.process_time() - cpu, 1), "wall_s": round(time.perf_counter() - wall, 1),
             "report": [line.replace(str(ROOT) + "/", "") for line in report.lines()]}
    queries = test.moment_queries()
    truth = {q.qid: q.spans for q in queries}
    demo_meta, set_meta = (VideoTextDataset.load(m).meta for m in (demo_data / "manifest.json", manifest))
    common = {
        "benchmark": "moments", "seed": seed, "test_split": "test", "run": _shown(run_dir),
        "run_config": "dual/synthetic (the demo's)", "train_data": _shown(demo_data),
        "train_cpu_s": train["train_cpu_s"], "train_s": train["train_s"], "threads": 1,
        "index": {"window_s": 10.0, "stride_s": 5.0, "videos": len(test), "hours": round(sum(v.duration for v in test) / 3600, 3),
                  "build": build},
        "features": {"extraction": extraction, "same_as_the_run_reads": True,
                     "rendered": {"set": {"size": set_meta["size"], "fps": set_meta["fps"]},
                                  "run_data": {"size": demo_meta["size"], "fps": demo_meta["fps"]}}},
        "machine": machine(), "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    records = {}
    for row, moments in (("windows", False), ("spans", True)):
        predictions, per_query = answers(index_folder, queries, moments)
        metrics = moment_metrics(predictions, truth)
        record = {**common, "row": row, "query": "SearchableIndex.search(q, k=10, where=its video" +
                  (", moments=True)" if moments else ")"), "cpu_ms_per_query": round(per_query, 2),
                  "results": {row: {"moments": metrics, "n_queries": len(queries), "n_videos": len(test),
                                    "table": {k: metrics[v] for k, v in TABLE.items()}}}}
        write_json(RECORDS / row / f"seed_{seed}.json", record)
        records[row] = record
    return records


def span_grid() -> dict:
    """The span settings chosen on val: the grid of bench/moment_spans.py (the library's defaults were
    chosen from it) and the longest proposal (`LONGEST`, a length prior, so the data's to choose)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from moment_spans import GRID  # noqa: E402

    return {**GRID, "max_steps": list(LONGEST)}


def choose_span_settings(rows: list, truth: dict) -> tuple[tuple, list]:
    """The grid `span_grid()` over the queries `rows` ([(qid, (scores, starts, ends))]):
    (the best (key, settings, metrics) by R1@0.5 then mAP, on a tie the grid's first, so the cheaper;
    every entry of the grid)."""
    import itertools

    from videotext.eval.moments import moment_metrics
    from videotext.eval.span_finder import SpanSettings, find_spans

    GRID = span_grid()
    grid = []
    for values in itertools.product(*GRID.values()):
        settings = SpanSettings(**dict(zip(GRID, values)))
        predictions = {qid: [(s.start, s.end, s.score) for s in find_spans(*track, k=10, settings=settings)]
                       for qid, track in rows}
        metrics = moment_metrics(predictions, truth)
        grid.append(((metrics["R1@0.5"], metrics["mAP"]), values, metrics))
    return max(grid, key=lambda item: item[0]), grid  # max keeps the first of equals


def saliency_tracks(run_dir: Path, manifest: Path, features: Path):
    """The set, and a function of a split: the saliency of run_dir's head over each query's whole video
    (every window read with the query, overlaps averaged: `predict_moments`) as span finder tracks
    [(qid, (scores, starts, ends))], the truth {qid: spans} and the CPU-s it took."""
    import numpy as np

    from videotext.data.features import FeatureStore
    from videotext.data.loaders import VideoFeatures
    from videotext.data.schema import VideoTextDataset
    from videotext.eval.moment_eval import predict_moments
    from videotext.run_model import load_run

    method = load_run(run_dir, checkpoint="best", threads=1, device="cpu").method
    dataset = VideoTextDataset.load(manifest)
    read_features = VideoFeatures(FeatureStore(features), method.experts, None)

    def tracks(split: str) -> tuple[list, dict, float]:
        queries = dataset.split(split).moment_queries()
        cpu = time.process_time()
        _, saliency, steps = predict_moments(method, dataset.split(split), read_features, queries=queries)
        rows = []
        for q in queries:
            scores, step = np.asarray(saliency[q.qid], np.float32), steps[q.qid]
            starts = np.arange(len(scores), dtype=np.float32) * step
            rows.append((q.qid, (scores, starts, starts + step)))
        return rows, {q.qid: q.spans for q in queries}, time.process_time() - cpu

    return dataset, tracks


def vary_setting(seed: int, name: str, manifest: Path, features: Path, runs: Path, epochs: int | None) -> dict:
    """The control of row `moment_detr_saliency` (or `-EPOCHS`): its test queries answered again with one
    span setting at each value of the grid, the others as the run chose them on val. It tells whether
    that setting, rather than the run, moves the row's figures; nothing here chooses anything."""
    from videotext.eval.moments import moment_metrics
    from videotext.eval.span_finder import SpanSettings, find_spans

    _, row = head_rows(True, epochs)
    base = RECORDS / row / f"seed_{seed}.json"
    if not base.is_file():
        raise SystemExit(f"{base}: run `train --guide ... --seeds {seed}` first (its choice is read here)")
    chosen = json.loads(base.read_text(encoding="utf-8"))["chosen"]
    if name not in chosen:
        raise SystemExit(f"--vary {name}: not a setting chosen on val ({', '.join(chosen)})")
    _, tracks = saliency_tracks(runs / f"seed_{seed}", manifest, features)
    test_rows, truth, predict_cpu = tracks("test")
    results = {}
    for value in span_grid()[name]:
        settings = SpanSettings(**{**chosen, name: value})
        predictions = {qid: [(h.start, h.end, h.score) for h in find_spans(*track, k=10, settings=settings)]
                       for qid, track in test_rows}
        metrics = moment_metrics(predictions, truth)
        results[str(value).replace(".", "_")] = {"value": value, "table": {k: metrics[v] for k, v in TABLE.items()}}
    record = {"benchmark": "moments", "row": f"{row}-by-{name}", "seed": seed, "chosen": chosen, "varied": name,
              "results": results, "predict_test_cpu_s": round(predict_cpu, 1), "machine": machine(),
              "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_json(RECORDS / record["row"] / f"seed_{seed}.json", record)
    return record


def saliency_spans(seed: int, manifest: Path, features: Path, runs: Path, epochs: int | None = None) -> dict:
    """Row `moment_detr_saliency`: the guided head's saliency over each whole video (every window read
    with the query, overlaps averaged: `predict_moments`) as the step scores of the library's span
    finder, its six settings chosen on val as for `spans_val` (`choose_span_settings`), the test
    queries answered once. The same run as row `moment_detr_guided` (or `-EPOCHS`), decoded by its other head."""
    from videotext.eval.moments import moment_metrics
    from videotext.eval.span_finder import SpanSettings, find_spans

    GRID = span_grid()
    head_row, row = head_rows(True, epochs)
    base = RECORDS / head_row / f"seed_{seed}.json"
    if not base.is_file():
        raise SystemExit(f"{base}: run `train --guide ... --seeds {seed}` first (its run is read here)")
    dataset, tracks = saliency_tracks(runs / f"seed_{seed}", manifest, features)
    val_rows, val_truth, _ = tracks("val")
    cpu = time.process_time()
    best, grid = choose_span_settings(val_rows, val_truth)
    choose_cpu = time.process_time() - cpu
    chosen = SpanSettings(**dict(zip(GRID, best[1])))
    test_rows, test_truth, predict_cpu = tracks("test")
    cpu = time.process_time()
    predictions = {qid: [(h.start, h.end, h.score) for h in find_spans(*track, k=10, settings=chosen)]
                   for qid, track in test_rows}
    spans_cpu = time.process_time() - cpu
    metrics = moment_metrics(predictions, test_truth)
    head = json.loads(base.read_text(encoding="utf-8"))
    record = {
        "benchmark": "moments", "row": row, "seed": seed, "run": head["overrides"],
        "decoding": "find_spans over the head's whole-video saliency, settings chosen on val",
        "grid": GRID, "chosen": {k: getattr(chosen, k) for k in GRID},
        "val": {"n_queries": len(val_truth), "choose_cpu_s": round(choose_cpu, 1), "settings_tried": len(grid),
                "chosen": {k: best[2][v] for k, v in TABLE.items()}},
        "train_cpu_s": head["train_cpu_s"], "predict_test_cpu_s": round(predict_cpu + spans_cpu, 1),
        "results": {row: {"moments": metrics, "n_queries": len(test_truth),
                                             "n_videos": len(dataset.split("test")),
                                             "table": {k: metrics[v] for k, v in TABLE.items()}}},
        "machine": machine(), "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json(RECORDS / row / f"seed_{seed}.json", record)
    return record


def window_index(run_dir: Path, videos, store: Path, folder: Path, context: int) -> Path:
    """The `--window 10` index of `videos` for the run `run_dir`, its moment track of `context` steps
    a vector (built once, then reused)."""
    import videotext

    if not (folder / "published.json").is_file():
        videotext.build_index(str(run_dir), videos, folder, features=store, window=10.0, progress=False, threads=1,
                              moment_context=context)
    return folder


def spans_chosen_on_val(seed: int, manifest: Path, features: Path, runs: Path) -> dict:
    """Row `spans_val`: the spans of row `spans` with the moment track's context (CONTEXTS) and the
    six span settings chosen together on the set's val split (for each context a val index, the
    grid `span_grid()`; the best R1@0.5 then mAP; on a tie the first, so the shorter
    context and the cheaper setting) for the `dual` run of `seed`, then the test videos indexed with
    that context and the test queries answered once through the library's door,
    `search(q, moments=True, spans=those settings)`."""
    import videotext
    from videotext.data.schema import VideoTextDataset
    from videotext.eval.moments import moment_metrics
    from videotext.search.moment_search import query_vector
    from videotext.eval.span_finder import SpanSettings

    GRID = span_grid()
    run_dir = runs / "dual" / f"seed_{seed}"
    base = RECORDS / "spans" / f"seed_{seed}.json"
    if not base.is_file():
        raise SystemExit(f"{base}: run `search --seeds {seed}` first (its run and test index are reused)")
    dataset = VideoTextDataset.load(manifest)
    val, test = dataset.split("val"), dataset.split("test")
    store = linked_store(features, runs / "index-features")
    truth = {q.qid: q.spans for q in val.moment_queries()}
    by_context, cpu = {}, time.process_time()
    for context in CONTEXTS:
        folder = runs / "index-val" / (f"seed_{seed}" if context == 1 else f"seed_{seed}-context{context}")
        opened = videotext.open_index(window_index(run_dir, val, store, folder, context), threads=1)
        rows = [(q.qid, opened.track.scores(q.video.id, query_vector(opened.query_side, q.query)))
                for q in val.moment_queries()]
        by_context[context] = choose_span_settings(rows, truth)
    choose_cpu = time.process_time() - cpu
    context = max(CONTEXTS, key=lambda c: by_context[c][0][0])  # max keeps the first of equals
    best, grid = by_context[context]
    chosen = SpanSettings(**dict(zip(GRID, best[1])))
    defaults = next(m for _, v, m in by_context[1][1] if SpanSettings(**dict(zip(GRID, v))) == SpanSettings())
    test_index = runs / "index" / f"seed_{seed}"
    if context != 1:
        test_index = window_index(run_dir, test, store, runs / f"index-context{context}" / f"seed_{seed}", context)
    opened = videotext.open_index(test_index, threads=1).warm()
    queries = test.moment_queries()
    predictions, cpu = {}, time.process_time()
    for q in queries:
        hits = opened.search(q.query, k=10, where=f'video_id == "{q.video.id}"', moments=True, spans=chosen)
        predictions[q.qid] = [(hit.start, hit.end, hit.score) for hit in hits]
    per_query = 1000 * (time.process_time() - cpu) / len(queries)
    metrics = moment_metrics(predictions, {q.qid: q.spans for q in queries})
    record = {key: value for key, value in json.loads(base.read_text(encoding="utf-8")).items()
              if key not in ("results", "row", "query", "cpu_ms_per_query")}
    record.update({
        "row": "spans_val", "query": "search(q, k=10, where=its video, moments=True, spans=chosen on val)",
        "grid": {"moment_context": list(CONTEXTS), **GRID},
        "chosen": {"moment_context": context, **{k: getattr(chosen, k) for k in GRID}},
        "test_index": _shown(test_index),
        "val": {"n_queries": len(truth), "choose_cpu_s": round(choose_cpu, 1),
                "settings_tried": sum(len(g) for _, g in by_context.values()),
                "chosen": {k: best[2][v] for k, v in TABLE.items()}, "defaults": {k: defaults[v] for k, v in TABLE.items()},
                "best_by_context": {str(c): {"settings": dict(zip(GRID, by_context[c][0][1])),
                                             **{k: by_context[c][0][2][v] for k, v in TABLE.items()}}
                                    for c in CONTEXTS}},
        "cpu_ms_per_query": round(per_query, 2),
        "results": {"spans_val": {"moments": metrics, "n_queries": len(queries), "n_videos": len(test),
                                  "table": {k: metrics[v] for k, v in TABLE.items()}}},
        "machine": machine(), "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    })
    write_json(RECORDS / "spans_val" / f"seed_{seed}.json", record)
    return record


def diagnose(run_dir: Path, checkpoint: str, manifest: Path, features: Path, queries: int) -> dict:
    """A moment_detr run read in the window centred on each query's first span (an oracle window: no
    other window to rank it against), for the first `queries` queries of train and of val: its top
    span's R1@0.5 and mIoU there, and how often its top saliency step lies in a moment, against the
    share of the window's steps that do (what a query-blind top step would hit)."""
    import numpy as np
    import torch

    from videotext.data.features import FeatureStore
    from videotext.data.loaders import VideoFeatures
    from videotext.data.moment_batches import collate_windows, step_features, window_item
    from videotext.data.schema import VideoTextDataset
    from videotext.eval.moments import moment_metrics
    from videotext.run_model import load_run

    torch.set_num_threads(1)
    method = load_run(run_dir, checkpoint=checkpoint, threads=1, device="cpu").method
    dataset = VideoTextDataset.load(manifest)
    steps_of = step_features(VideoFeatures(FeatureStore(features), method.experts, None))
    meta = json.loads((run_dir / "checkpoints" / checkpoint / "meta.json").read_text(encoding="utf-8"))
    out = {"run": _shown(run_dir), "checkpoint": checkpoint, "step": meta.get("step"), "epoch": meta.get("epoch"),
           "negative_pair_weight": meta["model"].get("negative_pair_weight", 0.0), "queries_per_split": queries}
    from videotext.train.trainer import read_metrics_log

    out["val_curve"] = [[line["epoch"], line["moments"]["mAP"], line["moments"]["R1@0.5"], line["highlight"]["HIT@1"]]
                        for line in read_metrics_log(run_dir) if line["kind"] == "val"]  # epoch, mAP, R1@0.5, HIT@1
    for split in ("train", "val"):
        predictions, truth, top_in, share = {}, {}, [], []
        for q in dataset.split(split).moment_queries()[:queries]:
            features_, step = steps_of(q.video)
            total = next(iter(features_.values())).shape[0]
            start = max(0, min(int((q.spans[0][0] + q.spans[0][1]) / 2 / step) - method.window // 2, total - method.window))
            item = window_item(q, features_, step, start, method.window)
            spans, scores, saliency = method.predict_windows(collate_windows([item], method.experts, method.window,
                                                                             method.prepare_text))
            offset, length = start * step, item.window_seconds
            rows = [(offset + a * length, offset + b * length, c) for (a, b), c in zip(spans[0].tolist(), scores[0].tolist())]
            predictions[q.qid] = sorted(rows, key=lambda r: -r[2])
            truth[q.qid] = [(max(offset, a), min(offset + length, b)) for a, b in q.spans if b > offset and a < offset + length]
            inside = np.array([any(a <= offset + (i + 0.5) * step < b for a, b in truth[q.qid]) for i in range(item.steps)])
            top_in.append(bool(inside[int(saliency[0, : item.steps].argmax())]))
            share.append(float(inside.mean()))
        metrics = moment_metrics(predictions, truth)
        out[split] = {"R1_50": metrics["R1@0.5"], "mIoU": metrics["mIoU"], "top_saliency_step_in_moment": 100 * float(np.mean(top_in)),
                      "moment_steps_share": 100 * float(np.mean(share)), "n_queries": len(truth)}
    return out


def _seed_records(row: str) -> dict[int, dict]:
    folder = RECORDS / row
    return {int(p.stem.removeprefix("seed_")): json.loads(p.read_text(encoding="utf-8"))
            for p in sorted(folder.glob("seed_*.json"))}


def _costs(row: str, record: dict) -> dict:
    """CPU-s of training, of the index build (none for the learned head: it reads the features), CPU-ms
    per query (the head: predicting the test split, over its queries)."""
    if row.startswith("moment_detr"):
        return {"train_cpu_s": record["train_cpu_s"], "index_cpu_s": 0.0,
                "cpu_ms_per_query": 1000 * record["predict_test_cpu_s"] / record["results"][row]["n_queries"]}
    return {"train_cpu_s": record["train_cpu_s"], "index_cpu_s": record["index"]["build"]["cpu_s"],
            "cpu_ms_per_query": record["cpu_ms_per_query"]}


def make_table() -> dict:
    """Mean ± std per row and paired differences between rows (module docstring)."""
    from videotext.eval.compare import paired_difference
    from videotext.eval.retrieval import aggregate_seeds

    every = {row: _seed_records(row) for row in ROWS}

    def section(records: dict[str, dict[int, dict]]) -> dict:
        tables = {row: {seed: r["results"][row]["table"] for seed, r in found.items()} for row, found in records.items()}
        rows, paired = {}, {}
        for row, found in records.items():
            if not found:
                continue
            per_seed = {seed: {**{k: t[k] for k in QUOTED}, **_costs(row, found[seed])} for seed, t in tables[row].items()}
            rows[row] = {"seeds": sorted(found), "n_queries": sorted({r["results"][row]["n_queries"] for r in found.values()}),
                         "mean_std": aggregate_seeds(list(per_seed.values())), "per_seed": per_seed,
                         "records": f"results/benchmark/moments/{row}/seed_<n>.json"}
        for a, b in PAIRS:
            if tables.get(a) and tables.get(b):  # seed by seed over the seeds both have
                paired[f"{a} - {b}"] = {k: paired_difference(tables[a], tables[b], k) for k in QUOTED}
        return {"rows": rows, "paired": paired}

    at_table_seeds = {row: {s: r for s, r in found.items() if s in TABLE_SEEDS} for row, found in every.items()}
    more = {row: found for row, found in every.items() if set(found) - set(TABLE_SEEDS)}
    out = {"benchmark": "moments", "split": "test", "columns": {k: TABLE[k] for k in QUOTED},
           "seeds": list(TABLE_SEEDS), **section(at_table_seeds), "more_seeds": section(more)}
    write_json(RECORDS / "table.json", out)
    return out


def print_table(table: dict) -> None:
    print(f"seeds {', '.join(map(str, table['seeds']))}:")
    print_section(table)
    if table["more_seeds"]["rows"]:
        print("\nthe rows run on more seeds, over all of theirs:")
        print_section(table["more_seeds"])


def print_section(table: dict) -> None:
    def cell(v: dict) -> str:
        return f"{v['mean']:.1f} ± {v['std']:.1f}" if v["n"] > 1 else f"{v['mean']:.1f}"

    print("| row | seeds | " + " | ".join(TABLE[k] for k in QUOTED) + " | train CPU-s | index CPU-s | CPU-ms/query |")
    for row, found in table["rows"].items():
        ms = found["mean_std"]
        print(f"| {row} | {len(found['seeds'])} | " + " | ".join(cell(ms[k]) for k in QUOTED) +
              f" | {ms['train_cpu_s']['mean']:.0f} | {ms['index_cpu_s']['mean']:.0f} | {ms['cpu_ms_per_query']['mean']:.1f} |")
    for pair, diffs in table["paired"].items():
        cells = []
        for k in QUOTED:
            d = diffs[k]
            interval = f" [{d['ci95'][0]:+.1f}, {d['ci95'][1]:+.1f}]" if d["ci95"] else ""
            cells.append(f"{TABLE[k]} {d['mean']:+.1f}{interval} (n={d['n']})")
        print(f"{pair}: " + "; ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    the_set = argparse.ArgumentParser(add_help=False)  # the set's manifest and features, every command that reads them
    the_set.add_argument("--manifest", type=Path, default=ROOT / "data" / "moments" / "manifest.json")
    the_set.add_argument("--features", type=Path, default=ROOT / "data" / "moments" / "features")
    seeds = argparse.ArgumentParser(add_help=False)
    seeds.add_argument("--seeds", default="0,1,2")
    one = sub.add_parser("set", help="sizes and costs of the set")
    one.add_argument("--manifest", type=Path, default=ROOT / "data" / "moments" / "manifest.json")
    one.add_argument("--extract-videos", type=int, default=4)
    two = sub.add_parser("train", parents=[the_set, seeds], help="moment_detr on the set, one seed at a time")
    two.add_argument("--runs", type=Path, default=ROOT / "runs" / "moments" / "moment_detr")
    two.add_argument("--set", dest="overrides", action="append", default=[], help="config override a.b=value")
    two.add_argument("--guide", type=Path, default=None,
                     help="row moment_detr_guided: the `dual` runs (seed_S/) held frozen as the head's guide")
    two.add_argument("--guide-context", type=int, default=3, help="steps the guide encodes as one clip")
    two.add_argument("--epochs", type=int, default=None,
                     help="an epoch cap other than the config's: rows named with it (moment_detr_guided-60)")
    three = sub.add_parser("search", parents=[the_set, seeds], help="fixed windows and training-free spans of the demo's run, per seed")
    three.add_argument("--demo-data", type=Path, default=DEMO_DATA)
    three.add_argument("--runs", type=Path, default=ROOT / "runs" / "moments")
    three.add_argument("--choose-on-val", action="store_true",
                       help="also row spans_val: the span settings chosen on the val split")
    sub.add_parser("table", help="the rows side by side with paired differences")
    five = sub.add_parser("vary", parents=[the_set, seeds], help="a saliency row's test queries with one span setting at each grid value")
    five.add_argument("name", help="the span setting, e.g. context_weight")
    five.add_argument("--runs", type=Path, default=ROOT / "runs" / "moments")
    five.add_argument("--epochs", type=int, default=None, help="the head at this epoch cap (its -EPOCHS rows)")
    four = sub.add_parser("diagnose", parents=[the_set], help="a moment_detr run in the window centred on each query's moment")
    four.add_argument("runs", type=Path, nargs="+", help="moment_detr run folders")
    four.add_argument("--checkpoint", default="best")
    four.add_argument("--queries", type=int, default=200)
    four.add_argument("--out", type=Path, default=RECORDS / "diagnosis.json")
    args = parser.parse_args()
    if args.command == "set":
        print(json.dumps(measure_set(args.manifest, args.extract_videos), indent=1))
        return
    if args.command == "diagnose":
        found = [diagnose(run, args.checkpoint, args.manifest.absolute(), args.features.absolute(), args.queries)
                 for run in args.runs]
        write_json(args.out, {"runs": found, "machine": machine()})
        for record in found:
            print(record["run"], json.dumps({k: record[k] for k in ("train", "val")}))
        return
    if args.command == "table":
        print_table(make_table())
        return
    if args.command == "vary":
        head_row, _ = head_rows(True, args.epochs)
        for seed in [int(s) for s in args.seeds.split(",")]:
            record = vary_setting(seed, args.name, args.manifest.absolute(), args.features.absolute(),
                                  args.runs.absolute() / head_row, args.epochs)
            print(f"seed {seed} {args.name}: " + "; ".join(
                f"{r['value']}: " + json.dumps({k: round(r['table'][k], 1) for k in QUOTED}) for r in record["results"].values()),
                flush=True)
        return
    if args.command == "search":
        for seed in [int(s) for s in args.seeds.split(",")]:
            if all((RECORDS / row / f"seed_{seed}.json").is_file() for row in ("windows", "spans")):
                print(f"seed {seed}: recorded already")
                continue
            records = search_seed(seed, args.manifest.absolute(), args.features.absolute(), args.demo_data.absolute(),
                                  args.runs.absolute())  # not resolved: data/ may link elsewhere
            for row, record in records.items():
                print(f"seed {seed} {row}: " + json.dumps(record["results"][row]["table"]) +
                      f" {record['cpu_ms_per_query']:.1f} CPU-ms/query", flush=True)
        for seed in [int(s) for s in args.seeds.split(",")] if args.choose_on_val else []:
            if (RECORDS / "spans_val" / f"seed_{seed}.json").is_file():
                print(f"seed {seed} spans_val: recorded already")
                continue
            record = spans_chosen_on_val(seed, args.manifest.absolute(), args.features.absolute(), args.runs.absolute())
            print(f"seed {seed} spans_val {record['chosen']}: " + json.dumps(record["results"]["spans_val"]["table"]) +
                  f" (val {record['val']['chosen']['R1_50']:.1f} against {record['val']['defaults']['R1_50']:.1f} "
                  f"with the defaults)", flush=True)
        return
    row, saliency_row = head_rows(args.guide is not None, args.epochs)
    runs = args.runs.parent / row if row != "moment_detr" and args.runs.name == "moment_detr" else args.runs
    for seed in [int(s) for s in args.seeds.split(",")]:
        if (RECORDS / row / f"seed_{seed}.json").is_file():
            print(f"seed {seed}: recorded already")
            continue
        record = train_seed(seed, args.manifest.absolute(), args.features.absolute(), args.overrides, runs,
                            args.guide.absolute() if args.guide else None, args.guide_context, args.epochs)
        print(f"seed {seed}: " + json.dumps(record["results"][row]["table"]) +
              f" train {record['train_cpu_s']:.0f} CPU-s", flush=True)
    for seed in [int(s) for s in args.seeds.split(",")] if args.guide else []:
        if (RECORDS / saliency_row / f"seed_{seed}.json").is_file():
            continue
        record = saliency_spans(seed, args.manifest.absolute(), args.features.absolute(), runs, args.epochs)
        print(f"seed {seed} {saliency_row} {record['chosen']}: "
              + json.dumps(record["results"][saliency_row]["table"]), flush=True)


if __name__ == "__main__":
    main()
