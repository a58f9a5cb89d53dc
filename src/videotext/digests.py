"""Digests of the files videotext writes, so that damage that still parses is caught when they are read.

The rule, for every file whose damage could still parse (weights, training state, a run's config,
feature files, index vectors and entries, exported encoders, lines of text, benchmark records):

- write: the file is written whole, its CRC-32 and size are computed from the bytes written and
  recorded beside it in `.NAME.crc32` (`record`; `stage` + `settle` around the rename of a file
  replaced in place, so that a kill between the two leaves a record that accepts either version);
- read: the bytes a reader takes are hashed as they are read (`read_verified`, `VerifyingReader`) or,
  for a file a library opens by name (HDF5), once per process when it is first opened (`verify_file`);
  a mismatch is one `DataFormatError` line naming the file, what is wrong and the way back, which
  the writer recorded with the digest;
- check: `check_tree` verifies every record under a folder (`videotext check`, `videotext index check`).

A file with no record (written before digests, or by another program) loads as it always did.

Append-only logs (metrics, failures, transcripts, on-screen lines) carry a digest on each line
instead (`json_line`, `parse_json_lines`): `{"crc32":"<8 hex>", …}`, the CRC-32 of the rest of the
line. Only the last line of a log can be torn (a writer killed mid-line; the next append cuts it
off), so a line that fails its digest anywhere else is damage; lines written before digests keep
the old reading (torn lines skipped, damage named).

CRC-32 (zlib's, as in gzip and PNG) rather than a cryptographic hash: it guards against damage, not
against an adversary, detects every change of up to 32 consecutive bits by construction (every
single changed byte), and runs at about twice sha256's speed here (bench/digests.py).
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterable

from videotext.errors import DataFormatError, VideoTextError

ALGORITHM = "crc32"
FORMAT = "videotext-digest"
BLOCK = 4 << 20  # bytes hashed at a time
SUFFIX = f".{ALGORITHM}"
ACCEPT_OWN_EDIT = "if you changed it on purpose, delete {record} to accept it"


class DamagedFile(DataFormatError):
    """A file whose bytes differ from the digest recorded when it was written (or whose record is
    damaged): its line names the file, what differs and the way back."""


def record_path(path: str | os.PathLike) -> Path:
    """Where the digest of `path` is recorded: `.NAME.crc32` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}{SUFFIX}")


def is_record(path: str | os.PathLike) -> bool:
    name = Path(path).name
    return name.startswith(".") and name.endswith(SUFFIX)


class Running:
    """A CRC-32 and a byte count, updated with each block read or written."""

    __slots__ = ("crc", "size")

    def __init__(self) -> None:
        self.crc, self.size = 0, 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self.crc = zlib.crc32(data, self.crc)
        self.size += len(data)

    @property
    def value(self) -> tuple[str, int]:
        return f"{self.crc:08x}", self.size


def digest_bytes(data: bytes | bytearray | memoryview) -> tuple[str, int]:
    """(CRC-32 as 8 hex digits, size) of `data`."""
    return f"{zlib.crc32(data):08x}", len(data)


def digest_file(path: str | os.PathLike) -> tuple[str, int]:
    """(CRC-32, size) of the file `path`, read in blocks."""
    running = Running()
    with open(path, "rb") as handle:
        while block := handle.read(BLOCK):
            running.update(block)
    return running.value


# ---- the record beside a file ------------------------------------------------------------------
@dataclass(frozen=True)
class Record:
    """What `.NAME.crc32` holds: the digests the file may have (one; two while a rewrite is under
    way) and the way back from damage."""

    accepted: tuple[tuple[str, int], ...]
    way_back: str

    def matches(self, digest: tuple[str, int]) -> bool:
        return tuple(digest) in self.accepted

    def sizes(self) -> set[int]:
        return {size for _, size in self.accepted}


def _body(accepted: Iterable[tuple[str, int]], way_back: str) -> dict[str, Any]:
    return {"format": FORMAT, "algorithm": ALGORITHM, "accepted": [[crc, size] for crc, size in accepted],
            "way_back": way_back}


