"""The FAISS index: exactness, recall, add/remove/replace, persistence, clip helpers."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from videotext.errors import VideoTextError
from videotext.encode import encode_texts
from videotext.search import Entry, Hit, Index, merge_hits, sliding_windows


def unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def make(kind: str, n: int = 500, d: int = 16, seed: int = 0, **kw) -> tuple[Index, np.ndarray]:
    x = unit(np.random.default_rng(seed), n, d)
    index = Index(d, model="test", kind=kind, **kw)
    index.add(x, [Entry(f"v{i}", path=f"/videos/v{i}.mp4", meta={"i": i}) for i in range(n)])
    return index, x


def ids(hits: list[Hit]) -> list[str]:
    return [h.id for h in hits]


def test_flat_search_matches_numpy_brute_force():
    index, x = make("flat", n=1000, d=32)
    q = unit(np.random.default_rng(1), 20, 32)
    sims = q @ x.T
    want = np.argsort(-sims, axis=1)[:, :10]
    results = index.search(q, k=10)
    assert index.kind == "flat" and len(results) == 20
    for row, hits, want_row in zip(sims, results, want):
        assert ids(hits) == [f"v{i}" for i in want_row]
        np.testing.assert_allclose([h.score for h in hits], row[want_row], atol=1e-5)
        assert [h.rank for h in hits] == list(range(1, 11))
        assert hits[0].path == f"/videos/{hits[0].id}.mp4" and hits[0].video_id == hits[0].id


@pytest.mark.heavy
def test_hnsw_recall_at_10_vs_exact():
    rng = np.random.default_rng(0)
    x, q = unit(rng, 20_000, 64), unit(rng, 200, 64)
    index = Index(64, kind="hnsw")
    index.add(x, [str(i) for i in range(len(x))])
    exact = np.argsort(-(q @ x.T), axis=1)[:, :10]
    got = index.search(q, k=10)
    recall = np.mean([len({int(h.id) for h in hits} & set(row.tolist())) / 10 for hits, row in zip(got, exact)])
    assert index.kind == "hnsw"
    assert recall >= 0.95, recall


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf", "ivfpq"])
def test_every_kind_finds_a_stored_vector_and_forgets_removed_ones(kind):
    index, x = make(kind, n=2000, d=16)
    assert index.kind == kind
    assert index.search_one(x[7], k=3)[0].id == "v7"
    assert index.remove(["v7", "v8", "not-there"]) == 2
    assert len(index) == 1998 and "v7" not in index
    for hits in index.search(x[:20], k=50):
        assert not {"v7", "v8"} & set(ids(hits))
    assert index.search_one(x[9], k=1)[0].id == "v9"


def test_auto_is_flat_below_threshold_then_hnsw():
    rng = np.random.default_rng(0)
    index = Index(8, auto_threshold=100)
    assert index.kind == "auto"
    index.add(unit(rng, 60, 8), [f"a{i}" for i in range(60)])
    assert index.kind == "flat"
    more = unit(rng, 60, 8)
    index.add(more, [f"b{i}" for i in range(60)])  # 120 > 100: rebuilt as HNSW
    assert index.kind == "hnsw" and len(index) == 120
    assert index.search_one(more[3], k=1)[0].id == "b3"
    index.remove([f"b{i}" for i in range(60)])
    index.rebuild()  # re-resolves auto: 60 vectors -> flat
    assert index.kind == "flat" and len(index) == 60


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_adding_an_existing_id_replaces_it(kind):
    index, x = make(kind, n=1000, d=16)
    new = -x[0]  # v0 now points the other way
    index.add(new[None], [Entry("v0", path="/new.mp4")])
    assert len(index) == 1000 and index.get("v0").path == "/new.mp4"
    np.testing.assert_allclose(index.embeddings_for(["v0"])[0], new, atol=1e-6)
    assert index.search_one(new, k=1)[0].id == "v0"
    assert "v0" not in ids(index.search_one(x[0], k=20))
    with pytest.raises(VideoTextError, match="twice"):
        index.add(x[:2], ["dup", "dup"])


def test_remove_video_removes_all_its_clips():
    rng = np.random.default_rng(0)
    index = Index(8)
    clips = [Entry(f"long#{s}", path="/long.mp4", start=s, end=s + 4.0, video_id="long") for s in (0.0, 2.0, 4.0)]
    index.add(unit(rng, 4, 8), clips + [Entry("short")])
    assert index.remove_video("long") == 3
    assert index.ids == ["short"] and index.remove_video("long") == 0
    assert index.remove(["short"]) == 1 and len(index) == 0
    assert index.search(unit(rng, 2, 8), k=5) == [[], []]


def test_hnsw_tombstones_are_compacted():
    index, x = make("hnsw", n=1000, d=16, compact_ratio=0.25)
    index.remove([f"v{i}" for i in range(200)])
    assert index._faiss.ntotal == 1000  # tombstoned, not yet compacted
    assert all(int(h.id[1:]) >= 200 for hits in index.search(x[:200], k=10) for h in hits)
    index.remove([f"v{i}" for i in range(200, 300)])  # 300 > 250 dead: rebuilt
    assert index._faiss.ntotal == 700 and not index._dead
    assert index.search_one(x[500], k=1)[0].id == "v500"


def test_small_and_empty_indexes_and_dimension_errors():
    rng = np.random.default_rng(0)
    index = Index(8)
    assert index.search(unit(rng, 3, 8), k=10) == [[], [], []]
    index.add(unit(rng, 3, 8), ["a", "b", "c"])
    hits = index.search_one(unit(rng, 1, 8)[0], k=10)
    assert sorted(ids(hits)) == ["a", "b", "c"] and [h.rank for h in hits] == [1, 2, 3]
    with pytest.raises(VideoTextError, match=r"query dim 5 .* index dim 8"):
        index.search(np.ones((1, 5)))
    with pytest.raises(VideoTextError, match=r"embedding dim 5 .* index dim 8"):
        index.add(np.ones((1, 5)), ["x"])
    with pytest.raises(VideoTextError, match="2 embeddings but 1 entries"):
        index.add(np.ones((2, 8)), ["x"])
    with pytest.raises(VideoTextError, match="not in the index"):
        index.embeddings_for(["nope"])


def test_torch_input_is_accepted_and_normalised():
    index = Index(4)
    emb = torch.tensor([[3.0, 0, 0, 4.0], [0, 2.0, 0, 0]], dtype=torch.float64, requires_grad=True)
    index.add(emb, ["a", "b"])
    np.testing.assert_allclose(index.reconstruct(["a", "b"]), [[0.6, 0, 0, 0.8], [0, 1, 0, 0]], atol=1e-6)
    hit = index.search(torch.tensor([[0.0, 10.0, 0, 0]]), k=1)[0][0]
    assert hit.id == "b" and hit.score == pytest.approx(1.0)


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_save_load_round_trip(tmp_path, kind):
    index, x = make(kind, n=1500, d=16)
    index.remove(["v3", "v4"])  # HNSW: tombstones must survive the round trip
    q = unit(np.random.default_rng(5), 10, 16)
    before = index.search(q, k=10)
    index.save(tmp_path / "idx")
    info = json.loads((tmp_path / "idx" / "index.json").read_text())
    assert (info["dim"], info["model"], info["kind"], info["count"]) == (16, "test", kind, 1498)
    loaded = Index.load(tmp_path / "idx")
    assert loaded.search(q, k=10) == before
    assert loaded.get("v5") == Entry("v5", path="/videos/v5.mp4", meta={"i": 5})
    assert "v3" not in loaded and all("v3" not in ids(h) for h in loaded.search(x[3:5], k=20))
    loaded.add(x[3:4], ["v3"])  # labels continue, no collision with stored ones
    assert loaded.search_one(x[3], k=1)[0].id == "v3"
    loaded.save(tmp_path / "idx")  # overwrite in place
    assert len(Index.load(tmp_path / "idx")) == 1499
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]  # no temp folders left


def test_entries_are_a_parquet_table_and_version_1_json_lines_still_load(tmp_path):
    index, x = make("flat", n=30, d=8)
    index.add(x[:1], [Entry("clip", path=None, start=1.5, end=4.0, video_id="v0", meta={"captions": ["a café"]})])
    folder = index.save(tmp_path / "idx")
    table = pq.read_table(folder / "entries.parquet")
    assert table.column_names == ["label", "id", "path", "start", "end", "video_id", "meta"]
    assert table.num_rows == 31 and table.column("id").to_pylist()[:2] == ["v0", "v1"]
    assert json.loads((folder / "index.json").read_text())["version"] == 2
    assert Index.load(folder).get("clip") == Entry("clip", start=1.5, end=4.0, video_id="v0", meta={"captions": ["a café"]})
    # the same index as version 1 wrote it: entries.jsonl, one JSON object per line, no digests
    rows = table.to_pylist()
    for record in folder.glob(".*.crc32"):
        record.unlink()
    (folder / "entries.parquet").unlink()
    (folder / "entries.jsonl").write_text("".join(json.dumps({**r, "meta": json.loads(r["meta"])}) + "\n" for r in rows))
    info = json.loads((folder / "index.json").read_text())
    (folder / "index.json").write_text(json.dumps({**info, "version": 1}))
    old = Index.load(folder)
    assert old.entries() == Index.load(index.save(tmp_path / "new")).entries()
    assert old.search(x[:3], k=5) == index.search(x[:3], k=5)
    old.save(folder)  # saved again: the new layout
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == [
        "entries.parquet", "index.faiss", "index.json"]
    assert sorted(p.name for p in folder.glob(".*.crc32")) == [".entries.parquet.crc32", ".index.faiss.crc32",
                                                              ".index.json.crc32"]  # each one's digest


def test_failed_save_keeps_the_old_index(tmp_path):
    index, x = make("flat", n=20, d=8)
    index.save(tmp_path / "idx")
    index.add(x[:1], [Entry("bad", meta={"when": object()})])  # not JSON: save fails midway
    with pytest.raises(VideoTextError, match="'bad'"):
        index.save(tmp_path / "idx")
    assert len(Index.load(tmp_path / "idx")) == 20
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_empty_index_round_trip(tmp_path):
    Index(8, model="m", kind="auto").save(tmp_path / "e")
    loaded = Index.load(tmp_path / "e")
    assert len(loaded) == 0 and loaded.kind == "auto" and loaded.model == "m"


def test_save_refuses_to_overwrite_a_foreign_folder(tmp_path):
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "a.jpg").write_bytes(b"x")
    with pytest.raises(VideoTextError, match="refusing"):
        Index(4).save(tmp_path / "photos")


def test_corrupt_or_missing_folder_gives_clear_errors(tmp_path):
    with pytest.raises(VideoTextError, match="not found"):
        Index.load(tmp_path / "missing")
    index, _ = make("flat", n=50, d=8)
    folder = index.save(tmp_path / "idx")
    (folder / "index.faiss").write_bytes(b"garbage" * 10)
    with pytest.raises(VideoTextError, match="index.faiss"):
        Index.load(folder)
    index.save(folder)
    table = pq.read_table(folder / "entries.parquet")
    pq.write_table(table.slice(0, 49), folder / "entries.parquet")  # one entry lost
    with pytest.raises(VideoTextError, match=r"entries.parquet: damaged: \d+ bytes where \d+ were written"):
        Index.load(folder)  # its digest says so first
    (folder / ".entries.parquet.crc32").unlink()  # a folder written before digests: the files' cross-checks
    with pytest.raises(VideoTextError, match="49 entries but index.json says 50"):
        Index.load(folder)
    (folder / "entries.parquet").write_bytes(b"PAR1 not parquet")
    with pytest.raises(VideoTextError, match="entries.parquet: unreadable index entries"):
        Index.load(folder)
    (folder / "entries.parquet").unlink()
    with pytest.raises(VideoTextError, match="entries.parquet"):
        Index.load(folder)
    index.save(folder)
    (folder / "index.json").write_text("{")
    with pytest.raises(VideoTextError, match="index.json"):
        Index.load(folder)
    (folder / "index.json").unlink()
    with pytest.raises(VideoTextError, match="index.json"):
        Index.load(folder)


def hit(id: str, video: str, start: float | None, end: float | None, score: float) -> Hit:
    return Hit(id, start=start, end=end, video_id=video, score=score, rank=0)


def test_merge_hits_hand_worked():
    hits = [
        hit("a1", "A", 0.0, 4.0, 0.9),
        hit("b1", "B", 0.0, 4.0, 0.85),
        hit("a2", "A", 3.0, 7.0, 0.95),  # overlaps a1
        hit("a3", "A", 10.0, 14.0, 0.7),  # 3 s after a2
        hit("c", "C", None, None, 0.8),  # a whole video: untouched
    ]
    merged = merge_hits(hits)
    assert [(h.id, h.video_id, h.start, h.end, h.score, h.rank) for h in merged] == [
        ("a2", "A", 0.0, 7.0, 0.95, 1),
        ("b1", "B", 0.0, 4.0, 0.85, 2),
        ("c", "C", None, None, 0.8, 3),
        ("a3", "A", 10.0, 14.0, 0.7, 4),
    ]
    assert merged[0].meta["merged_ids"] == ["a1", "a2"] and "merged_ids" not in merged[1].meta
    wide = merge_hits(hits, gap=3.0)  # 7 + 3 reaches 10: all of A is one range
    assert [(h.id, h.start, h.end) for h in wide] == [("a2", 0.0, 14.0), ("b1", 0.0, 4.0), ("c", None, None)]
    touching = merge_hits([hit("x", "X", 0.0, 2.0, 0.1), hit("y", "X", 2.0, 4.0, 0.2)])
    assert [(h.id, h.start, h.end, h.score) for h in touching] == [("y", 0.0, 4.0, 0.2)]
    assert merge_hits([]) == []


def test_sliding_windows_hand_worked():
    assert sliding_windows(10.0, 4.0, 3.0) == [(0.0, 4.0), (3.0, 7.0), (6.0, 10.0)]
    assert sliding_windows(11.0, 4.0, 3.0) == [(0.0, 4.0), (3.0, 7.0), (6.0, 10.0), (9.0, 11.0)]
    assert sliding_windows(8.0, 4.0, 4.0) == [(0.0, 4.0), (4.0, 8.0)]
    assert sliding_windows(2.5, 4.0, 2.0) == [(0.0, 2.5)]
    assert sliding_windows(1.0, 0.3, 0.1)[-1] == (0.7, 1.0) and len(sliding_windows(1.0, 0.3, 0.1)) == 8
    assert sliding_windows(0.0, 4.0, 2.0) == []
    with pytest.raises(VideoTextError, match="gaps"):
        sliding_windows(10.0, 2.0, 3.0)
    with pytest.raises(VideoTextError, match="positive"):
        sliding_windows(10.0, 0.0, 1.0)


# ---- re-scoring parts: kept per entry through add / remove / save / load ---------------
def test_parts_follow_adds_removals_and_persistence(tmp_path):
    rng = np.random.default_rng(0)
    x = unit(rng, 5, 8)
    experts = rng.standard_normal((5, 3, 4)).astype(np.float32)
    avail = np.array([[1, 1, 0], [1, 0, 1], [1, 1, 1], [0, 1, 1], [1, 1, 1]], np.float32)
    index = Index(8, model="mmt")
    index.add(x[:3], ["a", "b", "c"], parts={"experts": experts[:3], "available": torch.from_numpy(avail[:3])})
    index.add(x[3:], ["d", "e"], parts={"experts": experts[3:], "available": avail[3:]})
    assert index.part_names == ("available", "experts")
    got = index.parts_for(["e", "a"])
    np.testing.assert_array_equal(got["experts"], experts[[4, 0]])
    np.testing.assert_array_equal(got["available"], avail[[4, 0]])
    index.remove(["b"])
    index.add(x[1:2] * -1, ["c"], parts={"experts": experts[1:2] * 2, "available": avail[1:2]})  # upsert
    loaded = Index.load(index.save(tmp_path / "idx"))
    assert loaded.part_names == ("available", "experts") and sorted(loaded.ids) == ["a", "c", "d", "e"]
    np.testing.assert_array_equal(loaded.parts_for(["c", "d"])["experts"], np.stack([experts[1] * 2, experts[3]]))
    with pytest.raises(VideoTextError, match="re-scoring parts"):
        loaded.add(x[:1], ["f"])  # an index with parts needs them for every entry
    with pytest.raises(VideoTextError, match="expected 1 rows"):
        loaded.add(x[:1], ["f"], parts={"experts": experts[:2], "available": avail[:2]})
    Index(8).save(tmp_path / "plain")
    assert Index.load(tmp_path / "plain").part_names == ()


def test_mmt_search_reranks_the_index_shortlist_by_its_own_similarity(tmp_path):
    """MMT's renormalised mixture is not the index's dot product when experts are missing:
    the index shortlists, the method's similarity orders the shortlist exactly."""
    from tests.models.test_mmt import make_mmt, tiny_bert, video_batch
    from videotext.config import RunConfig
    from videotext.inference import LoadedModel

    method = make_mmt(tiny_bert(tmp_path / "bert"))
    with torch.no_grad():  # uneven mixture weights (≈ .91/.045/.045) make renormalisation matter
        method.mixture.bias.copy_(torch.tensor([3.0, 0.0, 0.0]))
    batch = video_batch(batch_size=12, seed=3)
    for row, missing in ((0, "audio"), (1, "motion"), (2, "audio,motion"), (5, "appearance"), (7, "motion,appearance"),
                         (8, "audio,appearance"), (11, "appearance")):
        for expert in missing.split(","):
            batch["masks"][expert][row] = False  # missing experts: renormalised weights differ per video
    with torch.inference_mode():
        video = method.encode_video(batch)
    model = LoadedModel(tmp_path, method, RunConfig(method="mmt"), torch.device("cpu"), "fp32")
    assert model.rescores
    index = Index(int(method.index_vectors(video).shape[1]), model="mmt")
    model.add_to_index(index, video, [f"v{i}" for i in range(12)])
    index = Index.load(index.save(tmp_path / "idx"))
    queries = ["a red circle moves left", "blue circle then right"]
    with torch.inference_mode():
        text = encode_texts(method, queries)
        exact = method.similarity(text, video)  # [2, 12]
        normalise = torch.nn.functional.normalize  # the index stores unit vectors: cosine
        dot = normalise(method.query_vectors(text), dim=1) @ normalise(method.index_vectors(video), dim=1).T
    # with a 6-wide shortlist: the shortlist is the index's top 6, ordered by MMT's score
    for q, hits in enumerate(model.search(queries, index, k=5, shortlist=6)):
        shortlist = torch.argsort(-dot[q])[:6].tolist()
        want = sorted(shortlist, key=lambda j: -exact[q, j].item())[:5]
        assert [h.id for h in hits] == [f"v{j}" for j in want]
        assert want != shortlist[:5]  # re-scoring changed the top 5
        np.testing.assert_allclose([h.score for h in hits], exact[q, want].numpy(), atol=1e-5)
        np.testing.assert_allclose([h.meta["index_score"] for h in hits], dot[q, want].numpy(), atol=1e-5)
    # a shortlist of the whole index gives the exact full-similarity ranking
    full = model.search(queries[0], index, k=12, shortlist=12)
    assert [h.id for h in full] == [f"v{j}" for j in torch.argsort(-exact[0]).tolist()]
    assert [h.rank for h in full] == list(range(1, 13))
    # ...which the index's cosine alone does not give here (the re-scoring matters)
    assert any(torch.argsort(-dot[q]).tolist() != torch.argsort(-exact[q]).tolist() for q in range(2))



