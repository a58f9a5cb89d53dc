"""The Milvus store (`videotext.search.milvus.MilvusIndex`) on Milvus Lite, the real Milvus engine in
a file: the same answers as the FAISS index on the same embeddings, filters, updates, and errors."""
from __future__ import annotations

import time

import numpy as np
import pytest

from videotext.errors import VideoTextError
from videotext.search.entries import Entry
from videotext.search.index import Index
from videotext.search.milvus import MilvusIndex

DIM = 32


def corpus(n: int = 400, seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(8, DIM))
    vectors = centres[rng.integers(0, 8, n)] + 0.6 * rng.normal(size=(n, DIM))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    entries = []
    for i in range(n):
        start = None if i % 5 == 0 else float(10 * (i % 7))
        entries.append(Entry(f"clip{i}", path=f"{'talks' if i % 3 else 'lectures/2024_a'}/v{i % 50}.mp4",
                             start=start, end=None if start is None else start + 10, video_id=f"v{i % 50}",
                             meta={"duration": float(60 + i % 4 * 600), "split": ["train", "val", "test"][i % 3],
                                   "tags": ["keynote"] if i % 11 == 0 else [], "hash": f"h{i % 13}"}))
    queries = (vectors[rng.integers(0, n, 20)] + 0.3 * rng.normal(size=(20, DIM))).astype(np.float32)
    return vectors, entries, queries


@pytest.fixture()
def both(tmp_path):
    vectors, entries, queries = corpus()
    faiss_index = Index(DIM, model="m", kind="flat")
    faiss_index.add(vectors, entries)
    milvus = MilvusIndex(f"milvus:{tmp_path / 'store.db'}", DIM, model="m", collection="clips")
    milvus.add(vectors, entries)
    yield faiss_index, milvus, queries
    milvus.close()


def test_exact_milvus_and_exact_faiss_return_the_same_top_k_within_1e5(both):
    faiss_index, milvus, queries = both
    assert len(milvus) == len(faiss_index) == 400
    for want, got in zip(faiss_index.search(queries, k=10), milvus.search(queries, k=10)):
        assert [h.id for h in got] == [h.id for h in want]
        assert np.allclose([h.score for h in got], [h.score for h in want], atol=1e-5)
        assert got[0].path == want[0].path and got[0].meta == want[0].meta and got[0].start == want[0].start


@pytest.mark.parametrize("where", [
    'split == "test" and start >= 30', 'path startswith "lectures/2024_a/"', 'tags contains "keynote"',
    'not (start < 20) or duration > 1000', 'video_id in ["v1", "v7"]',
])
def test_filtered_search_agrees_and_still_returns_k(both, where):
    faiss_index, milvus, queries = both
    passing = Index._passing(faiss_index, where)
    assert len(passing) >= 8, where
    for want, got in zip(faiss_index.search(queries, k=8, where=where), milvus.search(queries, k=8, where=where)):
        assert len(want) == 8  # k results although most entries fail the filter
        assert [h.id for h in got] == [h.id for h in want]
        assert np.allclose([h.score for h in got], [h.score for h in want], atol=1e-5)


def test_updates_upsert_remove_get_and_the_folder_that_names_the_store(both, tmp_path):
    faiss_index, milvus, queries = both
    vectors, entries, _ = corpus()
    moved = Entry("clip1", path="new/place.mp4", video_id="v1", meta={"split": "test"})
    milvus.add(vectors[:1] * -1, [moved])  # an id again: replaced, not added
    assert len(milvus) == 400 and milvus.get("clip1").path == "new/place.mp4"
    assert np.allclose(milvus.embeddings_for(["clip1", "clip2"]), np.stack([-vectors[0], vectors[2]]), atol=1e-6)
    assert milvus.remove(["clip2", "clip3", "nope"]) == 2 and len(milvus) == 398 and "clip2" not in milvus
    milvus.meta = {"run": "runs/x"}
    folder = milvus.save(tmp_path / "idx")
    reopened = Index.load(folder)  # index.json names the store: the same call opens either
    assert isinstance(reopened, MilvusIndex) and len(reopened) == 398 and reopened.meta == {"run": "runs/x"}
    assert [h.id for h in reopened.search(queries[:1], k=5)[0]] == [h.id for h in milvus.search(queries[:1], k=5)[0]]


def test_re_scoring_parts_round_trip(tmp_path):
    vectors, entries, _ = corpus(20)
    parts = {"experts": np.random.default_rng(1).normal(size=(20, 3, 8)).astype(np.float32)}
    milvus = MilvusIndex(f"milvus:{tmp_path / 'p.db'}", DIM, model="m")
    milvus.add(vectors, entries, parts=parts)
    got = milvus.parts_for(["clip4", "clip0"])
    assert np.array_equal(got["experts"], parts["experts"][[4, 0]])
    milvus.close()


def test_a_collection_of_another_dimension_or_model_and_a_bad_location_are_one_clear_error(tmp_path):
    location = f"milvus:{tmp_path / 'e.db'}"
    MilvusIndex(location, DIM, model="m", collection="c").close()
    with pytest.raises(VideoTextError, match=r"holds 32-d vectors; this model's are 16-d \(use another --collection\)"):
        MilvusIndex(location, 16, model="m", collection="c")
    with pytest.raises(VideoTextError, match=r"was built with model 'm', not 'other'"):
        MilvusIndex(location, DIM, model="other", collection="c")
    with pytest.raises(VideoTextError, match=r"has no collection 'absent'"):
        MilvusIndex(location, DIM, collection="absent", create=False)
    with pytest.raises(VideoTextError, match=r"a Milvus Lite file must end in \.db"):
        MilvusIndex(f"milvus:{tmp_path / 'x.sqlite'}", DIM)