def _encode_record(accepted: Iterable[tuple[str, int]], way_back: str) -> bytes:
    body = _body(accepted, way_back)
    canonical = json.dumps(body, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return json.dumps({**body, "check": f"{zlib.crc32(canonical):08x}"}, ensure_ascii=False).encode("utf-8") + b"\n"


def read_record(path: str | os.PathLike) -> Record | None:
    """The digest recorded for `path`; None when there is none (written before digests). A record
    that is itself damaged is a DataFormatError naming it."""
    where = record_path(path)
    try:
        raw = where.read_bytes()
    except FileNotFoundError:
        return None
    return _decode_record(raw, Path(path))


def _decode_record(raw: bytes, path: Path) -> Record:
    where = record_path(path)
    try:
        data = json.loads(raw.decode("utf-8"))
        check = data.pop("check")
        canonical = json.dumps(data, sort_keys=True, ensure_ascii=False).encode("utf-8")
        if check != f"{zlib.crc32(canonical):08x}" or data.get("format") != FORMAT:
            raise ValueError("its own check does not match")
        accepted = tuple((str(crc), int(size)) for crc, size in data["accepted"])
        way_back = str(data["way_back"])
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise DamagedFile(where, None, f"the digest record of {path.name} is damaged ({str(exc)[:80]}); delete "
                          f"it (the file then loads unchecked) or restore the folder from a copy") from None
    return Record(accepted, way_back)


def _write_record(path: Path, accepted: Iterable[tuple[str, int]], way_back: str) -> None:
    """Write the record of `path` whole (temp file, fsync, rename)."""
    where = record_path(path)
    data = _encode_record(accepted, way_back)
    fd, tmp = tempfile.mkstemp(prefix=f"{where.name}.", suffix=".tmp", dir=where.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, where)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def record(path: str | os.PathLike, way_back: str, digest: tuple[str, int] | None = None) -> None:
    """Record the digest of the file `path` (computed from it unless given) and the way back from
    its damage: for a file written whole into a folder that is then renamed into place."""
    path = Path(path)
    _write_record(path, [digest or digest_file(path)], way_back)


def stage(written: str | os.PathLike, target: str | os.PathLike, way_back: str,
          digest: tuple[str, int] | None = None) -> None:
    """Before `written` is renamed onto `target`: record its digest beside `target` next to the
    digest(s) `target` has now, so that a kill between this and the rename (or `settle`) leaves a
    record that accepts both versions. A `target` written before digests is hashed once here."""
    target = Path(target)
    new = digest or digest_file(written)
    try:
        old = read_record(target)
    except DataFormatError:
        old = None  # a damaged record is replaced by the new one
    if old is not None:
        accepted = [pair for pair in old.accepted if pair != new]
    else:
        accepted = [digest_file(target)] if target.is_file() else []
    _write_record(target, [*accepted, new], way_back)


def settle(target: str | os.PathLike) -> None:
    """After the rename: the record of `target` keeps only the digest of what is there now."""
    target = Path(target)
    try:
        found = read_record(target)
    except DataFormatError:
        found = None
    if found is not None and len(found.accepted) > 1:
        _write_record(target, [found.accepted[-1]], found.way_back)


def forget(path: str | os.PathLike) -> None:
    """Remove the record of `path` (the file is gone)."""
    record_path(path).unlink(missing_ok=True)


# ---- checking what is read ---------------------------------------------------------------------
def damage(path: str | os.PathLike, problem: str, way_back: str) -> DamagedFile:
    """The one line about a damaged file: it, what is wrong, and the way back."""
    path = Path(path)
    own = ACCEPT_OWN_EDIT.format(record=record_path(path))
    return DamagedFile(path, None, f"{problem}; {way_back} ({own})")


def _mismatch(path: Path, found: Record, digest: tuple[str, int], way_back: str | None) -> DamagedFile:
    crc, size = digest
    if size not in found.sizes():
        what = f"damaged: {size} bytes where {' or '.join(str(s) for s in sorted(found.sizes()))} were written"
    else:
        what = "damaged: its bytes differ from those written (CRC-32 " + crc + " where " + \
               " or ".join(c for c, _ in found.accepted) + " was recorded)"
    return damage(path, what, way_back or found.way_back)


class FileChanged(VideoTextError, OSError):
    """The file kept being replaced while it was read (a writer at work): one line, run again."""


_verified: set[tuple[int, ...]] = set()  # (device, inode, size, mtime_ns, record) of files verified whole


def read_verified(path: str | os.PathLike, way_back: str | None = None, attempts: int = 3) -> bytes:
    """The bytes of `path`, checked against its record as they are read (none: read as they are).
    A mismatch is a DataFormatError naming the file and the way back (`way_back`, else the one the
    writer recorded). A file replaced while it was read is read again."""
    path = Path(path)
    for _ in range(attempts):
        before = _record_bytes(path)
        with open(path, "rb") as handle:
            data = handle.read()
            stat = os.fstat(handle.fileno())
        if before is None:
            return data
        found = _decode_record(before, path)
        digest = digest_bytes(data)
        if found.matches(digest):
            _verified.add(_key(stat, before))
            return data
        if not _replaced(path, stat, before):
            raise _mismatch(path, found, digest, way_back)
    raise FileChanged(f"{path}: changed {attempts} times while it was read (a writer at work); run again when it "
                      f"is done")


def verify_file(path: str | os.PathLike, way_back: str | None = None, attempts: int = 3) -> None:
    """Check the whole file `path` against its record, once per process for each version of it (a
    file a library opens by name: HDF5). No record: nothing to check."""
    path = Path(path)
    for _ in range(attempts):
        before = _record_bytes(path)
        if before is None:
            return
        found = _decode_record(before, path)
        with open(path, "rb") as handle:
            stat = os.fstat(handle.fileno())
            if _key(stat, before) in _verified:
                return
            running = Running()
            while block := handle.read(BLOCK):
                running.update(block)
        if found.matches(running.value):
            _verified.add(_key(stat, before))
            return
        if not _replaced(path, stat, before):
            raise _mismatch(path, found, running.value, way_back)
    raise FileChanged(f"{path}: changed {attempts} times while it was read (a writer at work); run again when it "
                      f"is done")


class VerifyingReader:
    """A read-only binary file that hashes what is read from it; `finish()` reads what is left and
    checks the whole against the record (a reader that streams a file once: FAISS)."""

    def __init__(self, path: str | os.PathLike, way_back: str | None = None):
        self.path, self.way_back = Path(path), way_back
        self._before = _record_bytes(self.path)
        self.handle: BinaryIO = open(self.path, "rb")
        self.running = Running()

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        if self._before is not None:  # no record: nothing to hash for
            self.running.update(data)
        return data

    def finish(self) -> None:
        """Hash the rest and compare; a mismatch raises the one line (or FileChanged)."""
        if self._before is None:
            self.handle.close()
            return
        try:
            while block := self.handle.read(BLOCK):
                self.running.update(block)
            stat = os.fstat(self.handle.fileno())
        finally:
            self.handle.close()
        found = _decode_record(self._before, self.path)
        if found.matches(self.running.value):
            _verified.add(_key(stat, self._before))
            return
        if _replaced(self.path, stat, self._before):
            raise FileChanged(f"{self.path}: replaced while it was read (a writer at work); run again when it is "
                              f"done")
        raise _mismatch(self.path, found, self.running.value, self.way_back)

    def close(self) -> None:
        self.handle.close()


def _record_bytes(path: Path) -> bytes | None:
    try:
        return record_path(path).read_bytes()
    except FileNotFoundError:
        return None


def _key(stat: os.stat_result, record: bytes) -> tuple[int, int, int, int, int]:
    """One version of a file checked against one version of its record."""
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, zlib.crc32(record)


def _replaced(path: Path, stat: os.stat_result, record_before: bytes) -> bool:
    """Whether `path` or its record changed since they were read (a writer at work, not damage)."""
    try:
        now = path.stat()
    except FileNotFoundError:
        return True
    return (now.st_ino, now.st_mtime_ns) != (stat.st_ino, stat.st_mtime_ns) or _record_bytes(path) != record_before


def problem_of(path: str | os.PathLike) -> str | None:
    """The one line about `path` if its record says it is damaged (or the record is), else None."""
    try:
        verify_file(path)
    except DataFormatError as exc:
        return str(exc)
    return None


@dataclass
class TreeCheck:
    """What `check_tree` found under a folder."""

    checked: list[Path]  # files whose record was verified
    problems: list[str]  # one line per damaged file (or damaged record, or recorded file gone)


def check_tree(root: str | os.PathLike, skip: Iterable[str] = ()) -> TreeCheck:
    """Verify every digest recorded under `root` (hidden folders of half-done writes and `skip`
    folder names excluded): each damaged file, damaged record or recorded file now missing is one
    line naming it and the way back."""
    root = Path(root)
    skipped = set(skip)
    checked, problems = [], []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in skipped)
        for name in sorted(files):
            if not is_record(name):
                continue
            path = Path(folder) / name[1 : -len(SUFFIX)]
            if not path.is_file():
                try:
                    way_back = _decode_record((Path(folder) / name).read_bytes(), path).way_back
                except DataFormatError as exc:
                    problems.append(str(exc))
                    continue
                problems.append(f"{path}: missing, though a digest of it was recorded; {way_back}")
                continue
            problem = problem_of(path)
            checked.append(path)
            if problem is not None:
                problems.append(problem)
    return TreeCheck(checked, problems)


