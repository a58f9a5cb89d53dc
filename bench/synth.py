"""Speed of `videotext.data.synthetic`: videos/s end to end, and what the fast paths buy.

End to end: `synthesize` of N fresh videos with 1 and with 2 worker processes (wall
time, videos/s, mean mp4 size). Stages, on one process, each against a plain reference
in the same run:

- frames: the batched windowed renderer vs a per-frame, full-canvas mask reference;
- audio:  AAC with the settings used (fast coder, 1.2 kHz cutoff) vs FFmpeg's defaults.

    python bench/synth.py                         # 200 videos, 128 px, 8 fps, 6 s
    python bench/synth.py --videos 500 --out bench/results/synth.json
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import av
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from videotext.data.synthetic import generate_specs, object_states, render_audio, render_frames, synthesize  # noqa: E402
from videotext.data.synthetic.render import AUDIO_OPTIONS, BACKGROUND, COLOURS, shape_mask  # noqa: E402
from videotext.io import write_json  # noqa: E402


def reference_frames(spec, size: int, fps: int) -> np.ndarray:
    """Plain renderer: every object's mask over the whole frame, one frame at a time."""
    count = int(round(spec.duration * fps))
    yy, xx = np.mgrid[0:size, 0:size] + 0.5  # [H, W]
    out = np.empty((count, size, size, 3), np.uint8)
    for i in range(count):
        out[i] = BACKGROUND
        states = object_states(spec, i / fps)
        for n in sorted(range(len(states)), key=lambda k: states[k].active):
            state, radius = states[n], states[n].radius * size
            if radius < 0.5:
                continue
            a = math.radians(state.angle)
            dx, dy = xx - state.x * size, yy - state.y * size
            u = (math.cos(a) * dx + math.sin(a) * dy) / radius
            v = (math.cos(a) * dy - math.sin(a) * dx) / radius
            out[i][shape_mask(spec.objects[n].shape, u, v)] = COLOURS[spec.objects[n].colour]
    return out


def encode_audio(audio: np.ndarray, rate: int, options: dict[str, str], path: str) -> None:
    with av.open(path, "w", format="mp4") as container:
        stream = container.add_stream("aac", rate=rate, options=options)
        stream.layout = "mono"
        for start in range(0, len(audio), 1024):
            frame = av.AudioFrame.from_ndarray(audio[None, start : start + 1024], format="fltp", layout="mono")
            frame.sample_rate, frame.pts = rate, start
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))


def per_video_ms(fn, items) -> float:
    start = time.perf_counter()
    for item in items:
        fn(item)
    return (time.perf_counter() - start) / len(items) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=200)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--fps", type=int, default=8)
    parser.add_argument("--duration", type=float, default=6.0)
    parser.add_argument("--stage-videos", type=int, default=30, help="videos timed per stage")
    parser.add_argument("--out", type=Path, default=None, help="write results as JSON here")
    args = parser.parse_args()

    results: dict = {
        "videos": args.videos, "size": args.size, "fps": args.fps, "duration": args.duration,
        "cpu_count": os.cpu_count(), "load_average_before": os.getloadavg(), "python": platform.python_version(),
    }
    specs = generate_specs(args.stage_videos, 123, duration=args.duration)
    with tempfile.TemporaryDirectory() as tmp:
        fast = per_video_ms(lambda s: render_frames(s, args.size, args.fps), specs)
        plain = per_video_ms(lambda s: reference_frames(s, args.size, args.fps), specs)
        results["frames_ms"] = {"fast": fast, "reference": plain, "speedup": plain / fast}
        print(f"frames : {fast:7.1f} ms/video   reference {plain:7.1f}   ×{plain / fast:.1f}")

        audios = [render_audio(s, 16000) for s in specs]
        path = os.path.join(tmp, "a.mp4")
        fast = per_video_ms(lambda a: encode_audio(a, 16000, AUDIO_OPTIONS, path), audios)
        plain = per_video_ms(lambda a: encode_audio(a, 16000, {}, path), audios)
        results["aac_ms"] = {"fast": fast, "reference": plain, "speedup": plain / fast}
        print(f"AAC    : {fast:7.1f} ms/video   reference {plain:7.1f}   ×{plain / fast:.1f}")

        for workers in (1, 2):
            out = Path(tmp) / f"w{workers}"
            cpu_before, start = os.times(), time.perf_counter()
            synthesize(out, args.videos, seed=0, workers=workers, progress=False,
                       size=args.size, fps=args.fps, duration=args.duration)
            seconds, cpu_after = time.perf_counter() - start, os.times()
            # CPU of this process and of the (joined) pool workers: what a video costs on an idle core
            cpu = sum(cpu_after[:4]) - sum(cpu_before[:4])
            sizes = [p.stat().st_size for p in (out / "videos").glob("*.mp4")]
            results[f"workers_{workers}"] = {
                "seconds": seconds, "videos_per_s": args.videos / seconds, "mean_kb": float(np.mean(sizes)) / 1024,
                "cpu_ms_per_video": cpu / args.videos * 1e3,
            }
            print(f"workers={workers}: {args.videos / seconds:6.1f} videos/s  ({seconds:.1f} s, "
                  f"{np.mean(sizes) / 1024:.1f} KB/video, {cpu / args.videos * 1e3:.0f} CPU-ms/video)")
    ratio = results["workers_2"]["videos_per_s"] / results["workers_1"]["videos_per_s"]
    results["workers_2_over_1"] = ratio
    results["load_average_after"] = os.getloadavg()
    print(f"2 workers / 1 worker: ×{ratio:.2f}   (load average {results['load_average_after'][0]:.1f})")
    if args.out:
        write_json(args.out, results)


if __name__ == "__main__":
    main()