def test_build_index_update_adds_new_videos_and_drops_deleted_ones(tmp_path):
    """`build_index(update=True)`: encodes only the new videos, removes the deleted ones,
    and gives the same index (vectors, re-scoring parts) as a fresh build."""
    from tests.models.test_mmt import DIMS, make_mmt, tiny_bert
    from videotext.config import RunConfig
    from videotext.data.features import FeatureStore
    from videotext.data.schema import Video, VideoTextDataset
    from videotext.inference import LoadedModel

    rng = np.random.default_rng(0)
    store = FeatureStore(tmp_path / "features")
    names = [f"v{i}" for i in range(6)]
    for expert, dim in DIMS.items():
        with store.writer(expert, dim, dtype="float32") as writer:
            for name in names:
                writer.add(name, rng.standard_normal((4, dim)).astype(np.float32), np.arange(4.0), step=1.0)
    config = RunConfig(method="mmt")
    config.data.experts = sorted(DIMS)
    model = LoadedModel(tmp_path, make_mmt(tiny_bert(tmp_path / "bert")), config, torch.device("cpu"), "fp32")
    dataset = lambda ids: VideoTextDataset("t", [Video(id=i, path=f"{i}.mp4", captions=[f"cap {i}"]) for i in ids],  # noqa: E731
                                           splits={"test": list(ids)}, root=tmp_path)
    out = tmp_path / "idx"
    model.build_index(dataset(names[:4]), out, features_dir=store.root, progress=False)
    encoded, steps = [], []  # whole videos; one-step clips of the moment track (ids VIDEO@START-END)

    def counted(f):
        def encode_video(batch):
            encoded.append(sum("@" not in i for i in batch["video_ids"]))
            steps.extend(i.split("@")[0] for i in batch["video_ids"] if "@" in i)
            return f(batch)
        return encode_video

    model.method.encode_video = counted(model.method.encode_video)
    updated = model.build_index(dataset(["v0", "v2", "v3", "v4", "v5"]), out, features_dir=store.root,
                                progress=False, update=True)  # v1 deleted, v4 and v5 new
    assert sum(encoded) == 2 and sorted(set(steps)) == ["v4", "v5"]  # only the new videos were encoded
    fresh = model.build_index(dataset(["v0", "v2", "v3", "v4", "v5"]), features_dir=store.root, progress=False)
    loaded = Index.load(out)
    assert sorted(loaded.ids) == sorted(fresh.ids) == ["v0", "v2", "v3", "v4", "v5"]
    order = fresh.ids
    np.testing.assert_allclose(loaded.embeddings_for(order), fresh.embeddings_for(order), atol=1e-5)
    np.testing.assert_allclose(loaded.parts_for(order)["experts"], fresh.parts_for(order)["experts"], atol=1e-5)
    assert [h.id for h in model.search("cap v4", loaded, k=5)] == [h.id for h in model.search("cap v4", fresh, k=5)]
    assert updated.get("v4").path == str(tmp_path / "v4.mp4")
    again = model.build_index(dataset(["v0"]), out, features_dir=store.root, progress=False, update=True)
    assert again.ids == ["v0"] and sum(encoded) == 2 + 5  # nothing new: only removals (fresh encoded 5)


