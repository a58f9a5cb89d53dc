"""`synthesize_moments`: render the long-video moment set to mp4 files plus a manifest, resumably.

    from videotext.data.synthetic.moments_build import synthesize_moments
    dataset = synthesize_moments("data/moments", seed=0, workers=2)

writes ``data/moments/videos/long00000.mp4`` … (H.264 baseline + AAC, `size` px, `fps` frames/s)
and ``data/moments/manifest.json``: every video with its duration, its queries as `Video.moments`
(each with all its ground-truth spans), and in ``meta`` its events and scenes. The per-step
features the moment methods read come from the usual extraction:

    videotext extract data/moments/manifest.json -o data/moments/features --experts appearance,motion,audio
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import av
from tqdm.auto import tqdm

from videotext.data.schema import VideoTextDataset
from videotext.data.synthetic.build import SynthesisError, VIDEO_DIR, MANIFEST
from videotext.data.synthetic.moments import (
    DEFAULT_MINUTES, DEFAULT_QUERIES_PER_MINUTE, EVENT_SECONDS, GAP_SECONDS, MAX_SPANS, MOMENTS_VERSION, RECUR_PROB,
    SCENE_SECONDS, LongVideoSpec, moment_specs,
)
from videotext.data.synthetic.render import Mp4Writer, frame_count, render_audio, render_frames
from videotext.data.synthetic.vocab import DEFAULT_SAMPLE_RATE, SYNTH_VERSION
from videotext.io import atomic_path

log = logging.getLogger(__name__)

DATASET_NAME = "synthetic_moments"
#: videos per split of the default set: test holds 500+ queries (seed 0: see docs/moments.md)
DEFAULT_VIDEOS = {"train": 100, "val": 20, "test": 40}
DEFAULT_SIZE = 96  # px: what the demo's appearance network reads (docs/performance.md)
DEFAULT_FPS = 4  # events last ≥ 2 s on a 0.25 s grid: 4 frames/s shows every boundary


def _render_params(size: int, fps: int, sample_rate: int) -> dict[str, Any]:
    return {"size": size, "fps": fps, "sample_rate": sample_rate}


def render_long_video(spec: LongVideoSpec, path: str | Path, *, size: int = DEFAULT_SIZE, fps: int = DEFAULT_FPS,
                      sample_rate: int = DEFAULT_SAMPLE_RATE) -> Path:
    """Render `spec` scene after scene into one mp4 at `path`, atomically."""
    path = Path(path)
    comment = spec.fingerprint(**_render_params(size, fps, sample_rate))
    with atomic_path(path) as tmp:
        with Mp4Writer(tmp, (size, size), fps, sample_rate, comment) as writer:
            for scene in spec.scenes:
                writer.write_frames(render_frames(scene, size, fps))
                writer.write_audio(render_audio(scene, sample_rate))
        os.chmod(tmp, 0o644)
    return path


def is_long_rendered(spec: LongVideoSpec, path: str | Path, *, size: int = DEFAULT_SIZE, fps: int = DEFAULT_FPS,
                     sample_rate: int = DEFAULT_SAMPLE_RATE) -> bool:
    """Whether `path` already holds this spec's video (fingerprint, size and frame count)."""
    path = Path(path)
    if not path.is_file():
        return False
    try:
        with av.open(str(path)) as container:
            if container.metadata.get("comment") != spec.fingerprint(**_render_params(size, fps, sample_rate)):
                return False
            stream = container.streams.video[0]
            expected = sum(frame_count(scene.duration, fps) for scene in spec.scenes)
            return stream.codec_context.width == size and stream.frames == expected
    except (av.FFmpegError, OSError, ValueError, IndexError):
        return False


def _render_job(job: tuple[LongVideoSpec, str, int, int, int]) -> float:
    """Render one video unless a finished copy exists; the CPU seconds spent (0 when kept)."""
    spec, path, size, fps, sample_rate = job
    if is_long_rendered(spec, path, size=size, fps=fps, sample_rate=sample_rate):
        return 0.0
    start = time.process_time()
    render_long_video(spec, path, size=size, fps=fps, sample_rate=sample_rate)
    return time.process_time() - start


