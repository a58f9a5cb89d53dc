"""`synthesize`: render a whole synthetic dataset to mp4 files plus a manifest, resumably."""
from __future__ import annotations

import logging
import multiprocessing
from pathlib import Path
from typing import Sequence

from tqdm.auto import tqdm

from videotext.data.schema import VideoTextDataset
from videotext.data.synthetic.narration import narrate, narration_meta
from videotext.data.synthetic.render import frame_count, is_rendered, render_video
from videotext.data.synthetic.specs import VideoSpec, assign_splits, generate_specs, shared_look_pool
from videotext.data.synthetic.vocab import (
    ACTIONS,
    COLOURS,
    DEFAULT_DURATION,
    DEFAULT_FPS,
    DEFAULT_SAMPLE_RATE,
    DEFAULT_SIZE,
    SHAPE_TONES_HZ,
    SHAPES,
    SYNTH_VERSION,
)
from videotext.errors import VideoTextError

log = logging.getLogger(__name__)

DATASET_NAME = "synthetic"
VIDEO_DIR = "videos"
MANIFEST = "manifest.json"


class SynthesisError(VideoTextError, ValueError):
    """Arguments of `synthesize` that cannot make a dataset (a user can pass them on the CLI)."""


_Job = tuple[VideoSpec, str, int, int, int]  # spec, mp4 path, size, fps, sample rate


def _render_job(job: _Job) -> bool:
    """Render one video unless a finished copy exists; True when it was rendered now."""
    spec, path, size, fps, sample_rate = job
    if is_rendered(spec, path, size=size, fps=fps, sample_rate=sample_rate):
        return False
    render_video(spec, path, size=size, fps=fps, sample_rate=sample_rate)
    return True


def _check(num_videos: int, size: int, fps: int, duration: float, sample_rate: int, workers: int) -> None:
    problems = []
    if num_videos < 1:
        problems.append(f"num_videos must be ≥ 1, got {num_videos}")
    if size < 16 or size % 2:
        problems.append(f"size must be an even number of pixels ≥ 16 (yuv420p), got {size}")
    if fps < 1:
        problems.append(f"fps must be ≥ 1, got {fps}")
    if duration < 2.0:
        problems.append(f"duration must be ≥ 2 s (two events of ≥ 1 s), got {duration}")
    if sample_rate not in (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000):
        problems.append(f"sample_rate must be an AAC rate such as 16000 or 22050, got {sample_rate}")
    if workers < 1:
        problems.append(f"workers must be ≥ 1, got {workers}")
    if problems:
        raise SynthesisError("; ".join(problems))


def synthesize(
    out_dir: str | Path,
    num_videos: int,
    seed: int = 0,
    *,
    split_fractions: Sequence[float] = (0.8, 0.1, 0.1),
    workers: int = 1,
    progress: bool = True,
    size: int = DEFAULT_SIZE,
    fps: int = DEFAULT_FPS,
    duration: float = DEFAULT_DURATION,
    sample_rate: int = DEFAULT_SAMPLE_RATE,
    narration: bool = False,
    shared_events: float = 0.0,
) -> VideoTextDataset:
    """Render `num_videos` synthetic videos to ``out_dir/videos/<id>.mp4`` and write
    ``out_dir/manifest.json``; return the dataset.

    Deterministic per `seed` (same manifest bytes, same mp4 bytes, whatever `workers`).
    Resumable: an mp4 whose embedded fingerprint, size and frame count match is kept, so
    a killed run continues where it stopped, and a larger `num_videos` with the same seed
    only renders the new videos. The manifest is written last: its presence means done.
    Each mp4 is H.264 baseline yuv420p + mono AAC; AAC pads the decoded audio to whole
    1024-sample frames, so it runs up to ~0.1 s longer than the video (see `render`).
    With `narration`, every video also gets a noisy spoken track as its `speech`
    segments (`synthetic.narration`: jittered in time, partly filler or off-topic); off,
    the manifest is byte-identical to one written without the option. `shared_events`
    (0 to 1) is the share of videos whose events recur in other videos (`generate_specs`);
    at 0 the data set is the default one.
    """
    _check(num_videos, size, fps, duration, sample_rate, workers)
    try:
        specs = generate_specs(num_videos, seed, duration=duration, shared_events=shared_events)
        splits = assign_splits(specs, seed, split_fractions)
    except ValueError as exc:
        raise SynthesisError(str(exc)) from None
    out = Path(out_dir).resolve()
    video_dir = out / VIDEO_DIR
    video_dir.mkdir(parents=True, exist_ok=True)
    for stale in video_dir.glob(".*.mp4.*.tmp"):  # left by a run that was killed mid-file
        stale.unlink(missing_ok=True)

    jobs: list[_Job] = [(s, str(video_dir / f"{s.id}.mp4"), size, fps, sample_rate) for s in specs]
    rendered = 0
    with tqdm(total=len(jobs), desc="synth", unit="video", disable=not progress) as bar:
        if workers == 1:
            for job in jobs:
                rendered += _render_job(job)
                bar.update()
        else:
            # Default start method (fork on Linux): workers need only numpy and av.
            chunk = max(1, min(16, len(jobs) // (workers * 8)))
            with multiprocessing.get_context().Pool(workers) as pool:
                for done in pool.imap_unordered(_render_job, jobs, chunksize=chunk):
                    rendered += done
                    bar.update()
    log.info("synthesize: rendered %d videos, kept %d finished ones", rendered, len(jobs) - rendered)

    real_duration = frame_count(duration, fps) / fps
    videos = [s.to_video(f"{VIDEO_DIR}/{s.id}.mp4", real_duration) for s in specs]
    if narration:
        for spec, video in zip(specs, videos):
            video.speech = narrate(spec, real_duration, seed)
    meta = {
        "generator": "videotext.data.synthetic",
        "version": SYNTH_VERSION,
        "seed": seed,
        "num_videos": num_videos,
        "size": size,
        "fps": fps,
        "duration": real_duration,
        "sample_rate": sample_rate,
        "split_fractions": [float(f) for f in split_fractions],
        "colours": {name: list(rgb) for name, rgb in COLOURS.items()},
        "shapes": list(SHAPES),
        "tones_hz": dict(SHAPE_TONES_HZ),
        "actions": list(ACTIONS),
    }
    if narration:
        meta["narration"] = narration_meta()
    if shared_events > 0:
        meta["shared_events"] = float(shared_events)
        meta["shared_looks"] = [list(look) for look in shared_look_pool(seed)]
    dataset = VideoTextDataset(DATASET_NAME, videos, splits, root=out, meta=meta)
    dataset.save(out / MANIFEST)
    return dataset