def test_toco_search_reranks_the_shortlist_with_the_cross_encoder(tmp_path):
    """ToCo through the index: the cheap dual vectors shortlist, `rerank` (f + λ f^t) orders."""
    from tests.models.test_toco import TEXTS, video_batch
    from videotext.config import RunConfig
    from videotext.inference import LoadedModel
    from videotext.models import build_method

    torch.manual_seed(0)
    method = build_method("toco", {"hidden_dim": 32, "num_heads": 4, "ff_dim": 64, "cheap_dim": 16,
                                   "num_negatives": 3, "dropout": 0.0}, expert_dims={"a": 6, "b": 4}).eval()
    method.fit_tfidf(TEXTS)
    with torch.inference_mode():
        video = method.encode_video(video_batch())
        text = encode_texts(method, TEXTS[:1])
        exact = method.rerank(text, video)[0]  # [5] the cross-encoder on every video
        cheap = method.cheap_similarity(text, video)[0]
    model = LoadedModel(tmp_path, method, RunConfig(method="toco"), torch.device("cpu"), "fp32")
    index = Index(16, model="toco")
    model.add_to_index(index, video, [f"v{i}" for i in range(5)])
    index = Index.load(index.save(tmp_path / "idx"))
    hits = model.search(TEXTS[0], index, k=3, shortlist=4)
    shortlist = torch.argsort(-cheap)[:4].tolist()
    want = sorted(shortlist, key=lambda j: -exact[j].item())[:3]
    assert [h.id for h in hits] == [f"v{j}" for j in want]
    np.testing.assert_allclose([h.score for h in hits], exact[want].numpy(), atol=1e-5)
    full = model.search(TEXTS[0], index, k=5, shortlist=5)
    assert [h.id for h in full] == [f"v{j}" for j in torch.argsort(-exact).tolist()]


