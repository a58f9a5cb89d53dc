"""Moments through the index folder's owner: `index build` keeps the moment track (the run's encoding
of every one-step clip), `search --moments`, `open_index(...).search(moments=True)` and
`/search?moments=true` answer the same spans, an update encodes only new videos' steps, a whole-video
build keeps only the videos whose every step it extracted (all of them with `--moments`), a track built
with `--moment-context 3` encodes the clip centred on each step and its updates keep that, and every
entry carries its duration (an index built before keeps working; `--update` fills it); the span finder's
settings mean the same through the three doors."""
from __future__ import annotations

import dataclasses
import json
import shutil
from urllib.parse import quote

import numpy as np
import pytest
from typer.testing import CliRunner

MAX_STEPS = 4  # the run reads at most 4 steps a video: a whole-video build extracts 4 of a 6-s video's 6
QUERY = "a red circle moves to the left"
NAMES = ("synth000000", "synth000001", "synth000002", "synth000003")


@pytest.fixture(scope="module")
def setup(tiny_synth, tmp_path_factory):
    """(folder of 3 videos, a run of an untrained dual model reading at most MAX_STEPS steps, root)."""
    import torch

    from tests.test_distributed import _train_overrides
    from tests.train.test_trainer import CONFIG
    from videotext.config import load_config, save_config
    from videotext.data.features import FeatureStore
    from videotext.models.registry import build_method
    from videotext.train.checkpoint import save_checkpoint

    root = tmp_path_factory.mktemp("moments")
    videos = root / "videos"
    videos.mkdir()
    for name in NAMES[:3]:
        shutil.copy(tiny_synth / "videos" / f"{name}.mp4", videos / f"{name}.mp4")
    config = load_config(CONFIG, _train_overrides(tiny_synth, f"data.max_steps_per_expert={MAX_STEPS}"))
    store = FeatureStore(tiny_synth / "features")
    dims = {e: store.dim(e) for e in config.data.experts}
    torch.manual_seed(0)
    method = build_method("dual", config.model, expert_dims=dims)
    run = root / "run"
    run.mkdir()
    save_config(config, run / "config.yaml")
    save_checkpoint(run / "checkpoints" / "best", method, {"method": "dual", "expert_dims": dims})
    return videos, run, root


@pytest.fixture(scope="module")
def windows(setup):
    """A --window 3 index of the folder: (its folder, its build report)."""
    import videotext

    videos, run, root = setup
    report = videotext.build_index(str(run), videos, root / "windows", window=3.0, progress=False)
    return root / "windows", report


def _clip_vectors(run, features, spans: list[tuple[int, int]]) -> np.ndarray:
    """The run's unit index vectors of the clips [a, b) seconds of video NAMES[2]."""
    from videotext.data.features import FeatureStore
    from videotext.data.loaders import VideoFeatures
    from videotext.data.schema import Video, VideoTextDataset
    from videotext.inference import load_model
    from videotext.search.windows import WindowFeatures

    model = load_model(run)
    reader = VideoFeatures(FeatureStore(features), model.experts, MAX_STEPS)
    video = Video(id=NAMES[2], path=f"{NAMES[2]}.mp4")
    clips = VideoTextDataset("clips", [dataclasses.replace(video, id=f"s{t}", feature_key=f"s{t}", duration=b - a)
                                       for t, (a, b) in enumerate(spans)])
    clip_reader = WindowFeatures(reader, {f"s{t}": (NAMES[2], float(a), float(b)) for t, (a, b) in enumerate(spans)})
    expected = model.encode_videos(clips, clip_reader).numpy()
    return expected / np.linalg.norm(expected, axis=1, keepdims=True)


def test_the_track_holds_the_runs_encoding_of_every_one_step_clip(setup, windows):
    from videotext.search.moment_track import open_track

    _, run, _ = setup
    folder, report = windows
    assert "moment track: 18 steps of 3 videos (3 encoded, 0 kept)" in report.lines()
    track = open_track(folder)
    assert track.context_steps == 1
    vectors, times = track.video(NAMES[2])
    np.testing.assert_array_equal(times, [[t, t + 1] for t in range(6)])
    expected = _clip_vectors(run, folder.with_name("windows.features"), [(t, t + 1) for t in range(6)])
    np.testing.assert_allclose(np.asarray(vectors, np.float32), expected, atol=2e-3)  # stored as float16


