"""The search page in a real browser: Debian's chromium driven by Playwright.

A tiny dual model is trained on the 32-video fixture, the videos are indexed, uvicorn
serves the app on a free loopback port, and the test types a caption into the page,
checks the expected video is among the shown results, clicks it and checks the player
starts at the clip's start time. A screenshot goes to tests/artifacts/.
Never `playwright install`: the browser is /usr/bin/chromium (`make install` adds it).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CONFIG = "dual/synthetic"  # a packaged config, by name
K = 8

needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                    "(`make install` runs `apt-get install -y chromium` as root)")


@pytest.fixture(scope="module")
def search_case(tiny_synth, tmp_path_factory):
    """(index folder, query, expected id, clip start): a trained run's index in which the
    expected video is a clip hit (one of its timed segments) among the top K for its caption."""
    from tests.conftest import tiny_config_overrides
    from videotext.config import load_config
    from videotext.data.schema import VideoTextDataset
    from videotext.inference import load_model
    from videotext.search import Index
    from videotext.train.trainer import Trainer

    run = tmp_path_factory.mktemp("browser") / "run"
    Trainer(load_config(CONFIG, tiny_config_overrides(tiny_synth)), run, progress=False).fit()
    model = load_model(run)
    index = model.build_index(tiny_synth / "manifest.json", features_dir=tiny_synth / "features", progress=False)
    dataset = VideoTextDataset.load(tiny_synth / "manifest.json")
    for video in dataset:  # the first video found among the top K by its own caption (a tiny model)
        query = video.captions[0]
        if video.id in [h.id for h in model.search(query, index, k=K)] and video.segments:
            break
    else:
        pytest.fail("the tiny model ranks no video in the top K by its caption")
    segment = video.segments[-1]  # make the hit point to a later time range of the video
    entry = dataclasses.replace(index.get(video.id), start=float(segment.start), end=float(segment.end))
    index.add(index.embeddings_for([video.id]), [entry])
    folder = index.save(tmp_path_factory.mktemp("browser") / "idx")
    assert Index.load(folder).meta["run_dir"] == str(run.resolve())
    return folder, query, video.id, float(segment.start)


def launch(playwright):
    """Debian's chromium, headless, allowed to autoplay."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                      args=["--no-sandbox", "--disable-background-networking",
                                            "--autoplay-policy=no-user-gesture-required"])


def line_and_playback(index_folder, page_query: str, card: str, line_class: str, screenshot: str) -> tuple[str, float]:
    """The search page over `index_folder` (a real uvicorn server and Chromium) at `/?PAGE_QUERY`:
    the text of result `card`'s matched line (`.LINE_CLASS`), and where the player stands once a
    click on the card has started it; a full-page screenshot is saved to ARTIFACTS/SCREENSHOT."""
    from playwright.sync_api import sync_playwright

    base, stop = run_server(index_folder)
    try:
        with sync_playwright() as p:
            browser = launch(p)
            try:
                page = browser.new_page(viewport={"width": 1100, "height": 900})
                page.goto(f"{base}/?{page_query}")
                selector = f'.card[data-id="{card}"]'
                page.wait_for_selector(f"{selector} .{line_class}")
                line = page.inner_text(f"{selector} .{line_class}")
                page.click(selector)
                page.wait_for_function("() => { const v = document.getElementById('player');"
                                       " return v.readyState >= 2 && v.currentTime > 0; }", timeout=20_000)
                current = float(page.evaluate("document.getElementById('player').currentTime"))
                ARTIFACTS.mkdir(exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / screenshot), full_page=True)
                return line, current
            finally:
                browser.close()
    finally:
        stop()


def run_server(index_folder, token=None):
    """The app over `index_folder` served by uvicorn on a free loopback port: (base URL, stop)."""
    from tests.conftest import serve_in_thread
    from videotext.apps.serve import create_app

    return serve_in_thread(create_app(index_folder, token=token))


@pytest.fixture(scope="module")
def server(search_case):
    base, stop = run_server(search_case[0])
    yield base
    stop()


