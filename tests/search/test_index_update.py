"""Updates that notice a file changed in place: content fingerprints, the update plan, and
stale features discarded from a feature store."""
from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from videotext.data import media_files
from videotext.data.features import FeatureStore
from videotext.data.schema import Video, VideoTextDataset
from videotext.search.build import fingerprint_videos, plan_index
from videotext.search.entries import Entry


def _dataset(root, names):
    videos = [Video(id=n, path=f"{n}.mp4") for n in names]
    return VideoTextDataset("folder", videos, {"all": list(names)}, root=root)


def _entry(video_id, digest, suffix=""):
    return Entry(id=video_id + suffix, video_id=video_id, meta={"hash": digest} if digest else {})


def test_a_fingerprint_is_the_sha256_and_a_known_one_is_reused_while_size_and_time_hold(tmp_path, monkeypatch):
    clip = tmp_path / "a.mp4"
    clip.write_bytes(b"frame bytes" * 1000)
    first = media_files.fingerprint(clip)
    assert first["hash"] == hashlib.sha256(b"frame bytes" * 1000).hexdigest() and first["size"] == 11_000
    reads = []
    monkeypatch.setattr(media_files, "sha256_of", lambda path: reads.append(path) or "recomputed")
    assert media_files.fingerprint(clip, {**first, "hash": "recorded"})["hash"] == "recorded" and not reads
    os.utime(clip, ns=(first["mtime_ns"] + 10**9, first["mtime_ns"] + 10**9))  # touched: read again
    assert media_files.fingerprint(clip, {**first, "hash": "recorded"})["hash"] == "recomputed" and len(reads) == 1


def test_the_plan_re_adds_changed_and_pending_videos_and_keeps_unhashed_entries(tmp_path):
    dataset = _dataset(tmp_path, ["same", "changed", "new", "old_index", "pending"])
    entries = [_entry("same", "h1"), _entry("changed", "h2", "@0"), _entry("changed", "h2", "@5"),
               _entry("old_index", None), _entry("pending", "h5"), _entry("deleted", "h6")]
    prints = {"same": {"hash": "h1"}, "changed": {"hash": "H2"}, "new": {"hash": "h3"},
              "old_index": {"hash": "h4"}, "pending": {"hash": "h5"}}
    plan = plan_index(dataset, entries, prints, pending=["pending"])
    assert plan.add == ["changed", "new", "pending"]
    assert plan.changed == ["changed", "pending"]
    assert plan.remove == ["changed@0", "changed@5", "pending", "deleted"]
    assert plan.keep == ["same", "old_index"] and plan.gone == ["deleted"]
    fresh = plan_index(dataset)  # a fresh build adds every video and changes nothing
    assert fresh.add == [v.id for v in dataset] and not (fresh.remove or fresh.changed or fresh.gone)


def test_fingerprints_reuse_what_the_index_or_the_store_recorded(tmp_path, monkeypatch):
    for name, body in (("a", b"A" * 10), ("b", b"B" * 20), ("c", b"C" * 30)):
        (tmp_path / f"{name}.mp4").write_bytes(body)
    dataset = _dataset(tmp_path, ["a", "b", "c", "missing"])
    real = {v.id: media_files.fingerprint(dataset.media_path(v)) for v in list(dataset)[:3]}
    entries = [Entry(id="a", video_id="a", path=str(tmp_path / "a.mp4"), meta={**real["a"], "hash": "from-index"})]
    sources = {"b": {**real["b"], "hash": "from-store", "path": str(tmp_path / "b.mp4")}}
    prints = fingerprint_videos(dataset, entries, sources)
    assert {k: v["hash"] for k, v in prints.items()} == {"a": "from-index", "b": "from-store", "c": real["c"]["hash"]}


def test_discard_removes_keys_from_the_merged_file_the_parts_and_the_staged_chunks(tmp_path):
    store = FeatureStore(tmp_path)
    with store.writer("motion", 3, flush_every=1) as writer:
        for key in ("a", "b/c", "d"):
            writer.add(key, np.full((2, 3), ord(key[0]), np.float32), np.arange(2.0))
    late = store.writer("motion", 3, flush_every=1)
    late.add("b/c", np.zeros((1, 3), np.float32), np.zeros(1))  # a finished part, not merged yet
    chunk = tmp_path / ".chunks" / "motion" / "b%2Fc"
    chunk.mkdir(parents=True)
    (chunk / "chunk-00000-of-00002.npz").write_bytes(b"x")
    assert store.discard(["b/c", "never-there"]) == 2  # merged entry + part entry
    assert sorted(store.keys("motion")) == ["a", "d"] and not chunk.exists()
    assert "b/c" not in late.done_keys()
    np.testing.assert_array_equal(store.get("motion", "d")[0], np.full((2, 3), ord("d")))
    assert store.info("motion")["dim"] == 3  # the header survived the rewrite
    assert store.discard([]) == 0


def test_sources_are_merged_and_a_corrupt_record_is_one_clear_error(tmp_path):
    store = FeatureStore(tmp_path)
    store.record_sources({"a": {"hash": "1"}})
    store.record_sources({"b": {"hash": "2"}, "a": {"hash": "3"}})
    assert store.sources() == {"a": {"hash": "3"}, "b": {"hash": "2"}}
    (tmp_path / "sources.json").write_text("{not json")
    with pytest.raises(Exception, match=r"sources.json: damaged: 9 bytes where \d+ were written; delete it"):
        store.sources()  # its digest says so first
    (tmp_path / ".sources.json.crc32").unlink()  # a record written before digests: the JSON is read
    with pytest.raises(Exception, match="sources.json.*not JSON"):
        store.sources()
