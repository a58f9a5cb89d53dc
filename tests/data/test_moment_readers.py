"""Moment retrieval in the one schema: Charades-STA, QVHighlights, ActivityNet's `moments` protocol,
the manifest round trip, and bad input named by file and line under the one `on_bad` policy."""
from __future__ import annotations

from pathlib import Path

import pytest

from videotext.data.readers import read_dataset
from videotext.data.readers.records import examples
from videotext.data.schema import Moment, Segment, Video, VideoTextDataset
from videotext.errors import DataFormatError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "readers"
CHARADES = FIXTURES / "charades_sta"
QVH = FIXTURES / "qvhighlights"


def kinds(dataset) -> list[tuple[str, str, str]]:
    return [(r["kind"], r["action"], r["record"]) for r in dataset.meta["bad_records"]["records"]]


# --- Charades-STA --------------------------------------------------------------------------
def test_charades_sta_reads_lines_durations_and_carves_validation():
    dataset = read_dataset("Charades-STA", CHARADES)
    assert dataset.name == "charades_sta"
    assert sorted(dataset.splits) == ["test", "train", "val"]
    assert sorted(dataset.splits["test"]) == ["H2CC5", "T9W0D"]
    assert sorted(dataset.splits["train"] + dataset.splits["val"]) == ["B8ZT2", "K3Q7P", "M41XE"]
    assert dataset.meta["validation"]["val"] == {"from": "train", "count": 1, "seed": 0}
    video = dataset["B8ZT2"]
    assert video.duration == 25.0 and video.path == "B8ZT2.mp4"
    assert [(m.query, m.spans) for m in video.moments] == [
        ("someone sits down on the sofa.", [(2.3, 9.0)]), ("a person is reading a book.", [(11.5, 19.2)]),
        ("the person puts the book on the table.", [(18.0, 24.6)])]
    queries = dataset.split("test").moment_queries()
    assert [(q.qid, q.spans) for q in queries] == [
        ("T9W0D:0", [(1.2, 8.9)]), ("T9W0D:1", [(9.5, 15.0)]), ("H2CC5:0", [(0.0, 10.4)])]


def test_charades_sta_bad_lines_are_named_by_file_and_line():
    dataset = read_dataset("charades_sta", CHARADES / "bad")
    assert kinds(dataset) == [
        ("reversed", "repaired", "line 2"), ("zero_length", "dropped", "line 3"),
        ("past_duration", "repaired", "line 4"), ("outside_video", "dropped", "line 5"),
        ("missing_video", "dropped", "line 6"), ("duplicate", "dropped", "line 7")]
    assert [m.spans for m in dataset["K3Q7P"].moments] == [[(0.0, 7.4)], [(6.1, 12.8)]]
    assert dataset["B8ZT2"].moments[0].spans == [(18.0, 25.0)]  # clipped to Charades' length
    assert "ZZZZZ" not in dataset
    lines = examples(dataset.meta["bad_records"])
    assert "  missing_video (dropped 1): charades_sta_train.txt: line 6" in lines

    dropped = read_dataset("charades_sta", CHARADES / "bad", on_bad="drop")
    assert [m.spans for m in dropped["K3Q7P"].moments] == [[(0.0, 7.4)]]
    assert "B8ZT2" not in dropped  # both its lines were bad: past the end, then outside the video

    with pytest.raises(DataFormatError, match=r"charades_sta_train.txt \[line 2\]: segment ends before it starts"):
        read_dataset("charades_sta", CHARADES / "bad", on_bad="error")


