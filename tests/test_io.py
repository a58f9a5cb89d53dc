"""`FailureLog`: a re-run's failures replace the earlier ones (latest error wins), per item and expert."""
from __future__ import annotations

import json

import pytest

from videotext.io import FailureLog


def parsed(path) -> list[dict | None]:
    """Each line as JSON, None where it is not JSON."""
    out = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
            record.pop("crc32", None)  # each line's digest (videotext.digests.json_line)
            out.append(record)
        except json.JSONDecodeError:
            out.append(None)
    return out


def test_latest_error_wins_per_item_and_expert(tmp_path):
    path = tmp_path / "failures.jsonl"
    path.write_text(  # two runs of an older version appended the same failure twice; then a torn line
        json.dumps({"item": "a", "error": "old", "experts": ["motion", "audio"]}) + "\n"
        + json.dumps({"item": "a", "error": "old again", "experts": ["motion", "audio"]}) + "\n"
        + "{torn\n"
        + json.dumps({"item": "b", "error": "b broke", "expert": "audio"}) + "\n")
    FailureLog(path).compact()  # lines without a run id count as one run each: the newer copy stays
    assert parsed(path) == [{"item": "a", "error": "old again", "experts": ["motion", "audio"]},
                            {"item": "b", "error": "b broke", "expert": "audio"}]  # the torn line: met again
    log = FailureLog(path)
    log.record("a", ValueError("motion fails another way"), experts=["motion"])
    log.resolve("b", "audio")  # b works now
    log.resolve("c", "audio")  # never failed: nothing to forget
    log.compact()
    entries = parsed(path)
    assert len(entries) == 2 and log.count == 1
    assert entries[0] == {"item": "a", "error": "old again", "experts": ["audio"]}  # motion: superseded
    new = entries[1]
    assert (new["item"], new["error"], new["type"], new["experts"], new["run"]) == (
        "a", "motion fails another way", "ValueError", ["motion"], log.run)
    log.compact()  # idempotent
    assert parsed(path) == entries


def test_json_lines_skip_torn_lines_and_refuse_damage(tmp_path):
    import warnings

    from videotext.errors import DataFormatError
    from videotext.io import read_json_lines
    from videotext.train.trainer import read_metrics_log

    log = tmp_path / "metrics.jsonl"
    log.write_text('{"kind": "train", "step": 1}\n\n{"kind": "val", "step": 2}\n{"kind": "tra')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert read_metrics_log(tmp_path) == [{"kind": "train", "step": 1}, {"kind": "val", "step": 2}]
    assert [str(w.message) for w in caught] == [f"{log}:4: torn line skipped (its writer was stopped mid-line)"]
    log.write_text('{"kind": "train", "step": 1}\n{"kind\n{"kind": "val", "step": 2}\n')  # closed by the next append
    with pytest.warns(UserWarning, match=r"metrics\.jsonl:2: torn line skipped"):
        assert [line["step"] for line in read_json_lines(log)] == [1, 2]
    for damage in ("\0\0\0\0", "step 2", "\udcff{"):
        log.write_bytes(b'{"kind": "train", "step": 1}\n' + damage.encode("utf-8", "surrogateescape") + b"\n")
        with pytest.raises(DataFormatError, match=r"metrics\.jsonl \[line 2\]: not a JSON line, the file is damaged"):
            read_json_lines(log)
    assert read_json_lines(tmp_path / "absent.jsonl") == []


def test_a_damaged_failure_log_is_said_once_and_the_job_goes_on(tmp_path):
    from videotext.digests import json_line

    path = tmp_path / "failures.jsonl"
    damaged = b'{"crc32":"00000000","item": "x", "error": "bits changed"}'
    path.write_bytes(json_line({"item": "a", "error": "old", "run": "r1"}) + damaged + b"\n"
                     + json_line({"item": "b", "error": "old", "run": "r1"}))
    log = FailureLog(path)
    with pytest.warns(UserWarning, match=r"failures\.jsonl \[line 2\]: its digest does not match its text, the file "
                                         r"is damaged; delete it: the next run of the job records the failures"):
        log.resolve("a")  # the job reads what failed before: it says the file is damaged, once, and goes on
    log.resolve("b")
    log.record("c", ValueError("new"))
    log.compact()
    lines = path.read_bytes().split(b"\n")
    assert damaged in lines  # kept byte for byte: nothing the user had is lost
    assert [entry["item"] for entry in parsed(path) if entry and "item" in entry] == ["x", "c"]
    with pytest.raises(ValueError, match=r"failures\.jsonl \[line 1\]: its digest does not match"):
        FailureLog(path).read()
