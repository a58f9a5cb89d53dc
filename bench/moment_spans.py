"""Moments without training against fixed windows, on synthetic long videos; picks the span defaults.

Each long video is `--clips` synthetic clips of 6 s one after the other (`generate_specs` of a seed
the training data never used, rendered as the generator renders them, H.264 + AAC), so every event
has an exact start and end. Queries: each event's sentence (an event of 1-3 s; those whose sentence
occurs once in its video) and each clip's first caption (the clip's 6 s). The videos are indexed as a
user would: `videotext.build_index(RUN, FOLDER, OUT, window=10)` (10-s windows every 5 s, and the
moment track). For each query, within its own video (as the field scores moment retrieval):

    windows   the top window of the index (`where video_id == ...`): what `search` answers today
    spans     the top span of `eval.span_finder.find_spans` over the query's step scores

and R1@0.5, R1@0.7 (the share of queries whose top answer has IoU >= 0.5 / 0.7 with the truth) and
mIoU. The span settings are chosen on the validation videos (a grid, best mean R1@0.5 over the two
query kinds, then mIoU; on a tie the grid's first, so the cheaper), and the test videos (other seeds) are scored once with the chosen settings,
the library's defaults (`SpanSettings()`) and the windows; paired differences of R1@0.5 with a
bootstrap 95% interval over queries. Corpus: `SearchableIndex.search(q, k=1, moments=True)` over all
test videos at once (right video and IoU >= 0.5).

    python bench/moment_spans.py                       # runs/demo; 8 + 8 videos of 20 clips (2 minutes)
    python bench/moment_spans.py --run RUN --videos 4 --clips 10
    python bench/moment_spans.py --moment-context 3 --out results/search/moment_spans_context3.json

Figures go to results/search/moment_spans.json; docs/search.md quotes them.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from videotext.io import write_json  # noqa: E402

SIZE, FPS, SAMPLE_RATE, CLIP_SECONDS = 128, 8, 16000, 6.0
SPLIT_SEEDS = {"validation": 7101, "test": 7202}  # generator seeds the demo's training data (seed 0) never used
# in each list the cheaper or simpler value first: among equal scores the first setting of the grid wins
GRID = {"smooth": [1, 3], "min_steps": [1, 2], "scale_ratio": [1.5, 1.25], "context_ratio": [0.5, 1.0, 1.5, 2.0],
        "context_weight": [0.25, 0.5, 0.75, 1.0]}


def make_split(folder: Path, seed: int, videos: int, clips: int) -> list[dict]:
    """`videos` long videos of `clips` synthetic clips each under folder/videos; returns the queries
    (video, kind, text, start, end), also kept as folder/truth.json."""
    from videotext.data.synthetic.render import encode_mp4, render_audio, render_frames
    from videotext.data.synthetic.specs import generate_specs
    from videotext.io import atomic_path

    truth_path = folder / "truth.json"
    if truth_path.is_file():
        return json.loads(truth_path.read_text())
    queries = []
    for number in range(videos):
        video_id = f"long{number:02d}"
        specs = generate_specs(clips, seed=seed * 1000 + number, duration=CLIP_SECONDS)
        frames = np.concatenate([render_frames(s, SIZE, FPS) for s in specs])
        audio = np.concatenate([render_audio(s, SAMPLE_RATE) for s in specs])
        path = folder / "videos" / f"{video_id}.mp4"
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            encode_mp4(tmp, frames, audio, FPS, SAMPLE_RATE)
        sentences = Counter(sentence for s in specs for sentence in s.sentences)
        for position, spec in enumerate(specs):
            offset = position * CLIP_SECONDS
            queries.append({"video": video_id, "kind": "clip", "text": spec.captions[0], "start": offset,
                            "end": offset + CLIP_SECONDS})
            for event, sentence in zip(spec.events, spec.sentences):
                if sentences[sentence] == 1:
                    queries.append({"video": video_id, "kind": "event", "text": sentence,
                                    "start": offset + event.start, "end": offset + event.end})
    write_json(truth_path, queries)
    return queries


def built_index(run: Path, folder: Path, context: int = 1) -> Path:
    """The window index (and moment track, `context` steps a vector) of folder/videos, built once."""
    import videotext

    out = folder / "index"
    if not (out / "published.json").is_file():
        report = videotext.build_index(str(run), folder / "videos", out, window=10.0, progress=False,
                                       moment_context=context)
        print("\n".join("  " + line for line in report.lines()), flush=True)
    return out


def iou(a: tuple[float, float], b: tuple[float, float]) -> float:
    overlap = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    union = (a[1] - a[0]) + (b[1] - b[0]) - overlap
    return overlap / union if union > 0 else 0.0


def prepared(index_folder: Path, queries: list[dict]) -> list[dict]:
    """Per query: its step scores and times, and the IoU of the index's top window in its video."""
    import videotext
    from videotext.search.moment_search import query_vector

    opened = videotext.open_index(index_folder)
    out = []
    for q in queries:
        vector = query_vector(opened.query_side, q["text"])
        scores, starts, ends = opened.track.scores(q["video"], vector)
        window = opened.index.search(vector[None], 1, where=f'video_id == "{q["video"]}"')[0][0]
        out.append({**q, "scores": scores, "starts": starts, "ends": ends,
                    "window_iou": iou((window.start, window.end), (q["start"], q["end"]))})
    return out


