"""The moment track's files (`search.moment_track`) and the search for moments over an index and its
track (`search.moment_search.find_moments`), with hand-set vectors whose spans are known exactly."""
from __future__ import annotations

import numpy as np
import pytest

from videotext.errors import DataFormatError, VideoTextError
from videotext.search import Entry, Index
from videotext.search.moment_search import find_moments, query_vector
from videotext.search.moment_track import TRACK_FOLDER, TRACK_FILE, TrackWriter, open_track, remove_track
from videotext.eval.span_finder import SpanSettings

DIM = 4
EXACT = SpanSettings(smooth=1, context_ratio=0.5, context_weight=1.0)


def unit(*rows: list[float]) -> np.ndarray:
    array = np.asarray(rows, np.float32)
    return array / np.linalg.norm(array, axis=1, keepdims=True)


def one_step_times(count: int, offset: float = 0.0) -> np.ndarray:
    starts = offset + np.arange(count, dtype=np.float32)
    return np.stack([starts, starts + 1], axis=1)


def test_the_track_round_trips_and_a_failed_write_keeps_the_previous_one(tmp_path):
    a, b = unit(*([[1, 0, 0, 0]] * 3)), unit([0, 1, 0, 0], [0, 0, 1, 0])
    with TrackWriter(tmp_path, DIM, "run:1") as writer:
        writer.add("a", a, one_step_times(3), "hash-a")
        writer.add("b", b, one_step_times(2, 10.0), None)
        writer.finish()
    track = open_track(tmp_path)
    assert len(track) == 2 and "a" in track and "c" not in track and track.source == "run:1"
    assert track.rows == {"a": (0, 3), "b": (3, 2)} and track.hashes == {"a": "hash-a", "b": None}
    vectors, times = track.video("b")
    np.testing.assert_array_equal(vectors, b.astype(np.float16))
    np.testing.assert_array_equal(times, [[10, 11], [11, 12]])
    scores, starts, ends = track.scores("b", np.array([0, 1, 0, 0], np.float32))
    np.testing.assert_allclose(scores, [1, 0]) and np.testing.assert_array_equal(starts, [10, 11])
    with pytest.raises(RuntimeError):
        with TrackWriter(tmp_path, DIM, "run:2") as writer:
            writer.add("a", a, one_step_times(3))
            raise RuntimeError("killed")
    assert open_track(tmp_path).source == "run:1"  # the failed generation left nothing behind
    assert sorted(p.name.split("-")[0] for p in (tmp_path / TRACK_FOLDER).iterdir()) == ["times", "track.json",
                                                                                         "vectors"]
    with pytest.raises(ValueError, match="do not match"):
        with TrackWriter(tmp_path, DIM, "run:3") as writer:
            writer.add("a", a[:, :3], one_step_times(3))


def test_a_short_data_file_is_one_error_naming_it(tmp_path):
    with TrackWriter(tmp_path, DIM, None) as writer:
        writer.add("a", unit(*([[1, 0, 0, 0]] * 3)), one_step_times(3))
        writer.finish()
    data = next((tmp_path / TRACK_FOLDER).glob("vectors-*"))
    data.write_bytes(data.read_bytes()[:-2])
    with pytest.raises(DataFormatError, match=f"{data.name}.*holds 22 bytes.*needs 24"):
        open_track(tmp_path)
    remove_track(tmp_path)
    assert open_track(tmp_path) is None and not list((tmp_path / TRACK_FOLDER).iterdir())
    (tmp_path / TRACK_FOLDER / TRACK_FILE).write_text("{}")
    with pytest.raises(DataFormatError, match="format"):
        open_track(tmp_path)


@pytest.fixture()
def indexed(tmp_path):
    """Three 20-s videos as whole-video entries, and a track where the query direction e0 rises on
    known steps: v1 steps 5-8 (strong), v2 steps 12-13 (weaker), v3 nowhere."""
    steps = {name: np.tile(unit([0, 1, 0, 0]), (20, 1)) for name in ("v1", "v2", "v3")}
    steps["v1"][5:9] = unit([1, 1, 0, 0])  # cosine with e0: 0.707
    steps["v2"][12:14] = unit([1, 2, 0, 0])  # 0.447
    index = Index(DIM, model="hand")
    entries = [Entry(n, path=f"/videos/{n}.mp4", start=0.0, end=20.0, meta={"duration": 20.0, "captions": [n],
                                                                          "split": "test" if n != "v2" else "train"})
               for n in steps]
    index.add(unit([1, 0.9, 0, 0], [1, 1.1, 0, 0], [0, 1, 0, 0]), entries)  # the shortlist: v1, v2, v3
    with TrackWriter(tmp_path, DIM, None) as writer:
        for name, vectors in steps.items():
            writer.add(name, vectors, one_step_times(20))
        writer.finish()
    return index, open_track(tmp_path)


def test_moments_are_spans_of_the_shortlisted_videos_best_first(indexed):
    index, track = indexed
    query = np.array([1, 0, 0, 0], np.float32)
    hits = find_moments(index, track, query, k=3, settings=EXACT)
    assert [(h.id, h.start, h.end) for h in hits[:2]] == [("v1@5-9", 5.0, 9.0), ("v2@12-14", 12.0, 14.0)]
    top = hits[0]
    assert top.score == pytest.approx(np.float16(0.7071) - 0.0, abs=1e-3) and top.rank == 1
    assert top.video_id == "v1" and top.path == "/videos/v1.mp4"
    assert top.meta == {"duration": 20.0, "captions": ["v1"], "split": "test", "entry": "v1",
                        "inside": pytest.approx(0.7071, abs=1e-3)}
    assert [h.rank for h in hits] == [1, 2, 3]


def test_a_filter_keeps_the_videos_and_the_spans_that_pass_it(indexed):
    index, track = indexed
    query = np.array([1, 0, 0, 0], np.float32)
    assert {h.video_id for h in find_moments(index, track, query, k=5, where='split == "train"', settings=EXACT)} \
        == {"v2"}
    later = find_moments(index, track, query, k=5, where="start >= 10", settings=EXACT)
    assert later and all(h.start >= 10 for h in later) and later[0].id == "v2@12-14"
    assert find_moments(index, track, query, k=2, videos=1, settings=EXACT)[0].video_id == "v1"
    with pytest.raises(VideoTextError, match="width 3"):
        find_moments(index, track, np.ones(3, np.float32))
    with pytest.raises(VideoTextError, match="k must be"):
        find_moments(index, track, query, k=0)


def test_a_query_side_without_query_vectors_is_one_error():
    class SearchOnly:
        def search(self, query, index, k=10, where=None):
            return []

    with pytest.raises(VideoTextError, match="SearchOnly cannot encode a query vector"):
        query_vector(SearchOnly(), "a query")
