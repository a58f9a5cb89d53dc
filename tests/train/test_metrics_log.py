"""`MetricsLog` on `--resume`: the log is cut back to the lines of the checkpoint resumed, whole or not at
all (a failed cut keeps the old log), and the lines it then appends carry their digests."""
from __future__ import annotations

import json

import pytest

from videotext.io import read_json_lines
from videotext.train.trainer import MetricsLog


def written(run, steps) -> bytes:
    with MetricsLog(run, keep_lines=None) as log:
        for step in steps:
            log.write({"kind": "train", "step": step, "epoch": 0, "loss": 1.0 / (step + 1)})
    return (run / "metrics.jsonl").read_bytes()


def test_resume_cuts_the_log_back_whole_and_a_failed_cut_keeps_the_old_log(tmp_path, monkeypatch):
    before = written(tmp_path, range(5))
    assert [line["step"] for line in read_json_lines(tmp_path / "metrics.jsonl")] == [0, 1, 2, 3, 4]
    assert all(json.loads(line)["crc32"] for line in before.splitlines())  # each line with its digest

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("videotext.io.os.replace", full_disk)  # the cut is written aside, then renamed in
    with pytest.raises(OSError, match="No space left"):
        MetricsLog(tmp_path, keep_lines=2)
    assert (tmp_path / "metrics.jsonl").read_bytes() == before  # nothing lost
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".metrics")] == []  # no temp file left
    monkeypatch.undo()
    with MetricsLog(tmp_path, keep_lines=2) as log:  # the checkpoint resumed had written two lines
        assert log.lines == 2
        log.write({"kind": "train", "step": 2, "epoch": 0, "loss": 0.25})
    assert [line["step"] for line in read_json_lines(tmp_path / "metrics.jsonl")] == [0, 1, 2]
    assert (tmp_path / "metrics.jsonl").read_bytes().startswith(before.split(b"\n")[0] + b"\n" + before.split(b"\n")[1])
