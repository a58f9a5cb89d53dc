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


def test_a_checkpoint_save_without_room_keeps_the_previous_checkpoint(tmp_path):
    """The second save runs under a file-size limit smaller than its weights: it fails with one
    error, the first checkpoint still loads whole, and no half-written folder is left."""
    script = f"""
import resource, signal, torch
from videotext.train.checkpoint import save_checkpoint
torch.manual_seed(0)
model = torch.nn.Linear(256, 256)
folder = save_checkpoint({str(tmp_path / 'last')!r}, model, {{"step": 1}}, {{"step": 1}})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))
torch.nn.init.zeros_(model.weight)
save_checkpoint(folder, model, {{"step": 2}}, {{"step": 2}})
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "File too large" in done.stderr, done.stderr[-2000:]
    from videotext.io import out_of_space
    from videotext.train.checkpoint import load_meta, load_state, load_weights

    import torch

    model = torch.nn.Linear(256, 256)
    load_weights(tmp_path / "last", model)
    assert load_meta(tmp_path / "last")["step"] == 1 and load_state(tmp_path / "last")["step"] == 1
    assert float(model.weight.detach().abs().sum()) > 0  # the first save's weights, not the zeros
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last"]
    assert out_of_space(OSError(27, "File too large"))


def test_training_without_room_is_one_line_and_the_rerun_finishes(tiny_synth, tmp_path):
    from tests.conftest import tiny_config_overrides

    sets = [x for o in tiny_config_overrides(tiny_synth) + ["train.epochs=1"] for x in ("--set", o)]
    command = [sys.executable, "-m", "videotext.cli", "train", "dual/synthetic", "-o", str(tmp_path / "run"),
               "--no-progress", "--no-report", *sets]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600,
                          preexec_fn=file_size_limit(8 * 1024 * 1024))  # under the weights' size
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(errors) == 1 and errors[0].startswith("error: no room to write") and "Traceback" not in done.stderr
    checkpoints = tmp_path / "run" / "checkpoints"
    assert not checkpoints.exists() or [p.name for p in checkpoints.iterdir()] == []  # nothing half-written

    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in checkpoints.iterdir()) == ["best", "last"]
