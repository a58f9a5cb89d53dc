"""`videotext.digests`: a file's CRC-32 recorded beside it as it is written and checked as it is read;
log lines with their own. Every single changed byte is caught, a rewrite by the project never trips
it, and files written before digests load as they are."""
from __future__ import annotations

import json
import os
import zlib

import pytest

from videotext import digests
from videotext.digests import DamagedFile
from videotext.io import append_json_line, atomic_path, read_json_lines, write_json

WAY_BACK = "write it again with `make-it`"


def flipped(data: bytes, position: int, xor: int = 0x20) -> bytes:
    return data[:position] + bytes([data[position] ^ xor]) + data[position + 1 :]


def test_a_written_file_reads_back_and_any_changed_byte_is_one_line_naming_it_and_the_way_back(tmp_path):
    path = tmp_path / "weights.bin"
    data = os.urandom(3000)
    with atomic_path(path, WAY_BACK) as tmp:
        tmp.write_bytes(data)
    record = json.loads(digests.record_path(path).read_text())
    assert digests.record_path(path).name == ".weights.bin.crc32"
    assert record["accepted"] == [[f"{zlib.crc32(data):08x}", 3000]] and record["way_back"] == WAY_BACK
    assert digests.read_verified(path) == data
    for position in (0, 1234, 2999):
        path.write_bytes(flipped(data, position))
        with pytest.raises(DamagedFile) as raised:
            digests.read_verified(path)
        message = str(raised.value)
        assert message.startswith(f"{path}: damaged: its bytes differ from those written (CRC-32 ")
        assert f"; {WAY_BACK} (if you changed it on purpose, delete {digests.record_path(path)} to accept it)" in message
        assert "\n" not in message
        with pytest.raises(DamagedFile):
            digests.verify_file(path)  # the whole-file check (a file a library opens by name)
    path.write_bytes(data[:1000])
    with pytest.raises(DamagedFile, match=r"weights\.bin: damaged: 1000 bytes where 3000 were written"):
        digests.read_verified(path, way_back="another way")
    assert digests.problem_of(path) is not None
    path.write_bytes(data)
    assert digests.problem_of(path) is None


