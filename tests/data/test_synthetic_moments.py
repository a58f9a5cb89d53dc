"""The synthetic long-video moment set: what is drawn, what is rendered, what the manifest holds."""
from __future__ import annotations

import json

import av
import numpy as np
import pytest
from typer.testing import CliRunner

from videotext.cli import app
from videotext.data.schema import VideoTextDataset
from videotext.data.synthetic.moments import (
    EVENT_SECONDS, MAX_SPANS, SCENE_SECONDS, long_video_spec, moment_specs, split_durations,
)
from videotext.data.synthetic.moments_build import DEFAULT_VIDEOS, is_long_rendered, synthesize_moments
from videotext.data.synthetic.vocab import ACTION_PHRASES, TIME_GRID


def test_durations_are_log_uniform_strata_within_the_range():
    durations = split_durations(0, "test", 40)
    assert len(durations) == 40 and all(60 <= d <= 1800 for d in durations)
    edges = np.exp(np.log(60) + np.log(30) * np.arange(41) / 40)  # one duration per stratum
    assert sorted(np.searchsorted(edges, sorted(durations)) - 1) == list(range(40))
    assert split_durations(0, "test", 40) == durations != split_durations(1, "test", 40)


def test_a_long_video_is_scenes_of_timed_events_and_its_queries_are_every_span_of_a_kind():
    spec = long_video_spec(0, 3, "v", 600.0)
    assert spec.offsets[0] == 0.0 and spec.offsets[-1] + spec.scenes[-1].duration == 600.0
    for scene, offset, after in zip(spec.scenes, spec.offsets, spec.offsets[1:] + (600.0,)):
        assert offset + scene.duration == after and scene.duration >= SCENE_SECONDS[0]
    events = spec.events()
    for event in events:
        assert EVENT_SECONDS[0] <= event["end"] - event["start"] <= EVENT_SECONDS[1]
        assert event["start"] % TIME_GRID == 0 and event["end"] % TIME_GRID == 0
    assert all(a["end"] <= b["start"] for a, b in zip(events, events[1:]))  # in order, never overlapping
    assert len(spec.queries) == 20  # 2 per minute
    for query in spec.queries:
        article, colour, shape, *phrase = query.query.rstrip(".").split(" ")
        kind = [e for e in events if (e["colour"], e["shape"]) == (colour, shape)
                and " ".join(phrase) in ACTION_PHRASES[e["action"]]]
        assert query.spans == sorted((e["start"], e["end"]) for e in kind)
        assert 1 <= len(query.spans) <= MAX_SPANS
        # a distractor: the same object doing something else, or the same action by a look sharing colour or shape
        action = kind[0]["action"]
        assert any(((e["colour"], e["shape"]) == (colour, shape) and e["action"] != action)
                   or (e["action"] == action and (e["colour"] == colour) != (e["shape"] == shape)) for e in events)
    assert long_video_spec(0, 3, "v", 600.0) == spec


def test_the_default_set_has_a_validation_split_and_500_test_queries():
    specs, splits = moment_specs(0, DEFAULT_VIDEOS)
    assert {k: len(v) for k, v in splits.items()} == {"train": 100, "val": 20, "test": 40}
    by_id = {s.id: s for s in specs}
    queries = {k: sum(len(by_id[i].queries) for i in ids) for k, ids in splits.items()}
    assert queries == {"train": 1705, "val": 339, "test": 687}
    assert min(s.duration for s in specs) >= 60 and max(s.duration for s in specs) <= 1800
    assert len({q.id for s in specs for q in s.queries}) == sum(queries.values())


def test_rendered_once_resumed_and_described_in_the_manifest(tmp_path):
    dataset = synthesize_moments(tmp_path, seed=0, videos={"train": 1, "val": 1, "test": 1}, minutes=(1.0, 1.5),
                                 size=32, fps=4, progress=False)
    assert dataset.meta["cost"]["rendered_videos"] == 3 and dataset.meta["sizes"]["test"]["videos"] == 1
    loaded = VideoTextDataset.load(tmp_path / "manifest.json")
    video = loaded[loaded.splits["test"][0]]
    assert 60 <= video.duration <= 90 and video.moments and video.meta["events"]
    with av.open(str(loaded.media_path(video))) as container:
        stream = container.streams.video[0]
        assert stream.frames == video.duration * 4 and stream.codec_context.width == 32
        audio = sum(frame.samples for frame in container.decode(audio=0)) / 16000
    assert abs(audio - video.duration) < 0.1  # AAC pads to a whole frame
    # a second run keeps every finished file and writes the same manifest
    before = (tmp_path / "manifest.json").read_text()
    again = synthesize_moments(tmp_path, seed=0, videos={"train": 1, "val": 1, "test": 1}, minutes=(1.0, 1.5),
                               size=32, fps=4, progress=False)
    assert again.meta["cost"]["rendered_videos"] == 0
    strip = lambda text: {k: v for k, v in json.loads(text)["meta"].items() if k != "cost"}  # noqa: E731
    assert strip((tmp_path / "manifest.json").read_text()) == strip(before)
    spec = long_video_spec(0, 2, video.id, video.duration)
    assert is_long_rendered(spec, loaded.media_path(video), size=32, fps=4)
    assert not is_long_rendered(spec, loaded.media_path(video), size=32, fps=8)


def test_cli_makes_the_moment_set(tmp_path):
    result = CliRunner().invoke(app, ["synth", str(tmp_path), "--moments", "--long-videos", "1,0,1",
                                      "--minutes", "1,1", "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "train 1 videos / 2 queries" in result.output and "test 1 videos / 2 queries" in result.output
    bad = CliRunner().invoke(app, ["synth", str(tmp_path), "--moments", "--minutes", "1"])
    assert bad.exit_code == 2 and "--minutes: expected 2 comma-separated float values" in bad.output