def synthesize_moments(
    out_dir: str | Path, seed: int = 0, *, videos: dict[str, int] | None = None,
    minutes: tuple[float, float] = DEFAULT_MINUTES, queries_per_minute: float = DEFAULT_QUERIES_PER_MINUTE,
    size: int = DEFAULT_SIZE, fps: int = DEFAULT_FPS, sample_rate: int = DEFAULT_SAMPLE_RATE, workers: int = 1,
    progress: bool = True,
) -> VideoTextDataset:
    """Render the long-video moment set to ``out_dir/videos/`` and write ``out_dir/manifest.json``.

    Deterministic per `seed`; resumable (a finished mp4 whose fingerprint matches is kept; the
    manifest, written last, means done). `videos` maps split → number of long videos
    (`DEFAULT_VIDEOS`). The manifest's meta records the rendering CPU time of the videos rendered now.
    """
    videos = dict(DEFAULT_VIDEOS if videos is None else videos)
    if size < 16 or size % 2 or fps < 1 or workers < 1:
        raise SynthesisError(f"size must be an even number ≥ 16, fps and workers ≥ 1 (got {size}, {fps}, {workers})")
    if 4 % fps and fps % 4:
        raise SynthesisError(f"fps must divide or be a multiple of 4 (events start on a 0.25 s grid), got {fps}")
    try:
        specs, splits = moment_specs(seed, videos, minutes, queries_per_minute)
    except ValueError as exc:
        raise SynthesisError(str(exc)) from None
    out = Path(out_dir).resolve()
    video_dir = out / VIDEO_DIR
    video_dir.mkdir(parents=True, exist_ok=True)
    for stale in video_dir.glob(".*.mp4.*.tmp"):
        stale.unlink(missing_ok=True)
    jobs = [(s, str(video_dir / f"{s.id}.mp4"), size, fps, sample_rate) for s in specs]
    jobs.sort(key=lambda job: -job[0].duration)  # longest first: the pool's last task is a short one
    wall, cpu, rendered = time.perf_counter(), 0.0, 0
    with tqdm(total=sum(s.duration for s in specs) / 60, desc="moments", unit="min", disable=not progress) as bar:
        if workers == 1:
            results = map(_render_job, jobs)
        else:
            pool = multiprocessing.get_context().Pool(workers)
            results = pool.imap(_render_job, jobs)
        try:
            for job, spent in zip(jobs, results):
                cpu += spent
                rendered += spent > 0
                bar.update(job[0].duration / 60)
        finally:
            if workers > 1:
                pool.close()
                pool.join()
    wall = time.perf_counter() - wall
    log.info("synthesize_moments: rendered %d videos, kept %d", rendered, len(jobs) - rendered)
    dataset = VideoTextDataset(DATASET_NAME, [s.to_video(f"{VIDEO_DIR}/{s.id}.mp4") for s in specs], splits, root=out,
                               meta=_meta(seed, videos, minutes, queries_per_minute, size, fps, sample_rate, specs, splits))
    dataset.meta["cost"] = {"rendered_videos": rendered, "render_cpu_s": round(cpu, 1), "wall_s": round(wall, 1),
                            "workers": workers}
    dataset.save(out / MANIFEST)
    return dataset


def _meta(seed: int, videos: dict[str, int], minutes: tuple[float, float], queries_per_minute: float, size: int,
          fps: int, sample_rate: int, specs: list[LongVideoSpec], splits: dict[str, list[str]]) -> dict[str, Any]:
    by_id = {s.id: s for s in specs}
    sizes = {split: {"videos": len(ids), "queries": sum(len(by_id[i].queries) for i in ids),
                     "hours": round(sum(by_id[i].duration for i in ids) / 3600, 3),
                     "spans": sum(len(q.spans) for i in ids for q in by_id[i].queries)}
             for split, ids in splits.items()}
    return {
        "generator": "videotext.data.synthetic.moments", "version": [SYNTH_VERSION, MOMENTS_VERSION], "seed": seed,
        "videos": videos, "minutes": list(minutes), "queries_per_minute": queries_per_minute, "size": size, "fps": fps,
        "sample_rate": sample_rate, "scene_seconds": list(SCENE_SECONDS), "event_seconds": list(EVENT_SECONDS),
        "gap_seconds": list(GAP_SECONDS), "recur_prob": RECUR_PROB, "max_spans": MAX_SPANS, "sizes": sizes,
    }
