"""The index folder has one owner (`videotext.apps.index_folder`): the command line and the Python API
build the same folder byte for byte, with what is said and what is written, and answer the same hits
for every channel; a build takes the writer lock once; an opened folder answers text queries through
its exported query side without importing torch."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.onscreen_media import texted_video

pytestmark = pytest.mark.heavy  # trains, builds indexes or starts processes and servers: `make test-quick` leaves it out

SHOWN = {  # video: (text on screen, start, end, (x, y)), what its subtitles say
    "lecture": (("Chapter 3: Thermodynamics", 1.0, 4.0, (40, 60)), "Heat flows from the hot body to the cold one."),
    "news": (("Bridge closed after storm", 2.0, 5.0, (60, 250)), "Traffic is diverted over the old river crossing."),
    "menu": (("Export Preferences", 0.0, 3.0, (300, 30)), "Click the button to save your settings."),
    "garden": (("Spring planting guide", 1.0, 5.0, (80, 120)), "Tomatoes need sun and water every morning."),
}
QUERIES = ["thermodynamics", "heat flows", "bridge closed", "storm", "river crossing", "export preferences",
           "save settings", "spring planting", "tomatoes", "water every morning", "a chapter about heat",
           "closed roads", "menu button", "garden guide", "cold body", "old bridge", "preferences dialog",
           "sun", "traffic", "a red circle moves to the left"]
BY = ["shown", "said", "written", "both", "all", "shown,said", "said,written"]
FILES = ["entries.parquet", "speech.jsonl", "speech.npy", "written.jsonl", "written.npy", "index.faiss"]


def srt(text: str) -> str:
    return f"1\n00:00:01,000 --> 00:00:03,500\n{text}\n"


@pytest.fixture(scope="module")
def built(tiny_synth, tmp_path_factory):
    """(folder built by the CLI, folder built by the Python API, the run), from separate feature stores."""
    pytest.importorskip("bm25s", reason="text channels need the 'speech' extra: pip install 'videotext[speech]'")
    from tests.test_distributed import _fake_run
    from videotext.cli import app
    from videotext.data.ocr.engines import OcrError, ocr_engine

    try:
        ocr_engine("rapidocr")
    except OcrError as exc:
        pytest.skip(str(exc))
    import videotext

    root = tmp_path_factory.mktemp("owner")
    videos = root / "videos"
    videos.mkdir()
    for i, (name, (shown, said)) in enumerate(SHOWN.items()):
        texted_video(videos / f"{name}.mp4", [shown], seconds=6.0, seed=i)
        (videos / f"{name}.srt").write_text(srt(said), encoding="utf-8")
    run = _fake_run(tiny_synth, root / "run")
    result = CliRunner().invoke(app, ["index", "build", str(run), str(videos), "-o", str(root / "cli"), "--speech",
                                      "--text"])
    assert result.exit_code == 0, result.output
    report = videotext.build_index(videotext.load_model(run), videos, root / "api", speech=True, text=True,
                                   progress=False)
    assert report.lines()[0] == f"indexed 4 videos → {root / 'api'}"
    channels = ("speech:", "on-screen text:")
    printed = [line.split(" (")[0] for line in result.output.splitlines() if line.startswith(channels)]
    assert printed == [line.split(" (")[0] for line in report.lines() if line.startswith(channels)] == \
        ["speech: 4 lines", "on-screen text: 4 lines"]
    return root / "cli", root / "api", run


def test_the_cli_and_the_python_api_write_the_same_files(built):
    cli, api, _ = built
    for name in FILES:
        assert (cli / name).read_bytes() == (api / name).read_bytes(), name
    said = [json.loads(line) for line in (api / "speech.jsonl").read_text().splitlines()]
    assert sorted(line["entry"] for line in said) == sorted(SHOWN) and all(line["source"] == "subtitle" for line in said)
    written = [json.loads(line) for line in (api / "written.jsonl").read_text().splitlines()]
    assert sorted(line["entry"] for line in written) == sorted(SHOWN)
    cli_meta, api_meta = (json.loads((f / "index.json").read_text()) for f in (cli, api))
    assert {k: v for k, v in cli_meta.items() if k != "saved"} == {k: v for k, v in api_meta.items() if k != "saved"}


def test_the_cli_and_the_python_api_answer_the_same_hits_on_every_channel(built):
    import videotext
    from videotext.cli import app

    cli, api, _ = built
    opened = videotext.open_index(api)
    compared = 0
    for by in BY:
        for query in QUERIES:
            result = CliRunner().invoke(app, ["search", str(cli), query, "--by", by, "-k", "4", "--json"])
            assert result.exit_code == 0, result.output
            printed = json.loads(result.output)
            hits = opened.search(query, k=4, by=by)
            assert [(h["id"], h["rank"]) for h in printed] == [(h.id, h.rank) for h in hits], (by, query)
            assert [h["score"] for h in printed] == pytest.approx([h.score for h in hits], abs=1e-6), (by, query)
            compared += 1
    assert compared == len(BY) * len(QUERIES) == 140
    top = opened.search("thermodynamics", k=1, by="written")[0]
    assert top.id == "lecture" and top.meta["written"]["start"] == 1.0
    top = opened.search("tomatoes need sun", k=1, by="said")[0]
    assert top.id == "garden" and top.meta["said"]["source"] == "subtitle"


def test_a_build_takes_the_writer_lock_once(built, monkeypatch, tmp_path):
    import videotext
    from videotext.apps import index_folder

    _, _, run = built
    taken = []
    real = index_folder.writer_lock

    def counting(target, *args, **kwargs):
        taken.append(Path(target))
        return real(target, *args, **kwargs)

    monkeypatch.setattr(index_folder, "writer_lock", counting)
    videos = tmp_path / "videos"
    videos.mkdir()
    texted_video(videos / "one.mp4", [], seconds=2.0)
    videotext.build_index(run, videos, tmp_path / "idx", progress=False)
    assert taken == [tmp_path / "idx"]
    assert json.loads((tmp_path / "idx" / "published.json").read_text())["version"]


def test_an_opened_folder_answers_text_without_torch(built):
    """The query side exported at build time answers in a fresh process that never imports torch."""
    _, api, _ = built
    code = (f"import sys, videotext; opened = videotext.open_index({str(api)!r}); "
            "hits = [opened.search(q, k=2, by=b)[0].id for q, b in (('heat flows', 'said'), ('storm', 'written'), "
            "('lecture', 'all'), ('bridge', 'shown'))]; "
            "print(hits, 'torch' in sys.modules, 'transformers' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    hits, torch_loaded, transformers_loaded = done.stdout.rsplit(" ", 2)
    assert torch_loaded == "False" and transformers_loaded.strip() == "False", done.stdout
    assert hits.startswith("['lecture', 'news',"), hits


SERVED = """
import json, sys
from fastapi.testclient import TestClient
from videotext.apps.serve import create_app