def test_real_model_api_never_500s(search_case):
    """schemathesis over the app with the trained model behind it (the stand-in searcher
    of test_service.py cannot show the text encoder coping with any query)."""
    import schemathesis
    from fastapi.testclient import TestClient
    from hypothesis import HealthCheck, given, settings

    from videotext.apps.serve import create_app

    app = create_app(search_case[0])
    client = TestClient(app)
    for q in ["\x00", "🎬" * 200, "a" * 500, " \t\n x", "%", "<script>alert(1)</script>"]:
        assert client.get("/search", params={"q": q, "k": 100}).status_code in (200, 422)
    operation = schemathesis.openapi.from_asgi("/openapi.json", app).get_all_operations()
    failures = []
    for op in (o.ok() for o in operation):

        @given(case=op.as_strategy())
        @settings(max_examples=15, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        def run(case):
            response = case.call()
            if response.status_code >= 500:
                failures.append((op.path, case.query, response.status_code, response.text))

        run()
    assert not failures, failures[:3]


@needs_chromium
def test_search_page_finds_and_plays_the_clip(server, search_case):
    playwright_api = pytest.importorskip("playwright.sync_api", reason="needs the PyPI package playwright (dev extra)")
    _, query, expected, start = search_case
    ARTIFACTS.mkdir(exist_ok=True)
    with playwright_api.sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            external = []
            page.on("request", lambda r: external.append(r.url) if not r.url.startswith(server) else None)
            page.goto(server + "/")
            page.fill("#query", query)
            page.fill("#k", str(K))
            page.click("button[type=submit]")
            page.wait_for_selector(".card")
            shown = page.eval_on_selector_all(".card", "cards => cards.map(c => c.dataset.id)")
            assert expected in shown and len(shown) == K
            page.wait_for_function("() => [...document.images].every(i => i.complete && i.naturalWidth > 0)")
            page.click(f'.card[data-id="{expected}"]')
            page.wait_for_function("() => { const v = document.getElementById('player');"
                                   " return v.readyState >= 2 && v.currentTime > 0; }", timeout=20_000)
            current = page.evaluate("document.getElementById('player').currentTime")
            assert start <= current < start + 1.5, (current, start)  # started at the clip (it may have played on a bit)
            assert page.evaluate("document.getElementById('player').error") is None
            page.screenshot(path=str(ARTIFACTS / "browser_search.png"), full_page=True)
            others = [i for i in shown if i != expected][:2]  # the filter box narrows the same query
            page.fill("#where", f"video_id in {json.dumps(others)}")
            page.click("button[type=submit]")
            page.wait_for_function(f"() => document.querySelectorAll('.card').length == {len(others)}")
            assert sorted(page.eval_on_selector_all(".card", "cards => cards.map(c => c.dataset.id)")) == sorted(others)
            assert "where=video_id" in page.url
            page.fill("#where", "duration <")
            page.click("button[type=submit]")
            page.wait_for_function("() => document.getElementById('status').classList.contains('error')")
            assert "error 400" in page.inner_text("#status") and "duration <" in page.inner_text("#status")
            assert not external, external  # no CDN or other host
        finally:
            browser.close()
    assert (ARTIFACTS / "browser_search.png").stat().st_size > 10_000


@needs_chromium
def test_the_page_asks_once_for_the_token_of_a_guarded_server(search_case):
    """With a token, the page asks for it at the first 401, keeps it for the tab, and shows
    thumbnails and plays videos fetched with it."""
    playwright_api = pytest.importorskip("playwright.sync_api", reason="needs the PyPI package playwright (dev extra)")
    folder, query, expected, start = search_case
    token = "page-token-42"
    base, stop = run_server(folder, token=token)
    asked = []
    try:
        with playwright_api.sync_playwright() as p:
            browser = launch(p)
            try:
                page = browser.new_page(viewport={"width": 1100, "height": 900})
                page.on("dialog", lambda d: (asked.append(d.message), d.accept(token)))
                page.goto(base + "/")
                for attempt in range(2):  # a second search in the same tab does not ask again
                    # the first search's cards go first: else the wait below could match them while the
                    # second search's cards, their thumbnails not yet fetched, are still to come
                    page.evaluate("document.querySelectorAll('.card').forEach(c => c.remove())")
                    page.fill("#query", query)
                    page.fill("#k", str(K))
                    page.click("button[type=submit]")
                    page.wait_for_selector(f'.card[data-id="{expected}"]')
                assert asked == ["This videotext server needs its access token:"]
                assert page.evaluate("sessionStorage.getItem('videotext-token')") == token
                page.wait_for_function("() => [...document.images].every(i => i.complete && i.naturalWidth > 0)")
                assert page.evaluate("[...document.images].every(i => i.src.startsWith('blob:'))")
                page.click(f'.card[data-id="{expected}"]')
                page.wait_for_function("() => { const v = document.getElementById('player');"
                                       " return v.readyState >= 2 && v.currentTime > 0; }", timeout=20_000)
                current = page.evaluate("document.getElementById('player').currentTime")
                assert start <= current < start + 1.5, (current, start)
            finally:
                browser.close()
    finally:
        stop()



@needs_chromium
def test_more_like_this_shows_the_entries_nearest_to_a_result(server, search_case):
    """Each result has a "more like this" button: it lists the index's nearest entries to that
    result (the order of the index's own vectors, itself left out) and keeps them in the URL."""
    playwright_api = pytest.importorskip("playwright.sync_api", reason="needs the PyPI package playwright (dev extra)")
    from videotext.search import Index

    folder, query, expected, _ = search_case
    index = Index.load(folder)
    nearest = [h.id for h in index.search(index.embeddings_for([expected]), K + 1)[0] if h.id != expected][:K]
    with playwright_api.sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.goto(server + "/")
            page.fill("#query", query)
            page.fill("#k", str(K))
            page.click("button[type=submit]")
            page.wait_for_selector(f'.more-like[data-id="{expected}"]')
            page.click(f'.more-like[data-id="{expected}"]')
            page.wait_for_function(f"() => document.getElementById('status').textContent.includes('like:{expected}')")
            assert page.eval_on_selector_all(".card", "cards => cards.map(c => c.dataset.id)") == nearest
            assert f"like={expected}" in page.url
        finally:
            browser.close()



@pytest.fixture(scope="module")
def moments_case(search_case, tiny_synth, tmp_path_factory):
    """(a --window 3 index of the fixture with its moment track, the query, its top moment by the Python API)."""
    import videotext
    from videotext.search import Index

    run = Index.load(search_case[0]).meta["run_dir"]
    folder = tmp_path_factory.mktemp("browser_moments") / "idx"
    videotext.build_index(run, tiny_synth / "manifest.json", folder, features=tiny_synth / "features", window=3.0,
                          progress=False)
    query = search_case[1]
    return folder, query, videotext.open_index(folder).search(query, k=K, moments=True)[0]


def clock(t: float) -> str:
    """A time as the page writes it (m:ss.s)."""
    minutes = int(t // 60)
    return f"{minutes}:{t - 60 * minutes:04.1f}"


@needs_chromium
def test_the_page_shows_moments_and_plays_one_from_its_start(moments_case):
    """With "moments" ticked the cards are spans: their times, a bar marking the span in the video,
    and a click plays the video from the span's start."""
    playwright_api = pytest.importorskip("playwright.sync_api", reason="needs the PyPI package playwright (dev extra)")
    folder, query, top = moments_case
    base, stop = run_server(folder)
    try:
        with playwright_api.sync_playwright() as p:
            browser = launch(p)
            try:
                page = browser.new_page(viewport={"width": 1100, "height": 900})
                page.goto(base + "/")
                page.fill("#query", query)
                page.fill("#k", str(K))
                page.check("#moments")
                page.click("button[type=submit]")
                card = f'.card[data-id="{top.id}"]'
                page.wait_for_selector(f"{card} .span-bar .span")
                assert "moments=true" in page.url
                shown = page.eval_on_selector_all(".card", "cards => cards.map(c => c.dataset.id)")
                assert shown[0] == top.id and len(shown) == K and all("@" in i for i in shown)
                assert page.inner_text(f"{card} .time") == f"{clock(top.start)} – {clock(top.end)}"
                left, width = page.eval_on_selector(f"{card} .span-bar .span",
                                                    "s => [parseFloat(s.style.left), parseFloat(s.style.width)]")
                duration = top.meta["duration"]
                assert left == pytest.approx(100 * top.start / duration, abs=0.01)
                assert width == pytest.approx(max(1.0, 100 * (top.end - top.start) / duration), abs=0.01)
                page.wait_for_function("() => [...document.images].every(i => i.complete && i.naturalWidth > 0)")
                page.click(card)
                page.wait_for_function("() => { const v = document.getElementById('player');"
                                       " return v.readyState >= 2 && v.currentTime > 0; }", timeout=20_000)
                current = page.evaluate("document.getElementById('player').currentTime")
                assert top.start <= current < top.start + 1.5, (current, top.start)
                assert page.evaluate("document.getElementById('player').src").endswith(f"#t={top.start:g},{top.end:g}")
                ARTIFACTS.mkdir(exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / "browser_moments.png"), full_page=True)
            finally:
                browser.close()
    finally:
        stop()
