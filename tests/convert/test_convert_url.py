"""`videotext convert METHOD URL|NAME`: an official-format checkpoint served over HTTP on the loopback
(tests/hub_server.py) is downloaded into the cache and converts to the same weights as the local
file; a second run makes no request; a cut connection fails with one line and the next run
continues it with a Range request; HTML pages, sha256 mismatches and unreachable servers are one
line each and leave nothing behind; `--list` prints the released checkpoints."""
from __future__ import annotations

import hashlib
import io
import shutil
import socket
import tarfile
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from tests.hub_server import LocalHub
from tests.convert.test_convert_released import same_weights
from tests.convert.test_coot_convert import HEADS, official_state
from videotext.cli import app
from videotext.convert import _released as released, convert
from videotext.cache import cache_folder
from videotext.download import download

OPTIONS = ["--option", f"num_heads={HEADS}"]


@pytest.fixture
def hub(tmp_path):
    server = LocalHub(tmp_path / "hub").start()
    yield server
    server.stop()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("VIDEOTEXT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "checkpoints"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """An official COOT checkpoint (models/model_<epoch>.pth layout) and its local conversion."""
    folder = tmp_path_factory.mktemp("coot")
    torch.save(official_state(), folder / "model_10.pth")
    convert("coot", folder / "model_10.pth", folder / "local", num_heads=HEADS)
    return folder / "model_10.pth"


def run(*args: str):
    return CliRunner().invoke(app, ["convert", *args])


def one_error_line(result) -> str:
    """The run failed as a user error: exit 2, one `error: ...` line, no traceback."""
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def cached_files(cache: Path) -> list[Path]:
    return sorted(p for p in cache.rglob("*") if p.is_file() and ".locks" not in p.parts) if cache.exists() else []


def test_url_converts_like_the_local_file_and_is_cached(tmp_path, hub, cache, checkpoint):
    url = hub.add_file("model_10.pth", checkpoint)
    result = run("coot", url, "-o", str(tmp_path / "run"), *OPTIONS)
    assert result.exit_code == 0, result.output
    assert f"converted {url} (" in result.output
    same_weights(tmp_path / "run", checkpoint.parent / "local")
    (cached,) = cached_files(cache)
    assert cached.name == "model_10.pth" and cached.read_bytes() == checkpoint.read_bytes()
    assert cached.parent.parent == cache_folder("checkpoints") == cache
    assert hub.requests == [("GET", "/files/model_10.pth")]

    sha = hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    result = run("coot", url, "-o", str(tmp_path / "again"), "--sha256", sha, *OPTIONS)
    assert result.exit_code == 0, result.output
    assert len(hub.requests) == 1  # the second run read the cache, no request
    same_weights(tmp_path / "again", checkpoint.parent / "local")


def test_cut_download_fails_once_then_continues_with_a_range(tmp_path, hub, cache, checkpoint):
    url = hub.add_file("model_10.pth", checkpoint)
    size, cut = checkpoint.stat().st_size, checkpoint.stat().st_size // 3
    hub.faults["/files/model_10.pth"] = f"truncate:{cut}"
    line = one_error_line(run("coot", url, "-o", str(tmp_path / "run"), *OPTIONS))
    assert f"{url}: the download stopped at {cut} of {size} bytes; run the same command again" in line
    assert f"cache folder {cache}" in line and "by hand" in line
    (part,) = cached_files(cache)
    assert part.name == "model_10.pth.part" and part.read_bytes() == checkpoint.read_bytes()[:cut]
    assert not (tmp_path / "run").exists()  # never loaded

    del hub.faults["/files/model_10.pth"]
    result = run("coot", url, "-o", str(tmp_path / "run"), *OPTIONS)
    assert result.exit_code == 0, result.output
    assert hub.ranges == ["", f"bytes={cut}-"]  # the second GET began where the first stopped
    (cached,) = cached_files(cache)
    assert cached.name == "model_10.pth" and cached.read_bytes() == checkpoint.read_bytes()
    same_weights(tmp_path / "run", checkpoint.parent / "local")

    cached.rename(part)  # a whole part left by a run stopped before its rename: the server answers 416
    assert download(url) == cached and cached.read_bytes() == checkpoint.read_bytes()
    assert hub.ranges[-1] == f"bytes={size}-"


def test_html_pages_are_refused_and_nothing_is_cached(tmp_path, hub, cache, checkpoint):
    url = hub.add_file("model_10.pth", checkpoint)
    hub.faults["/files/model_10.pth"] = "html"
    line = one_error_line(run("coot", url, "-o", str(tmp_path / "run"), *OPTIONS))
    assert "answered an HTML page, not a file" in line and "nothing was cached" in line
    (tmp_path / "page.pth").write_bytes(b"\n<!DOCTYPE html><html><body>Sign in</body></html>")
    sniffed = hub.add_file("page.pth", tmp_path / "page.pth")  # served as application/octet-stream
    assert "answered an HTML page" in one_error_line(run("coot", sniffed, "-o", str(tmp_path / "run"), *OPTIONS))
    assert cached_files(cache) == [] and not (tmp_path / "run").exists()


def test_sha256_mismatch_is_refused_and_removed(tmp_path, hub, cache, checkpoint):
    url = hub.add_file("model_10.pth", checkpoint)
    actual = hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    line = one_error_line(run("coot", url, "-o", str(tmp_path / "run"), "--sha256", "0" * 64, *OPTIONS))
    assert f"sha256 mismatch: expected {'0' * 64}, got {actual}; the file was removed from the cache" in line
    assert cached_files(cache) == [] and not (tmp_path / "run").exists()
    line = one_error_line(run("coot", str(checkpoint), "-o", str(tmp_path / "run"), "--sha256", "ab" * 32))
    assert f"the file is {checkpoint}" in line and checkpoint.exists()  # a local file is checked, never removed


def test_unreachable_and_failing_servers(tmp_path, hub, cache, checkpoint):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/models/model_10.pth"
    line = one_error_line(run("coot", url, "-o", str(tmp_path / "run")))
    assert line.startswith(f"error: {url}: cannot be reached (")
    assert f"cache folder {cache}; remedy: download {url} by hand" in line and "PATH" in line

    served = hub.add_file("model_10.pth", checkpoint)
    hub.faults["/files/model_10.pth"] = "500"
    assert "the server answered HTTP 500" in one_error_line(run("coot", served, "-o", str(tmp_path / "run")))
    assert "unknown option" in one_error_line(run("coot", served, "-o", str(tmp_path / "run"), "--option", "x=1"))
    assert hub.requests == [("GET", "/files/model_10.pth")]  # a bad option fails before any download
    assert cached_files(cache) == []


def test_list_names_each_papers_released_checkpoints():
    result = run("--list")
    assert result.exit_code == 0, result.output
    for paper in ("Frozen in Time", "MMT: Multi-modal Transformer", "COOT"):
        assert paper in result.output
    for entry in released.RELEASED:
        assert entry.name in result.output and entry.url in result.output and entry.figure in result.output
    assert "https://www.robots.ox.ac.uk/~maxbain/frozen-in-time/models/cc-webvid2m-4f_stformer_b_16_224.pth.tar" \
        in result.output
    assert "http://pascal.inrialpes.fr/data2/vgabeur/mmt/data/checkpoints/MSRVTT_jsfusion_trainval.pth" in result.output
    assert "`videotext convert coot --list` lists the names" in one_error_line(run("coot", "coot-nope", "-o", "r"))
    only = run("mmt", "--list").output
    assert "mmt-msrvtt" in only and "frozen-" not in only and "coot-" not in only


def test_released_name_downloads_its_archive_and_converts_the_file_inside(tmp_path, hub, cache, checkpoint,
                                                                          monkeypatch):
    archive = tmp_path / "provided_models.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(checkpoint, arcname="provided_models/anet_coot.pth")
        tar.addfile(tarfile.TarInfo("provided_models/readme.txt"), io.BytesIO(b""))
    url = hub.add_file("uc", archive)
    entry = released.Released("coot-test", "coot", url, "data", "figure", "test", member="anet_coot.pth",
                              filename="provided_models.tar.gz", page="https://example.org/page")
    monkeypatch.setattr(released, "RELEASED", (entry,))

    result = run("coot", "coot-test", "-o", str(tmp_path / "run"), *OPTIONS)
    assert result.exit_code == 0, result.output
    same_weights(tmp_path / "run", checkpoint.parent / "local")
    assert sorted(p.name for p in cached_files(cache)) == ["anet_coot.pth", "provided_models.tar.gz"]
    line = one_error_line(run("mmt", "coot-test", "-o", str(tmp_path / "other")))
    assert line == "error: coot-test is a released coot checkpoint, not a mmt one: run `videotext convert coot coot-test ...`"
    assert len(hub.requests) == 1

    hub.faults["/files/uc"] = "html"
    shutil.rmtree(cached_files(cache)[0].parent)  # the archive's folder: download it again
    line = one_error_line(run("coot", "coot-test", "-o", str(tmp_path / "again"), *OPTIONS))
    assert "answered an HTML page" in line and line.endswith("the file is linked from https://example.org/page")
