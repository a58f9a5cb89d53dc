"""`serve` follows its index folder: a published version is swapped in between requests, on a
real uvicorn server, while clients search; no request fails or mixes two versions."""
from __future__ import annotations

import threading
import time

import httpx
import numpy as np
import pytest

from tests.conftest import serve_in_thread
from videotext.search import Entry, Index
from videotext.search.live import UNPUBLISHED, LiveIndex, publish, published_version
from videotext.apps.serve import create_app

pytestmark = pytest.mark.heavy  # trains, builds indexes or starts processes and servers: `make test-quick` leaves it out

IDS = [f"v{i}" for i in range(16)]  # every id any version holds
DIM = len(IDS)


class NamedSearcher:
    """Query vector = e_i of the id named in the query: the entry with that id scores 1."""

    def search(self, query: str, index: Index, k: int = 10, where: str | None = None):
        vec = np.zeros(DIM, np.float32)
        vec[IDS.index(query.split()[0])] = 1.0
        return index.search_one(vec, k, where=where)


def version_set(number: int) -> list[str]:
    """The ids of version `number`: a window that moves (adds and deletes) and grows."""
    first = number % 5
    return IDS[first : first + 6 + number % 4]


def write_version(folder, number: int) -> str:
    """Save version `number` over `folder` (the build's atomic folder swap), then publish it. Every
    entry carries its version in its caption (an id kept across versions is changed in place)."""
    ids = version_set(number)
    index = Index(DIM, model="stand-in")
    vectors = np.eye(DIM, dtype=np.float32)[[IDS.index(i) for i in ids]]
    index.add(vectors, [Entry(i, meta={"captions": [f"version {number}"]}) for i in ids])
    index.save(folder)
    return publish(folder)


def milvus_writer(location: str):
    """`write_version` into Milvus through the build's own steps: the first version a fresh build (a
    new collection behind the alias), each later one an update (a copy of the served version, rows
    added, changed in place and removed, the alias moved, the folder saved), then published."""
    from videotext.search.build import IndexPlan, finish_index
    from videotext.search.index import new_index, open_store

    def write(folder, number: int) -> str:
        ids = version_set(number)
        if (folder / "index.json").is_file():
            index = open_store(folder)
            index.begin_writing(folder)
            gone = [i for i in index.ids if i not in ids]
        else:
            index, gone = new_index(DIM, "stand-in", location, "live", staged=True), []
        vectors = np.eye(DIM, dtype=np.float32)[[IDS.index(i) for i in ids]]
        index.add(vectors, [Entry(i, meta={"captions": [f"version {number}"]}) for i in ids])
        finish_index(index, IndexPlan(add=ids, remove=gone, keep=[]), set(ids), folder)
        return publish(folder)

    return write


@pytest.fixture(params=["faiss", "milvus-lite", "milvus-server"])
def store(request, tmp_path, monkeypatch):
    """How versions are written: a FAISS folder, Milvus Lite, or a Milvus server in its own process;
    a Milvus version retired is dropped after 3 s here (RETIRE_GRACE), so drops happen while serving."""
    if request.param == "faiss":
        yield "faiss", write_version
        return
    pytest.importorskip("milvus_lite")
    from videotext.search import milvus

    monkeypatch.setattr(milvus, "RETIRE_GRACE", 3.0)
    if request.param == "milvus-lite":
        yield f"milvus:{tmp_path / 'live.db'}", milvus_writer(f"milvus:{tmp_path / 'live.db'}")
        return
    from tests.milvus_server import MilvusServer

    server = MilvusServer(tmp_path / "server")
    try:
        yield server.uri, milvus_writer(server.uri)
    finally:
        server.close()