def test_a_moment_context_encodes_the_clip_centred_on_each_step_and_updates_keep_it(setup, windows, tmp_path):
    import videotext
    from videotext.cli import app
    from videotext.errors import VideoTextError
    from videotext.search.moment_track import open_track

    videos, run, _ = setup
    features = windows[0].with_name("windows.features")
    out = tmp_path / "context"
    report = videotext.build_index(str(run), videos, out, features=features, window=3.0, moment_context=3,
                                   progress=False)
    assert "moment track: 18 steps of 3 videos (3 encoded, 0 kept)" in report.lines()
    track = open_track(out)
    assert track.context_steps == 3
    vectors, times = track.video(NAMES[2])
    np.testing.assert_array_equal(times, [[t, t + 1] for t in range(6)])  # each step keeps its own time
    spans = [(max(0, t - 1), min(6, t + 2)) for t in range(6)]  # [0, 2), [0, 3), [1, 4) ... [4, 6): cut at the ends
    np.testing.assert_allclose(np.asarray(vectors, np.float32), _clip_vectors(run, features, spans), atol=2e-3)
    one_step = np.asarray(open_track(windows[0]).video(NAMES[2])[0], np.float32)
    assert np.abs(one_step - np.asarray(vectors, np.float32)).max() > 0.01  # the context changes the vectors
    report = videotext.build_index(str(run), videos, out, features=features, window=3.0, update=True, progress=False)
    assert "moment track: 18 steps of 3 videos (0 encoded, 3 kept)" in report.lines()  # an update keeps context 3
    assert open_track(out).context_steps == 3
    report = videotext.build_index(str(run), videos, out, features=features, window=3.0, update=True,
                                   moment_context=1, progress=False)
    assert "moment track: 18 steps of 3 videos (3 encoded, 0 kept)" in report.lines()  # another context: anew
    np.testing.assert_array_equal(open_track(out).video(NAMES[2])[0], open_track(windows[0]).video(NAMES[2])[0])
    info = json.loads((out / "moments" / "track.json").read_text())
    del info["context_steps"]  # a track written before the context was kept: its vectors are one-step ones
    (out / "moments" / "track.json").write_text(json.dumps(info))
    assert open_track(out).context_steps == 1
    report = videotext.build_index(str(run), videos, out, features=features, window=3.0, update=True, progress=False)
    assert "moment track: 18 steps of 3 videos (0 encoded, 3 kept)" in report.lines()
    with pytest.raises(VideoTextError, match=r"odd number of steps >= 1 \(--moment-context\), got 2"):
        videotext.build_index(str(run), videos, tmp_path / "even", window=3.0, moment_context=2, progress=False)
    printed = CliRunner().invoke(app, ["index", "build", str(run), str(videos), "-o", str(tmp_path / "even"),
                                       "--window", "3", "--moment-context", "4"])
    assert printed.exit_code != 0 and "got 4" in printed.output
    assert not (tmp_path / "even").exists()


def test_the_cli_python_and_http_answer_the_same_moments(windows):
    from fastapi.testclient import TestClient

    import videotext
    from videotext.apps.serve import create_app
    from videotext.cli import app

    folder, _ = windows
    opened = videotext.open_index(folder)
    hits = opened.search(QUERY, k=5, moments=True)
    assert len(hits) == 5 and [h.rank for h in hits] == [1, 2, 3, 4, 5]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    for hit in hits:
        assert hit.id == f"{hit.video_id}@{hit.start:g}-{hit.end:g}" and 0.0 <= hit.start < hit.end <= 6.0
        assert opened.index.get(hit.meta["entry"]).video_id == hit.video_id and hit.meta["duration"] == 6.0
    printed = CliRunner().invoke(app, ["search", str(folder), QUERY, "-k", "5", "--moments", "--json"])
    assert printed.exit_code == 0, printed.output
    assert [(p["id"], p["start"], p["end"], p["score"]) for p in json.loads(printed.output)] == \
        [(h.id, h.start, h.end, h.score) for h in hits]
    client = TestClient(create_app(folder))
    results = client.get("/search", params={"q": QUERY, "k": 5, "moments": "true"}).json()["results"]
    assert [(r["id"], r["start"], r["end"], r["duration"]) for r in results] == \
        [(h.id, h.start, h.end, 6.0) for h in hits]
    entry = quote(hits[0].meta["entry"], safe="")
    assert results[0]["video"] == f"/video/{entry}"
    assert results[0]["thumbnail"] == f"/thumbnail/{entry}?t={hits[0].start:g}"
    frame = client.get(results[0]["thumbnail"])
    assert frame.status_code == 200 and frame.content[:2] == b"\xff\xd8"
    assert client.get(results[0]["video"]).status_code == 200
    assert results[0]["entry"] == hits[0].meta["entry"]  # what "more like this" asks for
    assert client.get("/search/like", params={"id": results[0]["entry"], "k": 2}).status_code == 200
    plain = client.get("/search", params={"q": QUERY, "k": 5}).json()["results"]  # without the flag: windows
    assert len(plain) == 5 and all(r["id"] in opened.index and r["end"] - r["start"] <= 3.0 for r in plain)
    assert client.get("/search", params={"q": QUERY, "moments": "true", "by": "said"}).status_code == 400