# ---- append-only logs: a digest on every line --------------------------------------------------
LINE_PREFIX = b'{"' + ALGORITHM.encode() + b'":"'  # {"crc32":"
_LINE = re.compile(rb'\{"' + ALGORITHM.encode() + rb'":"([0-9a-f]{8})"')
_HEAD = len(LINE_PREFIX) + 9  # the prefix, 8 hex digits and the closing quote


def json_line(record: Any, default: Any = str) -> bytes:
    """One log line (newline included): a JSON object led by the CRC-32 of the rest of the line;
    anything but a dict is written as plain JSON. `default` turns other values into JSON ones."""
    text = json.dumps(record, ensure_ascii=False, default=default)
    if not isinstance(record, dict):
        return text.encode("utf-8") + b"\n"
    rest = ("," + text[1:] if len(text) > 2 else "}").encode("utf-8")  # after the digest: `,…}` or `}`
    return LINE_PREFIX + f"{zlib.crc32(rest):08x}".encode() + b'"' + rest + b"\n"


def _near_prefix(raw: bytes) -> bool:
    """A line one byte away from a digest line's head: a digest line damaged there."""
    if len(raw) < _HEAD:
        return False
    wrong = sum(a != b for a, b in zip(raw[: len(LINE_PREFIX)], LINE_PREFIX))
    wrong += sum(chr(c) not in "0123456789abcdef" for c in raw[len(LINE_PREFIX) : _HEAD - 1])
    wrong += raw[_HEAD - 1] != ord('"')
    return wrong == 1


