"""Peak memory of `videotext index build --window 10` on a 1-hour video vs a 1-minute one.

A long video must cost about what a short one costs: decoding streams frames, features are
extracted and stored `extract.chunk_seconds` of video at a time (one staged chunk file per
stretch, `<features>/.chunks/`), and sliding windows read only their own feature rows. The
bench renders two videos with the same content generator (320x240, 25 fps, H.264
ultrafast, AAC mono 16 kHz): a moving, colour-changing square over a drifting gradient and
a tone whose pitch follows the square. It trains the demo's default run (`dual/synthetic`,
the demo's extraction settings) on a small synthetic set, then runs `videotext index build
RUN VIDEO_DIR -o OUT --window 10` for each video in a fresh subprocess and reads the child's
peak RSS (ru_maxrss of `resource.getrusage(RUSAGE_CHILDREN)`, taken after each child alone).
`runtime.retain_freed_memory()` stays on, as users run it. Videos and the run are cached
under `--cache` (default bench/results/long_video); generating the hour takes about a
minute, each hour build several minutes on 2 cores.

    python bench/long_video.py                     # 1 min vs 60 min
    python bench/long_video.py --long-minutes 20   # a shorter long video
    python bench/long_video.py --chunk-seconds 0   # whole videos at once (no chunks), for comparison
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from videotext.io import write_json  # noqa: E402

WIDTH, HEIGHT, FPS, SAMPLE_RATE = 320, 240, 25, 16000


def render_video(path: Path, seconds: int, seed: int = 0) -> Path:
    """A `seconds`-long H.264 + AAC mp4, frames made and encoded one at a time (never held)."""
    import av

    from videotext.io import atomic_path

    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    ys, xs = np.mgrid[0:HEIGHT, 0:WIDTH]
    base = np.stack([xs * 255 // WIDTH, ys * 255 // HEIGHT, np.full_like(xs, 96)], axis=-1).astype(np.uint8)
    colours = rng.integers(40, 255, size=(max(1, seconds // 5 + 1), 3), dtype=np.uint8)  # one per 5 s
    with atomic_path(path) as tmp:
        with av.open(str(tmp), mode="w", format="mp4") as out:
            video = out.add_stream("libx264", rate=Fraction(FPS))
            video.width, video.height, video.pix_fmt = WIDTH, HEIGHT, "yuv420p"
            video.codec_context.gop_size = 2 * FPS
            video.options = {"preset": "ultrafast"}
            audio = out.add_stream("aac", rate=SAMPLE_RATE)
            audio.layout = "mono"
            sample = 0
            for second in range(seconds):
                for k in range(FPS):
                    t = second + k / FPS
                    frame = np.roll(base, int(7 * t) % WIDTH, axis=1)
                    x = int((WIDTH - 40) * (0.5 + 0.5 * np.sin(t / 3.0)))
                    y = int((HEIGHT - 40) * (0.5 + 0.5 * np.cos(t / 4.1)))
                    frame[y : y + 40, x : x + 40] = colours[second // 5]
                    out.mux(video.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
                pitch = 220.0 + 440.0 * (0.5 + 0.5 * np.sin(second / 3.0))
                times = (sample + np.arange(SAMPLE_RATE)) / SAMPLE_RATE
                tone = (0.2 * np.sin(2 * np.pi * pitch * times)).astype(np.float32).reshape(1, -1)
                for start in range(0, SAMPLE_RATE, 1024):
                    chunk = av.AudioFrame.from_ndarray(np.ascontiguousarray(tone[:, start : start + 1024]),
                                                       format="flt", layout="mono")
                    chunk.sample_rate, chunk.pts = SAMPLE_RATE, sample + start
                    out.mux(audio.encode(chunk))
                sample += SAMPLE_RATE
            out.mux(video.encode(None))
            out.mux(audio.encode(None))
    return path


def train_run(cache: Path) -> Path:
    """The demo's default run (`dual/synthetic`, the demo's extraction settings), on 48 synthetic
    videos for one epoch: what matters here is the model and the extraction it implies."""
    run = cache / "run"
    if (run / "checkpoints" / "best").is_dir():
        return run
    from videotext.config import PACKAGED, load_config
    from videotext.data.experts import extract_features
    from videotext.data.synthetic import synthesize
    from videotext.demo import _extraction_options
    from videotext.train.trainer import Trainer

    data = cache / "synthetic"
    synthesize(data, num_videos=48, seed=0, progress=False)
    config = load_config(PACKAGED / "dual" / "synthetic.yaml",
                         [f"data.manifest={(data / 'manifest.json').resolve()}",
                          f"data.features={(data / 'features').resolve()}", "train.epochs=1", "train.batch_size=8",
                          "schedule.warmup_steps=1"])
    extract_features(data / "manifest.json", config.data.experts, data / "features", progress=False,
                     **{**_extraction_options("synthetic"), "workers": 0, "networks_in_workers": False})
    if run.exists():
        shutil.rmtree(run)
    Trainer(config, run, progress=False).fit()
    return run


def with_chunk_seconds(run: Path, chunk_seconds: float | None) -> Path:
    """A copy of `run` whose config sets `inference.chunk_seconds` (the weights are linked)."""
    import yaml

    copy = run.with_name(f"{run.name}-chunk{chunk_seconds}")
    shutil.rmtree(copy, ignore_errors=True)
    copy.mkdir()
    for entry in run.iterdir():
        if entry.name != "config.yaml":
            os.symlink(entry.resolve(), copy / entry.name)
    config = yaml.safe_load((run / "config.yaml").read_text())
    config.setdefault("inference", {})["chunk_seconds"] = chunk_seconds
    (copy / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return copy


def build_peak_mb(run: Path, video: Path, work: Path, extra: list[str]) -> tuple[float, float]:
    """(peak RSS in MB, seconds) of one `videotext index build --window 10` in a fresh process."""
    folder = work / video.stem
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "videos").mkdir(parents=True)
    os.symlink(video.resolve(), folder / "videos" / video.name)
    command = [sys.executable, "-m", "videotext", "index", "build", str(run), str(folder / "videos"),
               "-o", str(folder / "index"), "--window", "10", *extra]
    began = time.time()
    # a fresh interpreter per build, run through a tiny parent so ru_maxrss is this build's alone
    probe = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    result = subprocess.run([sys.executable, "-c", probe, *command], capture_output=True, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    seconds = time.time() - began
    if result.returncode != 0:
        raise SystemExit(f"index build of {video.name} failed:\n{result.stderr[-3000:]}")
    return int(result.stdout.split()[-1]) / 1024, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--short-minutes", type=int, default=1)
    parser.add_argument("--long-minutes", type=int, default=60)
    parser.add_argument("--cache", type=Path, default=ROOT / "bench" / "results" / "long_video")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "long_video.json")
    parser.add_argument("--chunk-seconds", type=float, default=None,
                        help="inference.chunk_seconds for the builds (default: the run's, 300); 0 = none")
    parser.add_argument("--set", dest="extra", action="append", default=[],
                        help="extra `index build` arguments, e.g. --set=--threads=1")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    args.cache.mkdir(parents=True, exist_ok=True)
    run = train_run(args.cache)
    if args.chunk_seconds is not None:
        run = with_chunk_seconds(run, args.chunk_seconds or None)
    results = {}
    for minutes in (args.short_minutes, args.long_minutes):
        video = args.cache / "videos" / f"long-video-{minutes}min.mp4"
        if not video.is_file():
            began = time.time()
            render_video(video, minutes * 60)
            print(f"rendered {video.name} in {time.time() - began:.0f}s", flush=True)
        peak, seconds = build_peak_mb(run, video, args.cache / "builds", args.extra)
        results[f"{minutes}min"] = {"minutes": minutes, "peak_rss_mb": peak, "build_s": seconds,
                                    "video_mb": video.stat().st_size / 2**20}
        print(f"{minutes:4d} min video: peak RSS {peak:7.0f} MB, build {seconds:6.1f} s", flush=True)
    short, long = results[f"{args.short_minutes}min"], results[f"{args.long_minutes}min"]
    difference = long["peak_rss_mb"] - short["peak_rss_mb"]
    print(f"difference (long - short): {difference:+.0f} MB")
    write_json(args.out, {"bench": "long_video", "window_s": 10, "chunk_seconds": args.chunk_seconds, "size": [WIDTH, HEIGHT], "fps": FPS,
                          "results": results, "difference_mb": difference, "cpus": os.cpu_count(),
                          "python": platform.python_version(), "extra_args": args.extra})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