def test_a_fresh_build_writes_a_new_version_and_a_failed_one_leaves_the_served_one(tmp_path, monkeypatch):
    """`staged=True` fills a new version `<alias>__v<N>`; the alias names the old one until `publish`
    moves it in one call. A build that dies before publishing leaves the served version whole, and
    the next build drops what it left. The version replaced is kept RETIRE_GRACE seconds for the
    readers still on it, then dropped by a later build."""
    from videotext.search import milvus as store

    vectors, entries, queries = corpus(60)
    location = f"milvus:{tmp_path / 's.db'}"
    old = MilvusIndex(location, DIM, model="m", collection="c")
    old.add(vectors[:40], entries[:40])
    assert old.collection == "c__v1" and old.target() == "c__v1"
    staged = MilvusIndex(location, DIM, model="m", collection="c", staged=True)
    assert staged.collection == "c__v2" and staged.target() == "c__v1"
    staged.add(vectors[40:], entries[40:])
    assert len(old) == 40 and old.search(queries, 1)[0][0].id in {e.id for e in entries[:40]}
    del staged  # died before publishing
    again = MilvusIndex(location, DIM, model="m", collection="c", staged=True)
    assert len(again) == 0 and len(old) == 40  # the leftover version was dropped
    again.add(vectors[40:], entries[40:])
    again.publish()
    assert again.target() == again.collection == "c__v2" and not again.writable
    assert sorted(again._client.list_collections()) == ["c__v1", "c__v2"]  # c__v1 retired, kept for its readers
    assert len(old) == 40  # a reader pinned to the version it opened still reads it
    served = MilvusIndex(location, DIM, model="m", collection="c", create=False)
    assert served.collection == "c__v2" and sorted(served.ids) == sorted(e.id for e in entries[40:])
    monkeypatch.setattr(store, "RETIRE_GRACE", 0.5)
    time.sleep(0.6)
    third = MilvusIndex(location, DIM, model="m", collection="c", staged=True)
    third.add(vectors[:5], entries[:5])
    third.publish()
    assert sorted(third._client.list_collections()) == ["c__v2", "c__v3"]  # c__v1's grace is over


def test_an_update_writes_a_copy_and_moves_the_alias_and_a_collection_made_before_aliases_is_replaced(tmp_path):
    from pymilvus import MilvusClient

    vectors, entries, queries = corpus(30)
    path = tmp_path / "u.db"
    client = MilvusClient(str(path))  # a collection made before aliases: the alias's own name
    legacy = MilvusIndex.__new__(MilvusIndex)
    legacy.__dict__.update(dim=DIM, model="m", collection="c", requested_kind="auto", _client=client, writable=True)
    legacy._create_collection()
    legacy.add(vectors[:10], entries[:10])
    opened = MilvusIndex(f"milvus:{path}", DIM, model="m", collection="c", create=False)
    assert opened.collection == "c" and len(opened) == 10  # still opens
    opened.add(vectors[10:12], entries[10:12])  # an update: a copy of the served version, then the rows
    assert opened.collection == "c__v1" and opened.writable and len(opened) == 12
    assert len(MilvusIndex(f"milvus:{path}", DIM, model="m", collection="c", create=False)) == 10  # still served
    opened.remove(["clip0"])
    opened.publish()  # the name goes to the alias: dropped, then given (once)
    assert opened.target() == "c__v1" and sorted(client.list_collections()) == ["c__v1"]
    served = MilvusIndex(f"milvus:{path}", DIM, model="m", collection="c", create=False)
    assert len(served) == 11 and "clip0" not in served and "clip11" in served
    served.add(vectors[12:13], entries[12:13])
    served.save(tmp_path / "folder")  # saving publishes the version written
    reopened = MilvusIndex.from_settings(__import__("json").loads((tmp_path / "folder" / "index.json").read_text()))
    assert reopened.collection == "c__v2" == reopened.target() and len(reopened) == 12
    np.testing.assert_allclose(reopened.embeddings_for(["clip5"]), vectors[5:6], atol=1e-6)
    assert reopened.get("clip5").meta == entries[5].meta


@pytest.mark.parametrize("store, kind, floor", [("faiss", "hnsw", 0.95), ("faiss", "ivf", 0.9),
                                                ("milvus", "hnsw", 0.95), ("milvus", "ivf", 0.9)])
def test_recall_at_10_of_the_approximate_kinds_against_exact(tmp_path, store, kind, floor):
    """FAISS HNSW / IVF and Milvus HNSW / IVF_FLAT against exact search on 4000 clustered
    vectors (the shape of embeddings: dense clusters, near neighbours inside them)."""
    vectors, entries, queries = corpus(4000, seed=1)
    exact = Index(DIM, model="m", kind="flat")
    exact.add(vectors, entries)
    if store == "faiss":
        approximate = Index(DIM, model="m", kind=kind)
    else:
        approximate = MilvusIndex(f"milvus:{tmp_path / 'r.db'}", DIM, model="m", collection="r", kind=kind)
    approximate.add(vectors, entries)
    truth = [{h.id for h in hits} for hits in exact.search(queries, 10)]
    found = [{h.id for h in hits} for hits in approximate.search(queries, 10)]
    recall = float(np.mean([len(t & f) / 10 for t, f in zip(truth, found)]))
    print(f"{store} {kind}: recall@10 {recall:.3f}")
    assert floor <= recall <= 1.0
