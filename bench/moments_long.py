"""Moments in long inputs: memory of `search --moments` on a 1-hour video against a 1-minute one, and
the time of one query over 10 hours of indexed video.

1. The two videos of `bench/long_video.py` (1 and 60 minutes, 320x240, 25 fps, the same content
   generator) are indexed as a user would, `videotext index build RUN DIR -o OUT --window 10` (the
   demo's default run, `dual/synthetic`), each in a fresh process: its peak RSS and time, and the
   steps of its moment track.
2. `videotext search OUT "a query" --moments` in a fresh process on each index: peak RSS (ru_maxrss of
   the child alone) and wall time; the same search without `--moments` is the plain reference.
3. 10 hours: the 1-hour index's windows and moment track repeated under 10 video ids (the same vectors
   and steps: 36 000 steps, 7 190 windows), written through the index's and the track's own writers,
   with its exported query side; opened once with `videotext.open_index` (`--threads` 2: what the
   command uses on 2 cores), then `--queries` different queries, each timed end to end
   (`SearchableIndex.search(q, k=10, moments=True)`: query encoding, shortlist, scoring every
   candidate step, spans), and the plain search of the same queries for the ratio.

    python bench/moments_long.py                   # 1 min vs 60 min; 10 hours
    python bench/moments_long.py --long-minutes 20 --hours 3

Videos, run and builds are cached under bench/results/long_video (shared with bench/long_video.py);
figures go to results/search/moments_long.json, and docs/search.md quotes them.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "src"))
from long_video import render_video, train_run  # noqa: E402

from videotext.io import write_json  # noqa: E402

QUERIES = ["a square moves across the picture", "a bright colour over a gradient", "the square goes up",
           "a small box slides to the left", "a tone rises", "a green square", "a red square in the corner",
           "the picture drifts to the right", "something moves quickly", "a yellow box at the top",
           "a blue square near the bottom", "colours change", "a square turns purple", "a dark frame",
           "an object in the middle", "a white square", "the box stops", "a moving shape", "an orange block",
           "two colours"]
PROBE = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, text=True); "
         "sys.stderr.write(r.stdout); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode)")


def peak(command: list[str]) -> tuple[float, float, str]:
    """(peak RSS in MB, seconds, output) of one command in a fresh process, alone under a tiny parent."""
    began = time.time()
    result = subprocess.run([sys.executable, "-c", PROBE, *command], capture_output=True, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    rss, code = result.stdout.split()[-2:]
    if code != "0":
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return int(rss) / 1024, time.time() - began, result.stderr


def built(run: Path, video: Path, work: Path) -> tuple[Path, dict]:
    """The --window 10 index of one video, built once in a fresh process (peak RSS, time, report)."""
    folder = work / video.stem
    index = folder / "index"
    record = folder / "build.json"
    if record.is_file() and (index / "published.json").is_file():
        return index, json.loads(record.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "videos").mkdir(parents=True)
    os.symlink(video.resolve(), folder / "videos" / video.name)
    rss, seconds, output = peak([sys.executable, "-m", "videotext", "index", "build", str(run), str(folder / "videos"),
                                 "-o", str(index), "--window", "10"])
    result = {"peak_rss_mb": rss, "seconds": seconds, "report": output.strip().splitlines()}
    write_json(record, result)
    return index, result


def search_peaks(index: Path) -> dict[str, dict[str, float]]:
    """Peak RSS and wall time of `videotext search` with and without --moments, fresh processes."""
    out = {}
    for name, extra in (("moments", ["--moments"]), ("plain", [])):
        rss, seconds, _ = peak([sys.executable, "-m", "videotext", "search", str(index), QUERIES[0], "-k", "10",
                                *extra])
        out[name] = {"peak_rss_mb": rss, "seconds": seconds}
    return out


def repeated(index_folder: Path, copies: int, out: Path) -> Path:
    """An index of `copies` videos, each the one video of `index_folder` (its windows and its moment
    track under a new video id), with that folder's exported query side."""
    from videotext.search import Entry, Index
    from videotext.search.live import publish
    from videotext.search.moment_track import TrackWriter, open_track
    from videotext.search.query_encoder import QUERY_FOLDER

    if (out / "published.json").is_file():
        return out
    source = Index.load(index_folder)
    entries = source.entries()
    vectors = source.embeddings_for([e.id for e in entries])
    track = open_track(index_folder)
    (video_id,) = track.rows
    steps, times = track.video(video_id)
    index = Index(source.dim, model=source.model)
    index.meta = dict(source.meta)
    for copy in range(copies):
        name = f"hour{copy:02d}"
        index.add(vectors, [Entry(f"{name}@{e.start:g}-{e.end:g}", path=e.path, start=e.start, end=e.end,
                                  video_id=name, meta=e.meta) for e in entries])
    index.save(out)
    shutil.copytree(index_folder / QUERY_FOLDER, out / QUERY_FOLDER)
    with TrackWriter(out, track.dim, track.source) as writer:
        for copy in range(copies):
            writer.add(f"hour{copy:02d}", steps, times)
        writer.finish()
    publish(out)
    return out