# --- the index build's steps, alone -----------------------------------------------------------
def test_update_plan_of_a_folder_needs_no_extraction(tmp_path):
    """The update diff comes from the folder's file names and the index's entries alone:
    empty files (nothing could be decoded) give new / deleted / unchanged videos."""
    from videotext.search.build import features_folder, index_entries, parts_folder, plan_index, read_source

    folder = tmp_path / "videos"
    for name in ("kept.mp4", "clipped.mp4", "sub/new.mkv", "notes.txt"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"")
    dataset = read_source(folder)
    assert sorted(v.id for v in dataset) == ["clipped", "kept", "sub/new"]
    entries = [Entry("kept", video_id="kept"), Entry("gone", video_id="gone"),
               Entry("clipped@0-4", start=0.0, end=4.0, video_id="clipped"),
               Entry("clipped@2-6", start=2.0, end=6.0, video_id="clipped"),
               Entry("gone@0-4", start=0.0, end=4.0, video_id="gone")]
    plan = plan_index(dataset, entries)
    assert plan.add == ["sub/new"]
    assert plan.remove == ["gone", "gone@0-4"]
    assert plan.keep == ["kept", "clipped@0-4", "clipped@2-6"]
    fresh = plan_index(dataset)  # no index yet: every video, in the source's order
    assert fresh.add == [v.id for v in dataset] and fresh.remove == fresh.keep == []
    assert plan_index(dataset, [Entry(v.id, video_id=v.id) for v in dataset]).add == []

    made = index_entries(dataset.subset(["sub/new"]))
    assert [(e.id, e.video_id, e.start) for e in made] == [("sub/new", "sub/new", 0.0)]
    assert made[0].path == str((folder / "sub" / "new.mkv").resolve())
    assert features_folder(tmp_path / "idx", tmp_path / "run") == tmp_path / "idx.features"
    assert features_folder(None, tmp_path / "run") == tmp_path / "run" / "index.features"
    assert parts_folder(tmp_path / "idx", tmp_path / "f") == tmp_path / "idx.parts"
    assert parts_folder(None, tmp_path / "f") == tmp_path / "f" / ".index-parts"


