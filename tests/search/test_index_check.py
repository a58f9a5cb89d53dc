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
    assert "no source folder recorded" in " ".join(report.lines())