app = create_app(sys.argv[1], reload_seconds=0.05)
client = TestClient(app)

def answer():
    hits = client.get("/search", params={"q": "spring planting guide", "k": 8}).json()["results"]
    return {"ids": sorted(h["id"] for h in hits), "version": app.state.live.snapshot.version,
            "torch": "torch" in sys.modules, "transformers": "transformers" in sys.modules}

print(json.dumps(answer()), flush=True)
sys.stdin.readline()  # the folder is published again meanwhile
first = app.state.live.snapshot.version
import time
deadline = time.time() + 60
while app.state.live.snapshot.version == first and time.time() < deadline:
    time.sleep(0.05)
print(json.dumps(answer()), flush=True)
"""


def test_the_service_answers_text_without_torch_across_a_version_swap(built, tmp_path):
    """The server opens its folder through the owner: text queries through the exported query side, in a
    process that never imports torch, before and after `index build --update` publishes a new version."""
    import shutil

    import videotext

    _, api, run = built
    folder = shutil.copytree(api, tmp_path / "served")
    videos = shutil.copytree(api.parent / "videos", tmp_path / "videos")
    child = subprocess.Popen([sys.executable, "-c", SERVED, str(folder)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        before = json.loads(child.stdout.readline() or "{}")
        assert before.get("ids") == sorted(SHOWN), (before, child.stderr.read() if child.poll() is not None else "")
        assert before["torch"] is False and before["transformers"] is False
        texted_video(videos / "poster.mp4", [("Spring planting guide", 0.0, 2.0, (80, 120))], seconds=3.0, seed=7)
        report = videotext.build_index(run, videos, folder, update=True, text=True, progress=False)
        assert report.version is not None and report.update.add == ["poster"]
        child.stdin.write("\n")
        child.stdin.flush()
        after = json.loads(child.stdout.readline() or "{}")
    finally:
        child.kill()
        child.wait()
    assert after["version"] == report.version != before["version"]
    assert after["ids"] == sorted([*SHOWN, "poster"])
    assert after["torch"] is False and after["transformers"] is False