def test_update_with_nothing_new_only_removes_and_never_extracts(tmp_path):
    """`build_index(update=True)` over a folder whose videos are all indexed drops the deleted
    ones and saves, without reading a single video (the files here are empty) or a feature."""
    from videotext.config import RunConfig
    from videotext.inference import LoadedModel

    folder = tmp_path / "videos"
    folder.mkdir()
    (folder / "kept.mp4").write_bytes(b"")
    index = Index(dim=4, model="dual")
    index.add(unit(np.random.default_rng(0), 3, 4), [Entry("kept", video_id="kept"), Entry("gone", video_id="gone"),
                                                     Entry("gone@0-2", start=0.0, end=2.0, video_id="gone")])
    index.save(tmp_path / "idx")
    model = LoadedModel(tmp_path / "run", None, RunConfig(method="dual"), torch.device("cpu"), "fp32")
    updated = model.build_index(folder, tmp_path / "idx", update=True, progress=False)
    assert updated.ids == ["kept"] and Index.load(tmp_path / "idx").ids == ["kept"]
    assert not (tmp_path / "idx.features").exists()
    with pytest.raises(VideoTextError, match="index of method 'dual'"):
        LoadedModel(tmp_path / "run", None, RunConfig(method="mmt"), torch.device("cpu"), "fp32").build_index(
            folder, tmp_path / "idx", update=True, progress=False)