def test_a_rewrite_killed_between_its_record_and_its_rename_leaves_either_version_readable(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_bytes(b"written before digests\n")  # no record: read as it is
    assert digests.read_record(path) is None and digests.read_verified(path) == b"written before digests\n"
    new = tmp_path / "new.tmp"
    new.write_bytes(b"a: 1\n")
    digests.stage(new, path, WAY_BACK)  # the writer killed here, before its rename: the old file stays
    assert digests.read_verified(path) == b"written before digests\n"
    os.replace(new, path)  # ... or killed after the rename, before `settle`
    assert digests.read_verified(path) == b"a: 1\n"
    assert len(digests.read_record(path).accepted) == 2
    digests.settle(path)
    assert digests.read_record(path).accepted == (digests.digest_bytes(b"a: 1\n"),)
    with atomic_path(path, WAY_BACK) as tmp:  # a whole rewrite through the project's own writer
        tmp.write_bytes(b"a: 2\n")
    assert digests.read_verified(path) == b"a: 2\n" and len(digests.read_record(path).accepted) == 1
    with pytest.raises(ZeroDivisionError), atomic_path(path, WAY_BACK) as tmp:  # a write that fails midway
        tmp.write_bytes(b"a: 3\n")
        1 / 0
    assert digests.read_verified(path) == b"a: 2\n"


def test_a_damaged_record_is_named_and_a_recorded_file_gone_is_found_by_the_tree_check(tmp_path):
    write_json(tmp_path / "a.json", {"x": 1}, way_back=WAY_BACK)
    write_json(tmp_path / "b.json", {"y": 2}, way_back=WAY_BACK)
    write_json(tmp_path / "sub" / "c.json", {"z": 3}, way_back=WAY_BACK)
    (tmp_path / ".half-written").mkdir()  # a writer's leftover: skipped
    (tmp_path / ".half-written" / ".d.json.crc32").write_text("{")
    clean = digests.check_tree(tmp_path)
    assert sorted(p.name for p in clean.checked) == ["a.json", "b.json", "c.json"] and clean.problems == []
    record = digests.record_path(tmp_path / "a.json")
    record.write_bytes(flipped(record.read_bytes(), 40))
    with pytest.raises(DamagedFile, match=r"\.a\.json\.crc32: the digest record of a\.json is damaged"):
        digests.read_verified(tmp_path / "a.json")
    (tmp_path / "sub" / "c.json").unlink()
    found = digests.check_tree(tmp_path)
    assert [line.split(":")[0] for line in found.problems] == [str(record), str(tmp_path / "sub" / "c.json")]
    assert found.problems[1].endswith(f"missing, though a digest of it was recorded; {WAY_BACK}")


def log_lines(tmp_path) -> tuple:
    path = tmp_path / "metrics.jsonl"
    for step in range(3):
        append_json_line(path, {"step": step, "text": f"ünïcode {step}", "loss": 0.5 / (step + 1)})
    append_json_line(path, {})
    return path, path.read_bytes()


def test_every_single_changed_byte_of_a_log_is_damage_never_a_different_record(tmp_path):
    path, data = log_lines(tmp_path)
    assert data.startswith(b'{"crc32":"') and data.count(b"\n") == 4
    assert read_json_lines(path) == [{"step": s, "text": f"ünïcode {s}", "loss": 0.5 / (s + 1)} for s in range(3)] + [{}]
    for position in range(len(data)):
        for value in {data[position] ^ 0x01, data[position] ^ 0x80, ord("\n"), ord("{"), ord('"'), ord("0")} - {data[position]}:
            parsed = digests.parse_json_lines(data[:position] + bytes([value]) + data[position + 1 :])
            assert parsed.damaged, (position, bytes([value]))


def test_a_torn_last_line_is_skipped_then_cut_off_by_the_next_append_and_old_lines_still_read(tmp_path):
    path, data = log_lines(tmp_path)
    last = data[:-1].rfind(b"\n") + 1
    for cut in (last + 1, last + 5, len(data) - 2):  # a writer killed inside the last line, its head included
        path.write_bytes(data[:cut])
        with pytest.warns(UserWarning, match=r"metrics\.jsonl:4: torn line skipped"):
            assert len(read_json_lines(path)) == 3
    append_json_line(path, {"step": 4})
    assert path.read_bytes() == data[:last] + digests.json_line({"step": 4})
    old = tmp_path / "old.jsonl"  # lines written before digests, one of them torn and closed, then new ones
    old.write_bytes(b'{"step": 0}\n{"ste\n{"step": 1}\n')
    append_json_line(old, {"step": 2})
    with pytest.warns(UserWarning, match=r"old\.jsonl:2: torn line skipped"):
        assert read_json_lines(old) == [{"step": 0}, {"step": 1}, {"step": 2}]
    old.write_bytes(b'{"step": 0}\n' + digests.json_line({"step": 1}) + b'{"ste\n' + digests.json_line({"step": 2}))
    with pytest.raises(ValueError, match=r"old\.jsonl \[line 3\]: not a JSON line, the file is damaged"):
        read_json_lines(old)  # logs with digests are never left torn inside: damage


def test_verify_once_per_process_and_a_file_replaced_while_read_is_read_again(tmp_path, monkeypatch):
    path = tmp_path / "store.h5"
    with atomic_path(path, WAY_BACK) as tmp:
        tmp.write_bytes(b"x" * 100)
    digests.verify_file(path)
    calls = []
    monkeypatch.setattr(digests, "Running", lambda: calls.append(1) or (_ for _ in ()).throw(AssertionError))
    digests.verify_file(path)  # this version was verified: not hashed again
    assert calls == []
    monkeypatch.undo()
    real_open = open
    swapped = []

    def replacing_open(file, mode="r", *args, **kwargs):  # a writer renames a new version in after the reader
        if str(file) == str(path) and not swapped:    # took the record, before it opens the file
            swapped.append(1)
            with atomic_path(path, WAY_BACK) as tmp:
                tmp.write_bytes(b"y" * 50)
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr("builtins.open", replacing_open)
    assert digests.read_verified(path) == b"y" * 50 and swapped == [1]