def span_ious(rows: list[dict], settings) -> np.ndarray:
    from videotext.eval.span_finder import find_spans

    result = []
    for row in rows:
        spans = find_spans(row["scores"], row["starts"], row["ends"], k=1, settings=settings)
        result.append(iou((spans[0].start, spans[0].end), (row["start"], row["end"])) if spans else 0.0)
    return np.asarray(result)


def summary(ious: np.ndarray) -> dict[str, float]:
    return {"R1@0.5": 100 * float(np.mean(ious >= 0.5)), "R1@0.7": 100 * float(np.mean(ious >= 0.7)),
            "mIoU": 100 * float(np.mean(ious)), "queries": int(len(ious))}


def by_kind(rows: list[dict], ious: np.ndarray) -> dict[str, dict[str, float]]:
    kinds = np.asarray([row["kind"] for row in rows])
    return {kind: summary(ious[kinds == kind]) for kind in ("event", "clip")}


def selection_key(table: dict[str, dict[str, float]]) -> tuple[float, float]:
    """Mean R1@0.5 over the two query kinds, then mean mIoU."""
    return (np.mean([t["R1@0.5"] for t in table.values()]), np.mean([t["mIoU"] for t in table.values()]))


def paired_difference(a: np.ndarray, b: np.ndarray, seed: int = 0, draws: int = 2000) -> dict[str, float]:
    """R1@0.5 of a minus b in points, with a bootstrap 95% interval over queries."""
    hit_a, hit_b = (a >= 0.5).astype(float), (b >= 0.5).astype(float)
    rng = np.random.default_rng(seed)
    draws_ = [np.mean(hit_a[i] - hit_b[i]) for i in rng.integers(0, len(a), (draws, len(a)))]
    return {"points": 100 * float(np.mean(hit_a - hit_b)), "ci95": [100 * float(np.percentile(draws_, 2.5)),
                                                                     100 * float(np.percentile(draws_, 97.5))]}