def test_span_settings_mean_the_same_through_every_door(windows):
    """`spans=` (Python), `--span` (CLI) and `span=` (HTTP) are one parser: the same spans as
    `find_moments` with those settings, which differ from the defaults' here; a bad name is one line."""
    from fastapi.testclient import TestClient

    import videotext
    from videotext.apps.serve import create_app
    from videotext.cli import app
    from videotext.errors import VideoTextError
    from videotext.eval.span_finder import SpanSettings
    from videotext.search.moment_search import find_moments, query_vector

    folder, _ = windows
    opened = videotext.open_index(folder)
    settings = SpanSettings(max_steps=2, context_weight=0.0)  # spans of at most 2 steps (+1 by refinement)
    expected = find_moments(opened.index, opened.track, query_vector(opened.query_side, QUERY), 5, settings=settings)
    spans = [(h.id, h.start, h.end, h.score) for h in expected]
    assert all(h.end - h.start <= 3.0 for h in expected)
    assert spans != [(h.id, h.start, h.end, h.score) for h in opened.search(QUERY, k=5, moments=True)]
    for given in ({"max_steps": 2, "context_weight": 0}, ["max_steps=2", "context_weight=0.0"], settings):
        assert [(h.id, h.start, h.end, h.score) for h in opened.search(QUERY, k=5, moments=True, spans=given)] == spans
    printed = CliRunner().invoke(app, ["search", str(folder), QUERY, "-k", "5", "--moments", "--json",
                                       "--span", "max_steps=2", "--span", "context_weight=0"])
    assert printed.exit_code == 0, printed.output
    assert [(p["id"], p["start"], p["end"], p["score"]) for p in json.loads(printed.output)] == spans
    client = TestClient(create_app(folder))
    answer = client.get("/search", params=[("q", QUERY), ("k", 5), ("moments", "true"), ("span", "max_steps=2"),
                                           ("span", "context_weight=0")])
    assert [(r["id"], r["start"], r["end"], r["score"]) for r in answer.json()["results"]] == spans
    with pytest.raises(VideoTextError, match=r"spans: unknown key\(s\) \['smoothing'\]"):
        opened.search(QUERY, moments=True, spans={"smoothing": 3})
    with pytest.raises(VideoTextError, match="span settings are for a search for moments"):
        opened.search(QUERY, spans={"max_steps": 2})
    bad = CliRunner().invoke(app, ["search", str(folder), QUERY, "--moments", "--span", "max_steps"])
    assert bad.exit_code != 0 and "spans 'max_steps': expected NAME=VALUE" in bad.output
    bad = CliRunner().invoke(app, ["search", str(folder), QUERY, "--span", "max_steps=2"])
    assert bad.exit_code != 0 and "span settings are for a search for moments (--moments" in bad.output
    refused = client.get("/search", params={"q": QUERY, "moments": "true", "span": "max_steps=1.5"})
    assert refused.status_code == 400 and refused.json()["detail"] == "spans.max_steps: expected an integer, got 1.5"


def test_an_update_encodes_only_the_new_videos_steps(setup, tiny_synth, tmp_path):
    import videotext
    from videotext.search.moment_track import open_track

    _, run, _ = setup
    videos = tmp_path / "videos"
    videos.mkdir()
    for name in NAMES[:2]:
        shutil.copy(tiny_synth / "videos" / f"{name}.mp4", videos / f"{name}.mp4")
    out = tmp_path / "idx"
    videotext.build_index(str(run), videos, out, window=3.0, progress=False)
    before = {name: np.array(open_track(out).video(name)[0]) for name in NAMES[:2]}
    shutil.copy(tiny_synth / "videos" / f"{NAMES[3]}.mp4", videos / f"{NAMES[3]}.mp4")
    report = videotext.build_index(str(run), videos, out, window=3.0, update=True, progress=False)
    assert "moment track: 18 steps of 3 videos (1 encoded, 2 kept)" in report.lines()
    after = open_track(out)
    for name, vectors in before.items():
        np.testing.assert_array_equal(after.video(name)[0], vectors)
    (videos / f"{NAMES[0]}.mp4").unlink()
    report = videotext.build_index(str(run), videos, out, window=3.0, update=True, progress=False)
    assert "moment track: 12 steps of 2 videos (0 encoded, 2 kept)" in report.lines()
    assert sorted(open_track(out).rows) == [NAMES[1], NAMES[3]]
    data = next((out / "moments").glob("vectors-*"))
    data.write_bytes(data.read_bytes()[:100])  # damaged: `index check` names it, the next build makes it anew
    assert any(line.startswith("problem: ") and data.name in line for line in videotext.check_index(out).lines())
    report = videotext.build_index(str(run), videos, out, window=3.0, update=True, progress=False)
    assert "moment track: 12 steps of 2 videos (2 encoded, 0 kept)" in report.lines()
    assert not any(line.startswith("problem: ") for line in videotext.check_index(out).lines())