def test_charades_sta_missing_media_and_durations(tmp_path):
    videos = tmp_path / "videos"
    videos.mkdir()
    (videos / "K3Q7P.mp4").write_bytes(b"")
    dataset = read_dataset("charades_sta", CHARADES / "charades_sta_train.txt", video_dir=videos)
    assert list(dataset.videos) == ["K3Q7P"]
    assert [r["record"] for r in dataset.meta["bad_records"]["records"]] == ["line 3", "line 4", "line 5", "line 6"]
    with pytest.raises(DataFormatError, match=r"\[line 3\]: the query's video is not there"):
        read_dataset("charades_sta", CHARADES / "charades_sta_train.txt", video_dir=videos, on_bad="error")
    # no Charades files: no durations, spans checked for order and length only
    lone = tmp_path / "charades_sta_test.txt"
    lone.write_text("T9W0D 1.2 88.9##a long one.\nT9W0D 2 1##reversed.\n", encoding="utf-8")
    dataset = read_dataset("charades_sta", lone)
    assert dataset["T9W0D"].duration is None
    assert [m.spans for m in dataset["T9W0D"].moments] == [[(1.2, 88.9)], [(1.0, 2.0)]]
    with pytest.raises(DataFormatError, match="durations"):
        read_dataset("charades_sta", lone, durations=tmp_path)


