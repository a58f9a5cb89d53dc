"""`videotext check PATH`: every digest and log line under a folder, one `error:` line per damaged file
with its way back and exit 2; files written before digests counted, never failed; nothing written."""
from __future__ import annotations

from typer.testing import CliRunner

from videotext.cli import app
from videotext.digests import json_line
from videotext.io import write_json


def test_check_names_each_damaged_file_counts_the_undigested_and_writes_nothing(tmp_path):
    run = tmp_path / "run"
    write_json(run / "checkpoints" / "best" / "meta.json", {"step": 3}, way_back="use the other checkpoint")
    write_json(run / "eval_test_best.json", {"t2v": 1.0})  # not a kind that carries a digest
    (run / "config.yaml").write_text("method: dual\n")  # written before digests
    (run / "metrics.jsonl").write_bytes(json_line({"step": 0}) + json_line({"step": 1}))
    runner = CliRunner()
    done = runner.invoke(app, ["check", str(run)])
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines() == [
        f"{run}: 1 files checked against their digests, 1 logs line by line: no damage found",
        "1 files carry no digest (written before digests; they load unchecked): config.yaml"]
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    meta = run / "checkpoints" / "best" / "meta.json"
    meta.write_bytes(meta.read_bytes().replace(b"3", b"4"))
    metrics = run / "metrics.jsonl"
    metrics.write_bytes(metrics.read_bytes().replace(b'"step": 0', b'"step": 9'))
    done = runner.invoke(app, ["check", str(run)])
    assert done.exit_code == 2
    errors = done.stderr.splitlines()
    assert len(errors) == 2 and "2 damaged" in done.stdout
    assert errors[0].startswith(f"error: {meta}: damaged: its bytes differ from those written") and \
        "use the other checkpoint" in errors[0]
    assert errors[1] == (f"error: {metrics} [line 1]: its digest does not match its text, the file is damaged; "
                         f"restore it from a copy, or delete it: training and evaluation go on without it (the "
                         f"curves and the report lose the steps it held)")
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}.keys() == before.keys()
    done = runner.invoke(app, ["check", str(tmp_path / "absent")])
    assert done.exit_code == 2 and done.output.strip().endswith("not a folder (give a run, an index, a feature store "
                                                                "or a results folder)")
