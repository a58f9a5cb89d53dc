"""Long videos stream through extraction in chunks (`extract_features(chunk_seconds=...)`,
config key `inference.chunk_seconds` for `index build`): the result equals whole-video
extraction, a run killed mid-video resumes at its first unfinished chunk, and a video cut
part-way keeps its finished chunks and gets one failure line."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from videotext.data.experts import extract_features
from videotext.data.experts.chunks import chunk_file
from videotext.data.features import FeatureStore
from videotext.data.video_write import write_video

pytestmark = pytest.mark.heavy  # trains, builds indexes or starts processes and servers: `make test-quick` leaves it out

EXPERTS = ["appearance", "motion", "audio"]
OPTIONS = {"appearance": {"input_size": 64}, "motion": {"flow_size": 64, "frames_per_step": 2}}
CHUNK = 2.0  # seconds per chunk: a 40 s video has 20


def make_video(path: Path, seconds: int, fps: int = 8, seed: int = 0) -> Path:
    """A small H.264 + AAC mp4 (index at the front, so a cut file still opens) whose content changes every frame."""
    rng = np.random.default_rng(seed)
    frames = np.empty((seconds * fps, 64, 96, 3), np.uint8)  # [T, H, W, 3]
    for i in range(len(frames)):
        frames[i] = rng.integers(0, 255, 3, dtype=np.uint8)
        x = (i * 3) % 80
        frames[i, 20:40, x : x + 16] = 255
    t = np.arange(seconds * 16000) / 16000
    audio = (0.3 * np.sin(2 * np.pi * (300 + 100 * np.sin(t)) * t)).astype(np.float32)
    return write_video(path, frames, fps, audio=audio, gop=16, container_options={"movflags": "faststart"})


def extract(folder: Path, out: Path, chunk_seconds: float | None = CHUNK) -> dict:
    return extract_features(folder, EXPERTS, out, rate=1.0, progress=False, options=OPTIONS,
                            chunk_seconds=chunk_seconds, window=3.0)


def finished_chunks(out: Path, key: str, count: int) -> list[int]:
    """Chunk indices that every expert has staged."""
    return [i for i in range(count) if all(chunk_file(out / ".chunks", e, key, i, count).is_file() for e in EXPERTS)]


@pytest.fixture(scope="module")
def long_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("long") / "videos"
    make_video(folder / "long.mp4", 40)
    return folder


def test_killed_mid_video_resumes_at_its_first_unfinished_chunk(long_folder, tmp_path):
    out, count = tmp_path / "features", 20
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2] / 'src')!r})
        from videotext.data.experts import extract_features
        extract_features({str(long_folder)!r}, {EXPERTS!r}, {str(out)!r}, rate=1.0, progress=False,
                         options={OPTIONS!r}, chunk_seconds={CHUNK!r}, window=3.0, threads=1)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        deadline = time.time() + 60
        while time.time() < deadline and child.poll() is None and not finished_chunks(out, "long", count):
            time.sleep(0.01)
        assert child.poll() is None, "the extraction ended before it could be killed"
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
    done = finished_chunks(out, "long", count)
    assert 1 <= len(done) < count and done == list(range(len(done)))
    assert not (out / "appearance.h5").exists() or not FeatureStore(out).has("appearance", "long")

    resumed = extract(long_folder, out)
    assert resumed["chunks_reused"] == len(done)  # not decoded, not embedded again
    assert resumed["chunks_extracted"] == count - len(done)
    assert resumed["done"] == 1 and resumed["failed"] == 0
    assert not (out / ".chunks" / "appearance" / "long").exists()  # staged chunks go once stored

    whole = extract(long_folder, tmp_path / "uninterrupted")
    assert whole["chunks_extracted"] == count and whole["chunks_reused"] == 0
    unchunked = extract(long_folder, tmp_path / "unchunked", chunk_seconds=None)
    assert unchunked["chunks_extracted"] == 0
    a, b, c = FeatureStore(out), FeatureStore(tmp_path / "uninterrupted"), FeatureStore(tmp_path / "unchunked")
    for expert in EXPERTS:
        got, got_times = a.get(expert, "long")
        ref, ref_times = b.get(expert, "long")
        plain, plain_times = c.get(expert, "long")
        assert got.shape == (40, a.dim(expert))
        np.testing.assert_array_equal(got_times, np.arange(40.0))
        np.testing.assert_array_equal(got_times, ref_times)
        np.testing.assert_array_equal(got_times, plain_times)
        np.testing.assert_allclose(got, ref, atol=1e-6)
        # chunks change nothing beyond float16 storage rounding (log-mel values reach |13|: 2^-8 apart)
        np.testing.assert_allclose(got, plain, atol=8e-3)
        assert a.entry(expert, "long") == c.entry(expert, "long")


def test_video_cut_part_way_keeps_its_chunks_and_one_failure_line(long_folder, tmp_path):
    folder = tmp_path / "videos"
    folder.mkdir()
    data = (long_folder / "long.mp4").read_bytes()
    (folder / "cut.mp4").write_bytes(data[: len(data) // 2])  # its frames end part-way (about 20 s of 40)
    make_video(folder / "short.mp4", 3, seed=1)
    out = tmp_path / "features"
    first = extract(folder, out)
    assert first["failed"] == 1 and first["done"] == 1
    store = FeatureStore(out)
    assert all(store.has(e, "short") and not store.has(e, "cut") for e in EXPERTS)
    kept = finished_chunks(out, "cut", 20)
    assert 5 <= len(kept) < 19 and kept == list(range(len(kept)))
    lines = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    assert len(lines) == 1
    assert lines[0]["item"] == "cut" and sorted(lines[0]["experts"]) == sorted(EXPERTS)
    assert "truncated or corrupt" in lines[0]["error"] and lines[0]["chunk"] == len(kept)

    again = extract(folder, out)  # the finished chunks are not redone; the cut one fails again
    assert again["chunks_reused"] == len(kept) and again["chunks_extracted"] == 1
    assert again["failed"] == 1 and again["skipped"] == 1
    assert len((out / "failures.jsonl").read_text().splitlines()) == 1


def test_sliding_windows_read_only_their_rows_and_match_whole_reads(tmp_path):
    from videotext.data.loaders import VideoFeatures
    from videotext.search.windows import WindowFeatures

    class CountingStore(FeatureStore):
        rows_read = 0

        def get(self, expert, key, rows=None):
            features, times = super().get(expert, key, rows=rows)
            self.rows_read += len(features)
            return features, times

    store = CountingStore(tmp_path / "store")
    rng = np.random.default_rng(0)
    values = rng.standard_normal((3600, 8)).astype(np.float32)  # an hour at one step a second
    with store.writer("appearance", 8, {"rate": 1.0}, dtype="float32") as writer:
        writer.add("v", values, np.arange(3600.0), step=1.0)
    windows = {"a": ("v", 0.0, 10.0), "b": ("v", 1795.0, 1805.0), "c": ("v", 3595.0, 3600.0), "d": ("v", 0.5, 0.9)}
    reader = WindowFeatures(VideoFeatures(store, ["appearance"], max_steps=64), windows)
    np.testing.assert_array_equal(reader("a")["appearance"], values[0:10])
    np.testing.assert_array_equal(reader("b")["appearance"], values[1795:1805])
    np.testing.assert_array_equal(reader("c")["appearance"], values[3595:3600])
    np.testing.assert_array_equal(reader("d")["appearance"], values[0:1])  # no step starts inside: the one covering it
    assert store.rows_read == 10 + 10 + 5 + 1  # each clip's own rows, not the hour's 3 600 per clip
    rows, times = store.get("appearance", "v", rows=slice(1795, 1805))
    np.testing.assert_array_equal(rows, values[1795:1805])
    np.testing.assert_array_equal(times, np.arange(1795.0, 1805.0))
    np.testing.assert_array_equal(store.timestamps("appearance", "v"), np.arange(3600.0))


def test_extract_command_takes_the_chunk_size(long_folder, tmp_path):
    from typer.testing import CliRunner

    from videotext.cli import app

    common = ["extract", str(long_folder), "--experts", "audio", "--workers", "0"]
    chunked = CliRunner().invoke(app, [*common, "-o", str(tmp_path / "a"), "--chunk-seconds", "4"])
    whole = CliRunner().invoke(app, [*common, "-o", str(tmp_path / "b"), "--chunk-seconds", "0"])
    assert chunked.exit_code == 0 and whole.exit_code == 0, chunked.output + whole.output
    summary = lambda result: json.loads(result.output[result.output.index("{\n"):])  # noqa: E731 (after the progress bar)
    assert summary(chunked)["chunks_extracted"] == 10 and summary(whole)["chunks_extracted"] == 0
    a, b = FeatureStore(tmp_path / "a").get("audio", "long"), FeatureStore(tmp_path / "b").get("audio", "long")
    np.testing.assert_allclose(a[0], b[0], atol=8e-3)
    np.testing.assert_array_equal(a[1], b[1])