def test_charades_sta_malformed_line_is_named(tmp_path):
    path = tmp_path / "charades_sta_train.txt"
    path.write_text("K3Q7P 0.0 7.4##fine.\nK3Q7P 0.0 a person without an end\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"\[line 2\]: expected '\[video\] \[start\] \[end\]##\[sentence\]'"):
        read_dataset("charades_sta", path)


# --- QVHighlights ------------------------------------------------------------------------------
def test_qvhighlights_windows_saliency_and_protocols():
    dataset = read_dataset("qvhighlights", QVH)
    assert dataset.meta["protocol"] == "val-as-test"
    assert dataset.splits["test"] == ["Mn1Op2Qr3St_360.0_510.0", "Uv4Wx5Yz6Ab_0.0_150.0"]
    assert dataset.splits["test_release"] == ["Cd7Ef8Gh9Ij_210.0_360.0", "Kl0Mn1Op2Qr_60.0_210.0"]
    video = dataset["aB3dE5fG7hI_60.0_210.0"]
    assert video.duration == 150.0 and video.path == "aB3dE5fG7hI_60.0_210.0.mp4"
    second = video.moments[1]
    assert (second.id, second.spans, second.clip_length) == ("102", [(60.0, 64.0), (80.0, 86.0)], 2.0)
    assert second.clip_ids == [30, 31, 40, 41, 42] and second.saliency[2] == [3.0, 4.0, 4.0]
    # the released test queries have no answers: kept, but not among the queries with spans
    release = dataset.split("test_release")
    assert len(release.moment_queries(with_spans=False)) == 2 and release.moment_queries() == []
    assert [q.qid for q in dataset.split("test").moment_queries()] == ["201", "202"]

    official = read_dataset("qvhighlights", QVH, protocol="official")
    assert sorted(official.splits) == ["test", "train", "val"] and len(official.splits["train"]) == 3
    with pytest.raises(DataFormatError, match="unknown protocol 'x'.*val-as-test, official"):
        read_dataset("qvhighlights", QVH, protocol="x")


def test_qvhighlights_bad_windows_and_clips():
    dataset = read_dataset("qvhighlights", QVH / "bad", protocol="official")
    assert kinds(dataset) == [
        ("reversed", "repaired", "line 1.relevant_windows[0]"), ("past_duration", "repaired", "line 2.relevant_windows[1]"),
        ("clip_outside_video", "repaired", "line 3"), ("zero_length", "dropped", "line 4.relevant_windows[0]")]
    moments = {m.id: m for v in dataset for m in v.moments}
    assert moments["101"].spans == [(20.0, 28.0)]
    assert moments["102"].spans == [(60.0, 64.0), (146.0, 150.0)]
    assert moments["103"].clip_ids == [0] and moments["103"].saliency == [[4.0, 4.0, 3.0]]
    assert "104" not in moments  # its one window had zero length

    dropped = read_dataset("qvhighlights", QVH / "bad", protocol="official", on_bad="drop")
    moments = {m.id: m for v in dropped for m in v.moments}
    assert sorted(moments) == ["102", "103"] and moments["102"].spans == [(60.0, 64.0)]
    assert moments["103"].clip_ids == [] and moments["103"].spans == [(0.0, 6.0)]
    with pytest.raises(DataFormatError, match=r"highlight_train_release.jsonl \[line 1.relevant_windows\[0\]\]"):
        read_dataset("qvhighlights", QVH / "bad", on_bad="error")


def test_qvhighlights_malformed_line(tmp_path):
    path = tmp_path / "highlight_val_release.jsonl"
    path.write_text('{"qid": 1, "query": "q", "duration": 150, "vid": "v"}\n{"qid": 2, "query": "q"\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"\[line 2\]: not valid JSON"):
        read_dataset("qvhighlights", path)
    path.write_text('{"qid": 1, "query": "q", "duration": 150, "vid": "v", "relevant_windows": [[0, 2]], '
                    '"relevant_clip_ids": [0, 1], "saliency_scores": [[1, 1, 1]]}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"\[line 1.saliency_scores\]: 1 rows of scores for 2"):
        read_dataset("qvhighlights", path)


# --- ActivityNet Captions ------------------------------------------------------------------------
def test_activitynet_moments_protocol_splits_and_queries(tmp_path):
    dataset = read_dataset("activitynet", FIXTURES / "activitynet", protocol="moments")
    assert sorted(dataset.splits) == ["test", "train", "val"]
    assert "validation" not in dataset.meta  # val_1 validates: nothing carved
    queries = dataset.split("train").moment_queries()
    assert (queries[0].qid, queries[0].query, queries[0].spans) == (
        "v_QOlSCBRmfWY:0", "A young woman is seen standing in a room and leads into her dancing.", [(0.83, 19.86)])
    assert len(queries) == sum(len(dataset[i].segments) for i in dataset.splits["train"])
    # with a video folder, a video without its file is dropped and reported
    videos = tmp_path / "videos"
    videos.mkdir()
    (videos / "v_QOlSCBRmfWY.mp4").write_bytes(b"")
    only = read_dataset("activitynet", FIXTURES / "activitynet" / "train.json", protocol="moments", video_dir=videos)
    assert list(only.videos) == ["v_QOlSCBRmfWY"]
    assert {r["kind"] for r in only.meta["bad_records"]["records"]} == {"missing_video"}


# --- the schema --------------------------------------------------------------------------------
def test_moments_round_trip_through_the_manifest(tmp_path):
    video = Video("v", duration=150.0, moments=[
        Moment("a query", [(2.0, 8.0), (20.0, 30.5)], id="7", clip_length=2.0, clip_ids=[1, 2], saliency=[[1, 2], [3, 4]]),
        Moment("no answer yet")])
    dataset = VideoTextDataset("d", [video, Video("w", duration=20.0, segments=[Segment(1.0, 4.0, "a sentence")])],
                               {"test": ["v", "w"]})
    loaded = VideoTextDataset.load(dataset.save(tmp_path / "manifest.json"))
    assert loaded["v"].moments == video.moments
    assert [(q.qid, q.query, q.spans) for q in loaded.moment_queries()] == [
        ("7", "a query", [(2.0, 8.0), (20.0, 30.5)]), ("w:0", "a sentence", [(1.0, 4.0)])]
    assert "moments" not in loaded["w"].to_dict()


def test_manifest_moment_errors_name_the_key():
    with pytest.raises(DataFormatError, match=r"videos\[v\].moments\[0\]"):
        VideoTextDataset.from_dict({"format": "videotext-manifest", "videos": [{"id": "v", "moments": [{"spans": []}]}]})
    with pytest.raises(DataFormatError, match=r"videos\[v\].moments\[0\].*span ends before it starts"):
        VideoTextDataset.from_dict({"format": "videotext-manifest",
                                    "videos": [{"id": "v", "moments": [{"query": "q", "spans": [[3, 1]]}]}]})