def latencies(folder: Path, queries: list[str], threads: int) -> dict[str, dict[str, float]]:
    """Per-query seconds of a search with and without moments over an opened, warmed index."""
    import videotext

    opened = videotext.open_index(folder, threads=threads).warm()
    out = {}
    for name, moments in (("moments", True), ("plain", False)):
        opened.search(queries[0], k=10, by="shown", moments=moments)  # first-call costs out of the way
        times = []
        for query in queries:
            began = time.perf_counter()
            opened.search(query, k=10, by="shown", moments=moments)
            times.append(time.perf_counter() - began)
        out[name] = {"median_s": float(np.median(times)), "p95_s": float(np.percentile(times, 95)),
                     "max_s": float(np.max(times))}
    track = opened.track
    out["index"] = {"videos": len(track), "steps": track.steps, "hours": float(track.times[-1, 1] * len(track)
                                                                                   / 3600), "windows": len(opened)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--short-minutes", type=int, default=1)
    parser.add_argument("--long-minutes", type=int, default=60)
    parser.add_argument("--hours", type=int, default=10, help="copies of the long video in the latency index")
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=BENCH / "results" / "long_video")
    parser.add_argument("--out", type=Path, default=BENCH.parent / "results" / "search" / "moments_long.json")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    args.cache.mkdir(parents=True, exist_ok=True)
    run = train_run(args.cache)
    result: dict = {"bench": "moments_long", "videos": {}}
    indexes = {}
    for minutes in (args.short_minutes, args.long_minutes):
        video = args.cache / "videos" / f"long-video-{minutes}min.mp4"
        if not video.is_file():
            began = time.time()
            render_video(video, minutes * 60)
            print(f"rendered {video.name} in {time.time() - began:.0f}s", flush=True)
        index, build = built(run, video, args.cache / "moment-builds")
        indexes[minutes] = index
        searches = search_peaks(index)
        result["videos"][f"{minutes}min"] = {"build": build, "search": searches}
        print(f"{minutes:4d} min video: build peak RSS {build['peak_rss_mb']:6.0f} MB ({build['seconds']:5.0f} s; "
              f"{next((l for l in build['report'] if l.startswith('moment track')), '')}); search --moments peak "
              f"{searches['moments']['peak_rss_mb']:6.0f} MB ({searches['moments']['seconds']:.1f} s), plain search "
              f"{searches['plain']['peak_rss_mb']:6.0f} MB ({searches['plain']['seconds']:.1f} s)", flush=True)
    short, long = (result["videos"][f"{m}min"] for m in (args.short_minutes, args.long_minutes))
    result["search_moments_difference_mb"] = long["search"]["moments"]["peak_rss_mb"] - short["search"]["moments"]["peak_rss_mb"]
    result["build_difference_mb"] = long["build"]["peak_rss_mb"] - short["build"]["peak_rss_mb"]
    print(f"difference (long - short): search --moments {result['search_moments_difference_mb']:+.0f} MB, "
          f"index build {result['build_difference_mb']:+.0f} MB")

    folder = repeated(indexes[args.long_minutes], args.hours, args.cache / f"moments-{args.hours}x{args.long_minutes}min")
    queries = (QUERIES * (args.queries // len(QUERIES) + 1))[: args.queries]
    timing = latencies(folder, queries, args.threads)
    result["many_hours"] = timing
    moments, plain = timing["moments"], timing["plain"]
    print(f"{timing['index']['hours']:.1f} hours indexed ({timing['index']['videos']} videos, {timing['index']['steps']} "
          f"steps, {timing['index']['windows']} windows), {len(queries)} queries, {args.threads} threads: moments "
          f"median {1000 * moments['median_s']:.0f} ms (p95 {1000 * moments['p95_s']:.0f}, max "
          f"{1000 * moments['max_s']:.0f}); plain search median {1000 * plain['median_s']:.0f} ms; ratio "
          f"{moments['median_s'] / plain['median_s']:.1f}x")
    result.update({"cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0], "threads": args.threads,
                   "python": platform.python_version(), "machine": platform.machine()})
    write_json(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
