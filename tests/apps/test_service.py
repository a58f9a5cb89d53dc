"""The HTTP search service: results, range requests, thumbnails, validation, traversal,
and schemathesis fuzzing of the OpenAPI schema (no 500 on any input).

The searcher is a stand-in with hand-set vectors (video i ↔ unit vector e_i; a query
names the videos it wants), so every score here is known exactly; the real model path
is covered by tests/integration/test_browser.py.
"""
from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from videotext.search import Entry, Index
from videotext.apps.serve import STATIC, create_app

DIM = 8


class NamedSearcher:
    """Query vector = sum of e_i over the entry ids named in the query (uniform if none)."""

    def __init__(self, ids: list[str]):
        self.ids = ids
        self.calls = 0

    def search(self, query: str, index: Index, k: int = 10, where: str | None = None):
        self.calls += 1
        words = set(re.findall(r"[\w#]+", query))
        vec = np.array([1.0 if i in words else 0.0 for i in self.ids] + [0.0] * (DIM - len(self.ids)), np.float32)
        if not vec.any():
            vec[:] = 1.0
        return index.search_one(vec, k, where=where)


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> list[Path]:
    from videotext.data.synthetic import synthesize

    root = tmp_path_factory.mktemp("service_videos")
    dataset = synthesize(root, num_videos=3, seed=1, progress=False)
    return [dataset.media_path(v) for v in dataset]


@pytest.fixture(scope="module")
def served(videos, tmp_path_factory):
    """An index of 3 whole videos, one 2–4 s clip of the first, and one entry whose file is gone."""
    entries = [Entry(f"v{i}", path=str(p), start=0.0, end=6.0, meta={"captions": [f"caption {i}"]})
               for i, p in enumerate(videos)]
    entries.append(Entry("v0#2", path=str(videos[0]), start=2.0, end=4.0, video_id="v0"))
    entries.append(Entry("gone", path=str(tmp_path_factory.mktemp("x") / "deleted.mp4")))
    index = Index(DIM, model="stand-in")
    index.meta["root"] = str(videos[0].parents[1])  # the indexed folder: <root>/videos/*.mp4
    index.add(np.eye(DIM, dtype=np.float32)[: len(entries)], entries)
    folder = index.save(tmp_path_factory.mktemp("service") / "idx")
    searcher = NamedSearcher([e.id for e in entries])
    app = create_app(folder, searcher=searcher)
    return app, TestClient(app), searcher


def test_health_and_search_results(served, videos):
    _, client, _ = served
    assert client.get("/health").json() == {"status": "ok", "entries": 5, "model": "stand-in", "dim": 8, "kind": "flat",
                                          "version": "unpublished", "store": {"store": "faiss", "kind": "flat"}}
    body = client.get("/search", params={"q": "the clip v0#2 please", "k": 2}).json()
    assert body["query"] == "the clip v0#2 please" and body["k"] == 2
    top, second = body["results"]
    assert (top["id"], top["video_id"], top["rank"], top["start"], top["end"]) == ("v0#2", "v0", 1, 2.0, 4.0)
    assert top["score"] == pytest.approx(1.0) and second["score"] == pytest.approx(0.0)
    assert top["thumbnail"] == "/thumbnail/v0%232" and top["video"] == "/video/v0%232"
    assert top["path"] == "videos/" + videos[0].name  # relative to the indexed folder
    both = client.get("/search", params={"q": "v1 and v2", "k": 3}).json()["results"]
    assert sorted(r["id"] for r in both[:2]) == ["v1", "v2"]
    assert [r["score"] for r in both[:2]] == pytest.approx([2 ** -0.5] * 2)  # cosine of e1+e2 with e1
    assert both[0]["caption"] in ("caption 1", "caption 2")