@dataclass
class Lines:
    """The records of a log, with the lines it skipped as torn and those found damaged."""

    records: list[Any]
    torn: list[int]  # 1-based numbers of torn lines (skipped)
    damaged: list[tuple[int, str]]  # (line number, what is wrong: "…, the file is damaged (…)")
    numbers: list[int] = field(default_factory=list)  # the line number of each record


def parse_json_lines(data: bytes) -> Lines:
    """Every record of a JSON-lines log, by the rules in the module docstring."""
    lines = data.split(b"\n")
    out = Lines([], [], [])
    digested = False
    for index, raw in enumerate(lines):
        number, last_open = index + 1, index == len(lines) - 1  # the last piece has no newline after it
        if not raw.strip():
            continue
        head = _LINE.match(raw)
        if head is not None:
            digested = True
            rest = raw[_HEAD:]
            if f"{zlib.crc32(rest):08x}".encode() == head.group(1):
                try:
                    record = json.loads(raw.decode("utf-8"))
                    record.pop(ALGORITHM, None)
                    out.records.append(record)
                    out.numbers.append(number)
                    continue
                except (ValueError, AttributeError) as exc:
                    out.damaged.append((number, f"not a JSON line, the file is damaged ({str(exc)[:80]})"))
                    continue
            if last_open and f"{zlib.crc32(rest[:-1]):08x}".encode() != head.group(1):
                out.torn.append(number)  # cut short by a killed writer (its newline lost: damage)
                continue
            out.damaged.append((number, "its digest does not match its text, the file is damaged"))
            continue
        if _near_prefix(raw):
            out.damaged.append((number, "its digest is damaged, the file is damaged"))
            continue
        if last_open and LINE_PREFIX.startswith(raw):
            out.torn.append(number)
            continue
        _plain_line(raw, number, digested and not last_open, out)
    return out


def _plain_line(raw: bytes, number: int, after_digests: bool, out: Lines) -> None:
    """A line without a digest (written before digests, or not a JSON object): parsed as such lines
    always were, a torn line skipped and damage named; among lines with digests, whose logs are
    never left with a torn line inside, a torn-looking line is damage."""
    try:
        if b"\0" in raw:
            raise ValueError("NUL bytes where text was written")
        out.records.append(json.loads(raw.decode("utf-8")))
        out.numbers.append(number)
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        if raw.lstrip().startswith(b"{") and b"\0" not in raw and _is_utf8(raw) and not after_digests:
            out.torn.append(number)
            return
        out.damaged.append((number, f"not a JSON line, the file is damaged ({' '.join(str(exc).split())[:120]})"))


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def torn_tail(data: bytes) -> int | None:
    """Where a torn last line starts (to cut it off before an append), or None when the log ends
    whole (a complete last line that only lacks its newline is kept)."""
    if not data or data.endswith(b"\n"):
        return None
    start = data.rfind(b"\n") + 1
    parsed = parse_json_lines(data[start:])
    return start if parsed.torn else None