def test_a_whole_video_build_keeps_the_track_only_with_every_step(setup, tmp_path):
    import videotext
    from videotext.cli import app
    from videotext.errors import VideoTextError
    from videotext.search import Index

    videos, run, _ = setup
    report = videotext.build_index(str(run), videos, tmp_path / "whole", progress=False)
    assert any(line.startswith("moment track: 0 steps of 0 videos (0 encoded, 0 kept; 3 videos left out: their "
                               "features hold only the steps the method reads") for line in report.lines())
    with pytest.raises(VideoTextError, match="keeps no moment track; build it with `videotext index build --moments`"):
        videotext.open_index(tmp_path / "whole").search(QUERY, moments=True)
    printed = CliRunner().invoke(app, ["search", str(tmp_path / "whole"), QUERY, "--moments"])
    assert printed.exit_code != 0 and "keeps no moment track" in printed.output
    assert "no moment track: `search --moments` needs a build with --window or --moments" in \
        videotext.check_index(tmp_path / "whole").lines()
    report = videotext.build_index(str(run), videos, tmp_path / "every", moments=True, progress=False)
    assert "moment track: 18 steps of 3 videos (3 encoded, 0 kept)" in report.lines()
    assert len(videotext.open_index(tmp_path / "every").search(QUERY, k=3, moments=True)) == 3
    whole, every = Index.load(tmp_path / "whole"), Index.load(tmp_path / "every")
    ids = sorted(whole.ids)  # every step extracted, the method still reads the same MAX_STEPS of them
    np.testing.assert_allclose(whole.embeddings_for(ids), every.embeddings_for(ids), atol=1e-5)


def test_every_entry_carries_its_duration_and_an_update_fills_an_older_index(setup, tmp_path):
    import videotext
    from videotext.search import Index

    videos, run, _ = setup
    out = tmp_path / "idx"
    videotext.build_index(str(run), videos, out, progress=False)  # a folder: no manifest gives durations
    for entry in Index.load(out).entries():
        assert entry.meta["duration"] == pytest.approx(6.0, abs=0.1)
        assert (entry.start, entry.end) == (0.0, entry.meta["duration"])
    assert len(videotext.open_index(out).search(QUERY, k=10, where="duration > 5")) == 3
    assert videotext.open_index(out).search(QUERY, k=10, where="duration > 60") == []
    index = Index.load(out)  # as an index built before entries carried their duration
    older = [dataclasses.replace(e, end=None, meta={k: v for k, v in e.meta.items() if k != "duration"})
             for e in index.entries()]
    index.add(index.embeddings_for([e.id for e in older]), older)
    index.save(out)
    assert [h.end for h in videotext.open_index(out).search(QUERY, k=3)] == [None] * 3  # still answers
    assert "3 entries carry no duration (an older build): `index build --update` fills it" in \
        videotext.check_index(out).lines()
    assert videotext.open_index(out).search(QUERY, k=10, where="duration > 5") == []
    report = videotext.build_index(str(run), videos, out, update=True, progress=False)
    assert report.update.add == [] and sorted(report.update.keep) == list(NAMES[:3])
    filled = Index.load(out).entries()
    assert all(e.meta["duration"] == pytest.approx(6.0, abs=0.1) and e.end == e.meta["duration"] for e in filled)
    assert len(videotext.open_index(out).search(QUERY, k=10, where="duration > 5")) == 3


def test_a_run_that_ranks_videos_refuses_decode(setup):
    """`eval --decode` reads a moment run's spans another way; a retrieval run is one line, no traceback."""
    from videotext.apps.runs import evaluate
    from videotext.cli import app
    from videotext.errors import VideoTextError

    _, run, _ = setup
    with pytest.raises(VideoTextError, match=r"--decode reads a moment run's spans; this run's method \(dual\) ranks videos"):
        evaluate(run, decode="saliency", report=False)
    printed = CliRunner().invoke(app, ["eval", str(run), "--decode", "saliency"])
    assert printed.exit_code != 0 and "ranks videos" in printed.output and "Traceback" not in printed.output