def test_results_never_show_the_servers_paths(served, videos, tmp_path):
    _, client, _ = served
    response = client.get("/search", params={"q": "v0 v1 v2 gone", "k": 5})
    paths = {r["id"]: r["path"] for r in response.json()["results"]}
    assert paths == {"v0": f"videos/{videos[0].name}", "v1": f"videos/{videos[1].name}",
                     "v2": f"videos/{videos[2].name}", "v0#2": f"videos/{videos[0].name}",
                     "gone": "deleted.mp4"}  # outside the indexed folder: its name only
    assert str(videos[0].parents[1]) not in response.text
    # an index without a recorded folder (built before it was recorded): file names; a file
    # that cannot be decoded: the 404 names the entry, not the file
    (tmp_path / "media").mkdir()
    (tmp_path / "media" / "junk.mp4").write_bytes(b"not a video")
    index = Index(DIM, model="stand-in")
    index.add(np.eye(DIM, dtype=np.float32)[:1], [Entry("junk", path=str(tmp_path / "media" / "junk.mp4"))])
    client = TestClient(create_app(index.save(tmp_path / "idx"), searcher=NamedSearcher(["junk"])))
    response = client.get("/search", params={"q": "junk"})
    assert response.json()["results"][0]["path"] == "junk.mp4" and str(tmp_path) not in response.text
    thumbnail = client.get("/thumbnail/junk")
    assert thumbnail.status_code == 404 and thumbnail.json() == {"detail": "no frame could be read from 'junk'"}


def test_video_range_requests_return_the_right_bytes(served, videos):
    _, client, _ = served
    data = videos[1].read_bytes()
    size = len(data)
    full = client.get("/video/v1")
    assert full.status_code == 200 and full.content == data
    assert full.headers["accept-ranges"] == "bytes" and full.headers["content-type"] == "video/mp4"
    part = client.get("/video/v1", headers={"Range": "bytes=100-199"})
    assert part.status_code == 206 and part.content == data[100:200]
    assert part.headers["content-range"] == f"bytes 100-199/{size}"
    tail = client.get("/video/v1", headers={"Range": "bytes=-50"})
    assert tail.status_code == 206 and tail.content == data[-50:]
    rest = client.get("/video/v1", headers={"Range": f"bytes={size - 10}-"})
    assert rest.status_code == 206 and rest.content == data[-10:]
    clip = client.get("/video/v0%232", headers={"Range": "bytes=0-3"})  # a clip serves its video's file
    assert clip.status_code == 206 and clip.content == videos[0].read_bytes()[:4]


@pytest.mark.parametrize("header, status", [
    ("bytes=999999999-", 416), ("bytes=20-10", 400), ("items=0-5", 400), ("bytes=abc", 400),
    ("bytes=", 400), ("bytes=-0", 416), ("bytes=1-2," * 20, 400), ("bytes=" + "9" * 5000 + "-", 400),
    (b"bytes=\xb2-5", 400), ("bytes=1-2-3", 400),
])
def test_bad_ranges_are_json_4xx(served, header, status):
    _, client, _ = served
    response = client.get("/video/v1", headers={"Range": header})
    assert response.status_code == status and "detail" in response.json()


def test_thumbnail_is_a_cached_jpeg_of_the_clip_start(served, videos):
    from PIL import Image

    from videotext.data.video import read_frames

    app, client, _ = served
    first = client.get("/thumbnail/v0%232")
    assert first.status_code == 200 and first.headers["content-type"] == "image/jpeg"
    img = np.asarray(Image.open(io.BytesIO(first.content)).convert("RGB")).astype(float)
    frames = read_frames(videos[0], [2.1, 0.1])  # the clip starts at 2 s; frame 0.1 s is the whole video's
    small = [np.asarray(Image.fromarray(f).resize(img.shape[1::-1])).astype(float) for f in frames]
    assert np.abs(img - small[0]).mean() < np.abs(img - small[1]).mean()  # the frame at the clip's start
    assert np.abs(img - small[0]).mean() < 12  # JPEG noise only
    again = client.get("/thumbnail/v0%232")
    assert again.content == first.content


