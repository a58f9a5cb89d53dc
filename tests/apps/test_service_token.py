"""`videotext serve` beyond loopback: a token or no start; with a token every endpoint but the
page answers 401 without `Authorization: Bearer TOKEN`. Checked on a real uvicorn server with real
HTTP requests (the page itself in a browser: tests/integration/test_browser.py)."""
from __future__ import annotations

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from videotext.cli import app as cli
from videotext.errors import VideoTextError
from videotext.search import Entry, Index
from videotext.apps.serve import create_app, is_loopback, require_token_for, token_matches
from tests.apps.test_service import DIM, NamedSearcher

TOKEN = "s3cret-Token_1"


@pytest.fixture(scope="module")
def index_folder(tmp_path_factory):
    from videotext.data.synthetic import synthesize

    root = tmp_path_factory.mktemp("token_videos")
    dataset = synthesize(root, num_videos=2, seed=3, progress=False)
    entries = [Entry(v.id, path=str(dataset.media_path(v)), start=0.0, end=4.0) for v in dataset]
    index = Index(DIM, model="stand-in")
    index.add(np.eye(DIM, dtype=np.float32)[: len(entries)], entries)
    return index.save(tmp_path_factory.mktemp("token") / "idx"), [e.id for e in entries]


@pytest.fixture(scope="module")
def server(index_folder):
    from tests.conftest import serve_in_thread

    folder, ids = index_folder
    base, stop = serve_in_thread(create_app(folder, searcher=NamedSearcher(ids), token=TOKEN))
    yield base, ids
    stop()


def test_every_endpoint_needs_the_token_but_the_page(server):
    base, ids = server
    data_urls = [f"/search?q={ids[0]}&k=2", f"/thumbnail/{ids[0]}", f"/video/{ids[0]}", "/health", "/openapi.json",
                 "/video/nope"]
    with httpx.Client(base_url=base, timeout=30) as client:
        for url in data_urls:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN},
                            {"Authorization": f"Basic {TOKEN}"}, {"Authorization": f"Bearer {TOKEN}x"}):
                response = client.get(url, headers=headers)
                assert response.status_code == 401, (url, headers)
                assert response.headers["www-authenticate"] == "Bearer"
                assert "Bearer TOKEN" in response.json()["detail"]
        good = {"Authorization": f"Bearer {TOKEN}"}
        hits = client.get(f"/search?q={ids[1]}&k=2", headers=good).json()["results"]
        assert [h["id"] for h in hits][:1] == [ids[1]] and hits[0]["score"] == pytest.approx(1.0)
        assert client.get(f"/thumbnail/{ids[0]}", headers=good).headers["content-type"] == "image/jpeg"
        ranged = client.get(f"/video/{ids[0]}", headers={**good, "Range": "bytes=0-99"})
        assert ranged.status_code == 206 and len(ranged.content) == 100
        assert client.get("/video/nope", headers=good).status_code == 404  # the token first, then the usual answers
        assert client.get("/health", headers=good).json()["entries"] == 2
        page = client.get("/")  # the page and its files hold no data; the page asks for the token
        assert page.status_code == 200 and "videotext search" in page.text
        assert "Authorization" in client.get("/static/app.js").text
        for method in ("post", "put", "delete"):  # no endpoint writes
            assert getattr(client, method)(f"/search?q={ids[0]}", headers=good).status_code == 405


def test_token_comparison_and_loopback():
    assert token_matches(f"Bearer {TOKEN}", TOKEN) and token_matches(f"bearer  {TOKEN} ", TOKEN)
    assert not any(token_matches(h, TOKEN) for h in (None, "", TOKEN, f"Bearer {TOKEN[:-1]}", f"Token {TOKEN}"))
    assert [is_loopback(h) for h in ("127.0.0.1", "127.9.9.9", "::1", "[::1]", "localhost", "0.0.0.0",
                                      "192.168.1.5", "::", "myhost")] == [True] * 5 + [False] * 4
    require_token_for("127.0.0.1", None)
    require_token_for("0.0.0.0", TOKEN)
    with pytest.raises(VideoTextError, match=r"--host 0\.0\.0\.0 serves every indexed video.*pass --token TOKEN "
                                             r"\(or set VIDEOTEXT_TOKEN\)"):
        require_token_for("0.0.0.0", None)


def test_serve_refuses_a_public_address_without_a_token_before_loading_anything(index_folder, monkeypatch):
    import videotext.apps.serve as service

    started = []
    monkeypatch.setattr(service, "create_app", lambda *a, **k: started.append(k) or pytest.fail("must not load"))
    runner = CliRunner()
    result = runner.invoke(cli, ["serve", str(index_folder[0]), "--host", "0.0.0.0"], env={"VIDEOTEXT_TOKEN": ""})
    assert result.exit_code == 2 and not started
    assert "pass --token TOKEN (or set VIDEOTEXT_TOKEN)" in result.output
    assert "Traceback" not in result.output

    class Stop(Exception):
        pass

    monkeypatch.setattr(service, "create_app", lambda *a, **k: started.append(k["token"]) or (_ for _ in ()).throw(Stop()))
    result = runner.invoke(cli, ["serve", str(index_folder[0]), "--host", "0.0.0.0"], env={"VIDEOTEXT_TOKEN": TOKEN})
    assert started == [TOKEN] and isinstance(result.exception, Stop)  # the environment's token reached the app


def test_an_empty_token_is_refused(index_folder):
    with pytest.raises(VideoTextError, match="the access token is empty"):
        create_app(index_folder[0], searcher=NamedSearcher([]), token="  ")