def test_a_published_version_is_swapped_in_while_twenty_clients_search(tmp_path, store):
    location, write = store
    folder = tmp_path / "idx"
    versions = [write(folder, 0)]
    app = create_app(folder, searcher=NamedSearcher(), reload_seconds=0.02)
    url, stop = serve_in_thread(app)
    done = threading.Event()
    errors: list[str] = []
    mixed: list[list[str]] = []
    seen_versions: set[str] = set()
    collections: set[str] = set()

    def client(number: int) -> None:
        with httpx.Client(base_url=url, timeout=30) as http:
            i = 0
            while not done.is_set():
                i += 1
                try:
                    if i % 5 == 0:
                        answer = http.get("/health")
                        if answer.status_code == 200:
                            seen_versions.add(answer.json()["version"])
                            collections.add(answer.json()["store"].get("collection"))
                    else:
                        answer = http.get("/search", params={"q": f"{IDS[(number + i) % DIM]} please", "k": 6})
                        tags = {r["caption"] for r in answer.json().get("results", [])} if answer.status_code == 200 else set()
                        if len(tags) > 1:
                            mixed.append(sorted(tags))
                    if answer.status_code != 200:
                        errors.append(f"{answer.status_code} {answer.text[:200]}")
                except httpx.HTTPError as exc:
                    errors.append(repr(exc))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    try:
        for number in range(1, 11):  # ten updates: adds, deletes, entries changed in place
            time.sleep(0.15)
            versions.append(write(folder, number))
        deadline = time.time() + 10
        while time.time() < deadline and app.state.live.snapshot.version != versions[-1]:
            time.sleep(0.02)
        time.sleep(0.1)
        done.set()
        for thread in threads:
            thread.join(timeout=30)
        final = set(version_set(10))
        with httpx.Client(base_url=url, timeout=30) as http:
            health = http.get("/health").json()
            answers = [http.get("/search", params={"q": f"{i} please", "k": DIM}).json()["results"]
                       for i in IDS[:4]]
    finally:
        done.set()
        stop()
    assert not errors, errors[:3]
    assert not mixed, mixed[:3]
    assert health["version"] == versions[-1] and health["entries"] == len(final)
    for results in answers:  # every client now reads the final set, all of it and nothing else
        assert {r["id"] for r in results} == final
        assert {r["caption"] for r in results} == {"version 10"}
    assert len(seen_versions) >= 3  # the clients saw versions change under them
    assert app.state.live.swaps >= 3
    if location != "faiss":  # /health names the collection behind the alias: the last one published
        from videotext.search.index import open_store

        served = open_store(folder)
        assert health["store"] == {"store": "milvus", "alias": "live", "collection": served.target()}
        assert served.target() == "live__v11" and len(collections) >= 3


def test_an_unpublished_or_unreadable_folder_keeps_the_served_version(tmp_path):
    folder = tmp_path / "idx"
    first = write_version(folder, 0)
    loads = []

    def load(path, previous, version):
        loads.append(version)
        return type("Snap", (), {"version": version, "index": Index.load(path)})()

    live = LiveIndex(folder, load, interval=0)
    assert live.snapshot.version == first and published_version(folder) == first
    (folder / "published.json").unlink()  # a build writing: nothing to swap to
    assert not live.refresh()
    (folder / "index.json").write_text("{ not json")  # a folder mid-write whose marker already moved
    publish(folder)
    assert not live.refresh() and live.snapshot.version == first  # the load failed: still the first version
    second = write_version(folder, 1)
    assert live.refresh() and live.snapshot.version == second
    assert len(live.snapshot.index) == len(version_set(1))


def test_a_folder_built_before_the_marker_is_served_as_unpublished(tmp_path):
    index = Index(DIM, model="stand-in")
    index.add(np.eye(DIM, dtype=np.float32)[:2], [Entry("v0"), Entry("v1")])
    folder = index.save(tmp_path / "old")
    from fastapi.testclient import TestClient

    client = TestClient(create_app(folder, searcher=NamedSearcher(), reload_seconds=0))
    assert client.get("/health").json()["version"] == UNPUBLISHED


@pytest.mark.parametrize("update", [False, True])
def test_model_build_index_publishes_last(conse_run, tmp_path, update):
    """`LoadedModel.build_index` marks the folder complete after the query encoder is exported."""
    from videotext.data.synthetic import synthesize
    from videotext.inference import load_model

    videos = tmp_path / "videos"
    synthesize(videos, num_videos=3, seed=4, progress=False)
    model = load_model(conse_run)
    out = tmp_path / "idx"
    model.build_index(videos / "manifest.json", out, progress=False)
    first = published_version(out)
    assert first is not None and (out / "query_encoder").is_dir()
    if update:
        model.build_index(videos / "manifest.json", out, progress=False, update=True)
        assert published_version(out) not in (None, first)