@pytest.mark.parametrize("url", [
    "/video/..%2F..%2F..%2Fetc%2Fpasswd", "/video/%2Fetc%2Fpasswd", "/thumbnail/..%2Fpyproject.toml",
    "/video/v1%2F..%2F..%2Fpasswd", "/video/nope", "/thumbnail/nope", "/video/gone", "/thumbnail/gone",
    "/static/..%2F..%2F..%2Fpyproject.toml", "/static/%2E%2E/service.py",
])
def test_traversal_and_unknown_ids_are_404(served, url):
    _, client, _ = served
    response = client.get(url)
    assert response.status_code == 404, (url, response.status_code)
    assert response.headers["content-type"].startswith("application/json") and "detail" in response.json()


@pytest.mark.parametrize("params", [
    {}, {"q": ""}, {"q": "   "}, {"q": "x" * 501}, {"q": "v1", "k": 0}, {"q": "v1", "k": 101},
    {"q": "v1", "k": "ten"}, {"q": "v1", "k": "1.5"}, {"q": "v1", "k": ""},
])
def test_bad_search_parameters_are_422_json(served, params):
    _, client, searcher = served
    before = searcher.calls
    response = client.get("/search", params=params)
    assert response.status_code == 422 and "detail" in response.json()
    assert searcher.calls == before  # rejected before the model runs


def test_page_and_schema(served):
    _, client, _ = served
    page = client.get("/")
    assert page.status_code == 200 and 'id="query"' in page.text and "/static/app.js" in page.text
    for name in ("index.html", "app.js", "style.css"):  # no CDN: nothing loaded from another host
        assert not re.search(r"(src|href)=[\"']?(https?:)?//|@import|https?://", (STATIC / name).read_text()), name
    assert client.get("/static/app.js").status_code == 200
    schema = client.get("/openapi.json").json()
    assert {"/search", "/health", "/thumbnail/{entry_id}", "/video/{entry_id}"} <= set(schema["paths"])
    assert client.get("/docs").status_code == 404  # swagger UI would load from a CDN


def test_schemathesis_finds_no_server_error(served):
    """Property-based fuzzing of every operation in the OpenAPI schema, bounded."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings

    schema = schemathesis.openapi.from_asgi("/openapi.json", served[0])
    failures, calls = [], 0
    for operation in schema.get_all_operations():
        op = operation.ok()

        @given(case=op.as_strategy())
        @settings(max_examples=25, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        def run(case):
            nonlocal calls
            calls += 1
            response = case.call()
            if response.status_code >= 500:
                failures.append((op.path, case.path_parameters, case.query, response.status_code, response.text))

        run()
    assert calls >= 40 and not failures, failures[:3]


def test_bounded_load_has_no_errors(served):
    """bench/load.py's load loop, small: 10 concurrent clients, 120 requests, in process."""
    import asyncio
    import importlib.util

    import httpx

    spec = importlib.util.spec_from_file_location("bench_load", Path(__file__).resolve().parents[2] / "bench" / "load.py")
    load = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(load)
    app, _, searcher = served
    paths = [f"/search?q=v{i % 3}&k=3" for i in range(100)] + ["/thumbnail/v1"] * 10 + ["/health"] * 10
    before = searcher.calls

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            return await load.run_load(client, paths, clients=10)

    result = asyncio.run(go())
    assert (result["requests"], result["errors"]) == (120, 0), result["error_samples"]
    assert searcher.calls - before == 100
    assert 0 < result["p50_ms"] <= result["p95_ms"] <= result["p99_ms"] and result["throughput_rps"] > 0


def test_search_takes_a_metadata_filter(served):
    _, client, _ = served
    everything = [h["id"] for h in client.get("/search", params={"q": "v0 v1 v2", "k": 5}).json()["results"]]
    clips = client.get("/search", params={"q": "v0 v1 v2", "k": 5, "where": "start >= 1"}).json()["results"]
    assert len(everything) == 5 and [h["id"] for h in clips] == ["v0#2"]
    bad = client.get("/search", params={"q": "v0", "where": "start >>= 1"})
    assert bad.status_code == 400 and bad.json()["detail"].startswith("filter 'start >>= 1', character 8:")
