"""A write that finds no room (here a file-size limit, RLIMIT_FSIZE, as a full disk answers) is
one line and exit 2, and the previous index and features stay usable; the rerun finishes."""
from __future__ import annotations

import resource
import shutil
import signal
import subprocess
import sys

from videotext.search import Index
from videotext.search.check import check_index


def file_size_limit(limit: int):
    def apply() -> None:  # in the child, before it runs
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    return apply


def test_an_update_without_room_keeps_the_previous_index(conse_run, tmp_path):
    from videotext.data.synthetic import synthesize
    from videotext.inference import load_model

    synthesize(tmp_path / "synth", num_videos=3, seed=6, progress=False)
    synthesize(tmp_path / "more", num_videos=1, seed=7, progress=False)
    folder, out = tmp_path / "synth" / "videos", tmp_path / "idx"
    load_model(conse_run).build_index(folder, out, progress=False)
    shutil.copy(next((tmp_path / "more" / "videos").glob("*.mp4")), folder / "new_video.mp4")

    command = [sys.executable, "-m", "videotext.cli", "index", "build", str(conse_run), str(folder), "-o", str(out),
               "--update"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, preexec_fn=file_size_limit(4096))
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(errors) == 1 and errors[0].startswith("error: no room to write") and "Traceback" not in done.stderr
    assert len(Index.load(out)) == 3  # the previous version, whole
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".idx.") and p.name != ".idx.lock"] == []  # no half-written folder
    report = check_index(out)
    assert len(report.plan.add) == 1 and not report.problems

    done = subprocess.run(command, capture_output=True, text=True, timeout=600)  # room again: the rerun finishes
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(Index.load(out)) == 4 and check_index(out).current
