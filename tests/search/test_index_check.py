"""`videotext index check`: an index against its source folder, changing nothing."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from videotext.search.check import check_index


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "videotext.cli", "index", "check", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.heavy
def test_check_says_what_an_update_would_do_and_writes_nothing(conse_run, tmp_path):
    from videotext.data.synthetic import synthesize
    from videotext.inference import load_model

    synthesize(tmp_path / "synth", num_videos=4, seed=5, progress=False)
    folder = tmp_path / "synth" / "videos"
    out = tmp_path / "idx"
    load_model(conse_run).build_index(folder, out, progress=False)
    report = check_index(out)
    assert report.current and report.problems == [] and report.lines()[-1] == "up to date"
    assert (report.entries, report.videos, report.unchanged) == (4, 4, 4) and report.version is not None

    files = sorted(folder.glob("*.mp4"))
    files[0].unlink()  # deleted
    shutil.copy(files[1], folder / "a_new_copy.mp4")  # added
    with open(files[2], "ab") as handle:  # changed in place
        handle.write(b"\0" * 64)
    before = {p.name: p.stat().st_mtime_ns for p in out.rglob("*")}
    report = check_index(out)
    plan = report.plan
    assert not report.current
    assert (len(plan.add) - len(plan.changed), len(plan.changed), len(plan.gone), report.unchanged) == (1, 1, 1, 2)
    assert report.lines()[-2].endswith("1 new, 1 changed in place, 1 deleted, 2 unchanged")
    assert report.lines()[-1] == "`index build --update` would add 1 videos, encode 1 again and drop 2 entries"
    assert {p.name: p.stat().st_mtime_ns for p in out.rglob("*")} == before  # nothing written

    done = cli(str(out))
    assert done.returncode == 1 and "would add 1 videos" in done.stdout, done.stderr
    (out / "index.json").write_text('{"format": "videotext-index"')  # cut short
    done = cli(str(out))
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and "index.json" in errors[0] and "Traceback" not in done.stderr


def test_check_names_a_run_that_is_gone(tmp_path):
    import numpy as np

    from videotext.search import Entry, Index

    index = Index(4, model="stand-in")
    index.meta["run_dir"] = str(tmp_path / "deleted-run")
    index.add(np.eye(4, dtype=np.float32)[:1], [Entry("v0")])
    report = check_index(index.save(tmp_path / "idx"))
    assert any("deleted-run, is gone" in p for p in report.problems) and not report.current
    assert "no source recorded" in " ".join(report.lines())


@pytest.mark.heavy
def test_an_index_of_a_manifest_split_is_checked_and_updated_against_that_split(tiny_synth, tmp_path, monkeypatch):
    """The demo's index at small scale: the test split of a manifest whose folder holds every video.
    `index check` compares the index with that split (up to date, not "every other video new"), and
    `index build --update` without a source updates it from that split: nothing is encoded."""
    from typer.testing import CliRunner

    from tests.test_distributed import _fake_run
    from videotext.cli import app
    from videotext.data.schema import VideoTextDataset
    from videotext.inference import load_model
    from videotext.run_model import RunModel

    run = _fake_run(tiny_synth, tmp_path / "run")
    dataset = VideoTextDataset.load(tiny_synth / "manifest.json")
    test = dataset.split("test")
    assert 0 < len(test) < len(dataset)
    out = tmp_path / "idx"
    load_model(run, device="cpu").build_index(test, out, features_dir=tiny_synth / "features", progress=False)
    report = check_index(out)
    assert report.current and report.lines()[-1] == "up to date", report.lines()
    assert report.source == f"{(tiny_synth / 'manifest.json').resolve()} (split test)"
    assert report.unchanged == report.videos == len(test) and report.plan.keep and not report.plan.add

    def encodes(*args, **kwargs):
        raise AssertionError("an update with nothing to do encoded videos")

    monkeypatch.setattr(RunModel, "video_embedding", encodes)
    done = CliRunner().invoke(app, ["index", "build", str(run), "-o", str(out), "--update",
                                    "--features", str(tiny_synth / "features")])
    assert done.exit_code == 0, done.output
    assert (f"update: 0 videos added, 0 changed in place (encoded again), 0 deleted, {len(test)} entries kept as "
            f"they were") in done.output
    assert check_index(out).current
    whole = check_index(out, tiny_synth / "manifest.json")  # against the whole manifest, as asked
    assert len(whole.plan.add) == len(dataset) - len(test) and not whole.plan.remove