def test_built_entries_carry_the_metadata_filters_use():
    from videotext.data.schema import Video, VideoTextDataset
    from videotext.search.build import index_entries
    from videotext.search.filters import entry_fields, matches, parse_filter
    from videotext.search.windows import window_clips

    videos = [Video("a", path="a.mp4", duration=30.0, captions=["x"], meta={"tags": ["keynote"]}),
              Video("b", path="b.mp4", duration=90.0, captions=["y"])]
    dataset = VideoTextDataset("talks", videos, {"train": ["a"], "test": ["b"]})
    a, b = index_entries(dataset)
    assert a.meta == {"captions": ["x"], "duration": 30.0, "dataset": "talks", "split": "train", "tags": ["keynote"]}
    assert b.meta == {"captions": ["y"], "duration": 90.0, "dataset": "talks", "split": "test"}
    assert [e.id for e in (a, b) if matches(parse_filter('split == "test" and duration > 60'), entry_fields(e))] == ["b"]

    class Reader:  # durations from the videos themselves
        store, experts, max_steps = None, [], 30

    clips, _ = window_clips(dataset, Reader(), 20.0, 20.0)
    entries = index_entries(clips)
    assert [(e.video_id, e.start, e.end, e.meta["duration"], e.meta["split"]) for e in entries] == [
        ("a", 0.0, 20.0, 30.0, "train"), ("a", 20.0, 30.0, 30.0, "train"),
        ("b", 0.0, 20.0, 90.0, "test"), ("b", 20.0, 40.0, 90.0, "test"), ("b", 40.0, 60.0, 90.0, "test"),
        ("b", 60.0, 80.0, 90.0, "test"), ("b", 80.0, 90.0, 90.0, "test")]
    assert entries[0].meta["tags"] == ["keynote"]