def corpus_r1(index_folder: Path, queries: list[dict]) -> dict[str, float]:
    """Top moment over every video at once: right video and IoU >= 0.5; and the time per query."""
    import videotext

    opened = videotext.open_index(index_folder)
    opened.warm()
    hits, began = [], time.perf_counter()
    for q in queries:
        top = opened.search(q["text"], k=1, moments=True)[0]
        hits.append(top.video_id == q["video"] and iou((top.start, top.end), (q["start"], q["end"])) >= 0.5)
    return {"R1@0.5": 100 * float(np.mean(hits)), "ms_per_query": 1000 * (time.perf_counter() - began) / len(queries)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, default=ROOT / "runs" / "demo")
    parser.add_argument("--videos", type=int, default=8, help="long videos per split")
    parser.add_argument("--clips", type=int, default=20, help="6-s clips per long video")
    parser.add_argument("--cache", type=Path, default=ROOT / "bench" / "results" / "moments")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "search" / "moment_spans.json")
    parser.add_argument("--moment-context", type=int, default=1,
                        help="steps each moment-track vector encodes (`index build --moment-context`)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from videotext.eval.span_finder import SpanSettings

    rows, suffix = {}, "" if args.moment_context == 1 else f"-context{args.moment_context}"
    for split, seed in SPLIT_SEEDS.items():
        folder = args.cache / f"{split}-{args.videos}x{args.clips}{suffix}"
        queries = make_split(folder, seed, args.videos, args.clips)
        began = time.time()
        rows[split] = prepared(built_index(args.run, folder, args.moment_context), queries)
        print(f"{split}: {args.videos} videos of {args.clips * CLIP_SECONDS:.0f} s, {len(queries)} queries "
              f"(index and scores {time.time() - began:.0f} s)", flush=True)

    grid = []
    for values in itertools.product(*GRID.values()):
        settings = SpanSettings(**dict(zip(GRID, values)))
        grid.append((selection_key(by_kind(rows["validation"], span_ious(rows["validation"], settings))), settings))
    grid.sort(key=lambda item: item[0], reverse=True)
    chosen = grid[0][1]
    print(f"validation: best of {len(grid)} settings {asdict(chosen)}: mean R1@0.5 {grid[0][0][0]:.1f}, "
          f"mIoU {grid[0][0][1]:.1f}")
    for key, settings in grid[1:4]:
        print(f"  next: {asdict(settings)}: {key[0]:.1f} / {key[1]:.1f}")

    result = {"bench": "moments", "run": str(args.run), "videos_per_split": args.videos, "clips_per_video": args.clips,
              "moment_context": args.moment_context,
              "grid": GRID, "chosen": asdict(chosen), "defaults": asdict(SpanSettings()), "splits": {}}
    for split in ("validation", "test"):
        split_rows = rows[split]
        windows = np.asarray([row["window_iou"] for row in split_rows])
        spans = span_ious(split_rows, chosen)
        defaults = span_ious(split_rows, SpanSettings())
        result["splits"][split] = {
            "windows": by_kind(split_rows, windows), "spans_chosen": by_kind(split_rows, spans),
            "spans_defaults": by_kind(split_rows, defaults),
            "spans_minus_windows_R1@0.5": paired_difference(defaults, windows)}
    folder = args.cache / f"test-{args.videos}x{args.clips}{suffix}"
    result["test_corpus"] = corpus_r1(folder / "index", json.loads((folder / "truth.json").read_text()))
    for split, table in result["splits"].items():
        for name in ("windows", "spans_chosen", "spans_defaults"):
            cells = "  ".join(f"{kind}: R1@0.5 {t['R1@0.5']:5.1f}  R1@0.7 {t['R1@0.7']:5.1f}  mIoU {t['mIoU']:5.1f} "
                              f"({t['queries']})" for kind, t in table[name].items())
            print(f"{split:10s} {name:15s} {cells}")
        diff = table["spans_minus_windows_R1@0.5"]
        print(f"{split:10s} spans (defaults) - windows, R1@0.5: {diff['points']:+.1f} points "
              f"(95% CI {diff['ci95'][0]:+.1f} to {diff['ci95'][1]:+.1f})")
    corpus = result["test_corpus"]
    print(f"test corpus (top moment of all videos): R1@0.5 {corpus['R1@0.5']:.1f}, {corpus['ms_per_query']:.0f} ms "
          f"per query")
    result.update({"cpus": os.cpu_count(), "load_average": os.getloadavg()[0], "python": platform.python_version()})
    write_json(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
