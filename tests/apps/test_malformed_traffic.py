"""Malformed traffic mixed into real searches, on a real uvicorn server: schemathesis requests for
every operation of the OpenAPI schema (with and without the token), random-byte and truncated
uploads and oversized bodies, sent by 20 concurrent clients between valid searches. No answer is
a 5xx, none shows a server path, and the valid searches' latency is printed (p50 / p99)."""
from __future__ import annotations

import queue
import random
import statistics
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.conftest import serve_in_thread
from tests.apps.test_service import NamedSearcher
from videotext.search import Entry, Index
from videotext.apps.serve import create_app

pytestmark = pytest.mark.heavy  # trains, builds indexes or starts processes and servers: `make test-quick` leaves it out

DIM = 8
TOKEN = "a-long-random-test-token-0123456789"
UPLOAD_LIMIT = 256 * 1024


@pytest.fixture(scope="module")
def served_folder(tmp_path_factory) -> tuple[Path, Path, list[str]]:
    """An index of 3 real videos (and their folder, whose path must never be shown)."""
    from videotext.data.synthetic import synthesize

    root = tmp_path_factory.mktemp("traffic_videos")
    dataset = synthesize(root, num_videos=3, seed=3, progress=False)
    entries = [Entry(f"v{i}", path=str(dataset.media_path(v)), start=0.0, end=6.0, meta={"captions": [v.captions[0]]})
               for i, v in enumerate(dataset)]
    index = Index(DIM, model="stand-in")
    index.meta["root"] = str(root)
    index.add(np.eye(DIM, dtype=np.float32)[: len(entries)], entries)
    return index.save(tmp_path_factory.mktemp("traffic") / "idx"), root, [e.id for e in entries]


def generated(app, per_operation: int) -> list:
    """schemathesis cases for every operation of the app's schema (generated once, seeded)."""
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings

    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    cases = []
    for operation in schema.get_all_operations():
        op = operation.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):  # valid by the schema, and not

            @given(case=op.as_strategy(mode))
            @settings(max_examples=per_operation, deadline=None, database=None, derandomize=True,
                      phases=[Phase.generate], suppress_health_check=list(HealthCheck))
            def collect(case):
                cases.append(case.as_transport_kwargs(base_url=""))

            try:
                collect()
            except Unsatisfiable:  # an operation whose every input is valid (/health) has no negative case
                pass
    return cases


def uploads(video: Path) -> list[tuple[str, bytes]]:
    """Bodies for POST /search/like: random bytes, a truncated video, an oversized body."""
    rng = random.Random(0)
    data = video.read_bytes()
    return ([("noise.mp4", bytes(rng.getrandbits(8) for _ in range(2048)))] * 3
            + [("cut.mp4", data[: len(data) // 3]), ("cut.png", data[:100]), ("empty.jpg", b"")]
            + [("big.mp4", b"\0" * (UPLOAD_LIMIT + 1))])


def traffic(served_folder, per_operation: int, rounds: int) -> dict:
    folder, root, ids = served_folder
    searcher = NamedSearcher(ids)
    searcher.encode_example = lambda path: np.eye(1, DIM, 0, np.float32)  # noqa: E731 - every upload is like v0
    apps = {"open": create_app(folder, searcher=searcher, max_upload_bytes=UPLOAD_LIMIT, reload_seconds=0),
            "token": create_app(folder, searcher=searcher, token=TOKEN, max_upload_bytes=UPLOAD_LIMIT, reload_seconds=0)}
    servers = {name: serve_in_thread(app) for name, app in apps.items()}
    work: queue.Queue = queue.Queue()
    pick = random.Random(2)
    for case in generated(apps["open"], per_operation) * rounds:  # the same schema: sent to both servers
        for name in apps:
            work.put(("case", name, case, bool(pick.getrandbits(1))))
    for _ in range(rounds):
        for body in uploads(Path(root) / "videos" / sorted(p.name for p in (Path(root) / "videos").glob("*.mp4"))[0]):
            work.put(("upload", "open", body, True))
    fuzz_count = work.qsize()
    for i in range(fuzz_count):  # one valid search beside each malformed request
        work.put(("search", "open", ids[i % len(ids)], True))
    shuffled = list(work.queue)
    random.Random(1).shuffle(shuffled)
    work = queue.Queue()
    for item in shuffled:
        work.put(item)
    server_errors, shown_paths, latencies, statuses = [], [], [], {}
    lock = threading.Lock()
    secret = [str(root), str(folder), str(Path(root).parent)]

    def client() -> None:
        import requests

        with httpx.Client(timeout=60) as http, requests.Session() as session:
            while True:
                try:
                    kind, name, payload, with_token = work.get_nowait()
                except queue.Empty:
                    return
                base = servers[name][0]
                headers = {"Authorization": f"Bearer {TOKEN}"} if name == "token" and with_token else {}
                started = time.perf_counter()
                if kind == "case":  # requests, as schemathesis sends them (nested query values included)
                    request = {**payload, "url": base + payload["url"],
                               "headers": {**payload.get("headers", {}), **headers}}
                    response = session.request(**request, timeout=60)
                    status, text = response.status_code, response.text
                elif kind == "upload":
                    filename, body = payload
                    answer = http.post(f"{base}/search/like", params={"filename": filename}, content=body,
                                       headers={"content-type": "application/octet-stream"})
                    status, text = answer.status_code, answer.text
                else:
                    answer = http.get(f"{base}/search", params={"q": f"{payload} please", "k": 3})
                    status, text = answer.status_code, answer.text
                    with lock:
                        latencies.append(1000 * (time.perf_counter() - started))
                    assert status == 200, text
                with lock:
                    statuses[status] = statuses.get(status, 0) + 1
                    if status >= 500:
                        server_errors.append((kind, name, status, text[:300]))
                    if any(path in text for path in secret):
                        shown_paths.append((kind, name, status, text[:300]))

    threads = [threading.Thread(target=client) for _ in range(20)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=1200)
    finally:
        for _, stop in servers.values():
            stop()
    latencies.sort()
    return {"malformed": fuzz_count, "valid": len(latencies), "server_errors": server_errors, "shown": shown_paths,
            "statuses": statuses, "p50_ms": statistics.median(latencies),
            "p99_ms": latencies[int(0.99 * (len(latencies) - 1))]}


def check(result: dict, at_least: int) -> None:
    print(f"\n{result['malformed']} malformed and {result['valid']} valid requests, 20 clients: statuses "
          f"{dict(sorted(result['statuses'].items()))}; valid search p50 {result['p50_ms']:.1f} ms, "
          f"p99 {result['p99_ms']:.1f} ms")
    assert result["malformed"] >= at_least and result["valid"] == result["malformed"]
    assert not result["server_errors"], result["server_errors"][:3]
    assert not result["shown"], result["shown"][:3]
    assert 413 in result["statuses"] and 401 in result["statuses"] and 422 in result["statuses"]


def test_malformed_requests_mixed_with_searches_get_no_server_error(served_folder):
    check(traffic(served_folder, per_operation=25, rounds=1), at_least=250)


@pytest.mark.slow
def test_ten_thousand_malformed_requests(served_folder):
    check(traffic(served_folder, per_operation=250, rounds=4), at_least=10_000)
