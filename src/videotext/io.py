"""Small I/O helpers shared by every module: atomic writes (with their digests, `videotext.digests`),
JSON-lines logs and failure logs, the writer lock, and room to write."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import re
import json
import os
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import IO, Any, Iterator

from videotext import digests
from videotext.errors import DataFormatError, VideoTextError


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, way_back: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only on success.

    Readers never see a half-written file: a crash leaves the old file (or none). With `way_back`
    (what a user does when the file is found damaged), the file's digest is recorded beside it
    (`videotext.digests`: staged before the rename, settled after it).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; give the file normal permissions
    try:
        yield tmp_path
        if way_back is not None:
            digests.stage(tmp_path, target, way_back)
        os.replace(tmp_path, target)
        if way_back is not None:
            digests.settle(target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", way_back: str | None = None, **kwargs: Any) -> Iterator[IO]:
    """Open a file for writing so that it appears at `path` whole or not at all (its digest recorded
    with `way_back`, `atomic_path`)."""
    with atomic_path(path, way_back) as tmp:
        with open(tmp, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())


def read_json_lines(path: str | os.PathLike, remedy: str | None = None) -> list[Any]:
    """Every JSON line of an append-only log (metrics.jsonl, failures.jsonl, transcripts) or of a file
    of lines written whole (with its digest beside it); [] when the file is missing. Each line carries
    its digest (`digests.json_line`; lines written before digests are read as they are). A torn last
    line (a writer killed mid-line) is skipped with a warning. A line that fails its digest, holds NUL
    bytes, is not UTF-8 or is not the start of a JSON object is damage: a DataFormatError naming the
    file and line, with `remedy` (the way back) appended."""
    path = Path(path)
    if not path.exists():
        return []
    lines = digests.parse_json_lines(digests.read_verified(path, remedy))  # a log written whole has a digest too
    if lines.damaged:
        number, problem = lines.damaged[0]
        raise DataFormatError(path, f"line {number}", problem + (f"; {remedy}" if remedy else ""))
    for number in lines.torn:
        warnings.warn(f"{path}:{number}: torn line skipped (its writer was stopped mid-line)", stacklevel=2)
    return lines.records


def append_json_line(path: str | os.PathLike, record: Any, sync: bool = False) -> None:
    """Append one JSON line with its digest (`digests.json_line`). A line torn by a killed writer
    at the end of the file is cut off first (it was never whole), so it neither swallows the new
    line nor leaves a torn line inside the log; a whole last line that lacks its newline is closed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab+") as handle:
        end = handle.seek(0, os.SEEK_END)
        head = b""
        if end:
            start = _last_line_start(handle, end)
            handle.seek(start)
            tail = handle.read()
            if not tail.endswith(b"\n"):
                if digests.torn_tail(tail) is not None:
                    handle.truncate(start)
                else:
                    head = b"\n"
        handle.write(head + digests.json_line(record))
        handle.flush()
        if sync:
            os.fsync(handle.fileno())


def _last_line_start(handle: IO[bytes], end: int, block: int = 1 << 16) -> int:
    """The offset where the last line of an open file starts (after its last-but-one newline)."""
    position = end - 1  # the last byte may be the newline that ends the last line
    while position > 0:
        start = max(0, position - block)
        handle.seek(start)
        found = handle.read(position - start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        position = start
    return 0


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 1, way_back: str | None = None) -> None:
    """Atomically write `obj` as JSON (its digest recorded with `way_back`, `atomic_path`)."""
    with atomic_open(path, "w", way_back, encoding="utf-8") as handle:
        json.dump(obj, handle, indent=indent, ensure_ascii=False)
        handle.write("\n")


@contextlib.contextmanager
def file_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive advisory lock on `path` (created if absent) across processes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


class FailureLog:
    """`failures.jsonl` for batch jobs: skip a broken item, record it, go on.

    Lines are appended as failures happen, under a lock, so ranks and shards may share
    the file. `compact()`, called when a job ends, keeps each (item, expert) once: from
    the latest run that recorded it (latest error wins), and not at all if this run
    `resolve`d it (it worked this time). So re-running a job over the same broken
    inputs does not pile up copies of the same failures.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.count = 0
        self.run = uuid.uuid4().hex[:12]  # tags this job's lines
        self._resolved: dict[str, set[str | None]] = {}
        self._earlier: set[str] | None = None  # items the file named before this run (read on first resolve)
        self.damaged: str | None = None  # what was found damaged in the file, said once

    @property
    def _lock_path(self) -> Path:
        return self.path.with_name(f".{self.path.name}.lock")

    def record(self, item: str, error: BaseException | str, **extra: Any) -> None:
        entry = {
            "item": item,
            "error": str(error),
            "type": type(error).__name__ if isinstance(error, BaseException) else "error",
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            **extra,
            "run": self.run,
        }
        with file_lock(self._lock_path):
            append_json_line(self.path, entry)
        self.count += 1

    def resolve(self, item: str, expert: str | None = None) -> None:
        """`item` (for `expert`) worked in this run: `compact` drops its earlier failures."""
        if self._earlier is None:
            self._earlier = {entry.get("item") for entry in self._entries()[1] if entry is not None}
        if item in self._earlier:
            self._resolved.setdefault(item, set()).add(expert)

    def compact(self) -> None:
        """Keep each (item, expert) from its latest run only; drop what this run resolved. Damaged
        lines are kept as they are (`damaged`); a torn one is dropped (its failure is met again)."""
        with file_lock(self._lock_path):
            lines, entries = self._entries()
            runs = [entry.get("run", f"line {i}") if entry else None for i, entry in enumerate(entries)]
            latest: dict[tuple[str, str | None], str | None] = {}
            for entry, run in zip(entries, runs):
                for expert in _subjects(entry) if entry else ():
                    latest[(entry["item"], expert)] = run
            for item, experts in self._resolved.items():
                for expert in experts:  # None resolves lines that name no expert
                    latest[(item, expert)] = None
            kept = []
            for line, entry, run in zip(lines, entries, runs):
                if entry is None:  # damaged, or not a failure: kept as it is; torn lines are not listed
                    kept.append(line)
                    continue
                experts = [e for e in _subjects(entry) if latest[(entry["item"], e)] == run]
                if experts and isinstance(entry.get("experts"), list) and experts != entry["experts"]:
                    line = digests.json_line({**entry, "experts": experts}).rstrip(b"\n")
                if experts:
                    kept.append(line)
            if kept != lines:
                with atomic_open(self.path, "wb") as handle:
                    handle.writelines(line + b"\n" for line in kept)

    def _entries(self) -> tuple[list[bytes], list[dict | None]]:
        """The file's lines (torn ones left out) and each one's failure (None where the line is
        damaged or names no item). A damaged log is said once (`damaged`) and the job goes on."""
        if not self.path.exists():
            return [], []
        data = self.path.read_bytes()
        parsed = digests.parse_json_lines(data)
        if parsed.damaged and self.damaged is None:
            number, problem = parsed.damaged[0]
            self.damaged = f"{self.path} [line {number}]: {problem}"
            warnings.warn(f"{self.damaged}; {FAILURES_WAY_BACK} (the job goes on, its damaged lines kept as they "
                          f"are)", stacklevel=3)
        by_number = dict(zip(parsed.numbers, parsed.records))
        torn = set(parsed.torn)
        lines: list[bytes] = []
        entries: list[dict | None] = []
        for number, raw in enumerate(data.split(b"\n"), 1):
            if not raw.strip() or number in torn:
                continue
            entry = by_number.get(number)
            lines.append(raw)
            entries.append(entry if isinstance(entry, dict) and "item" in entry else None)
        return lines, entries

    def read(self) -> list[dict]:
        return read_json_lines(self.path, FAILURES_WAY_BACK)


FAILURES_WAY_BACK = "delete it: the next run of the job records the failures it meets again"


def _subjects(entry: dict) -> list[str | None]:
    """The experts a failure line is about: its `experts` list, its `expert`, or [None]."""
    experts = entry.get("experts")
    if isinstance(experts, list) and experts:
        return list(experts)
    return [entry["expert"]] if "expert" in entry else [None]


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists on this machine (a lock or temp file naming a dead one is stale)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


class LockTimeout(VideoTextError):
    """Another process kept writing the same index or store for longer than the wait allowed."""


def _describe(holder: dict[str, Any]) -> str:
    return (f"pid {holder.get('pid', '?')} on {holder.get('host', '?')} ({holder.get('command', '?')}, "
            f"since {holder.get('started', '?')})")


@contextlib.contextmanager
def writer_lock(target: str | os.PathLike, what: str = "write", timeout: float = 600.0,
                say: Any = None) -> Iterator[None]:
    """One writer of `target` at a time, across processes: an advisory lock (flock) on
    `.NAME.lock` beside it, which names its holder (pid, host, command, start). A second writer
    says once whom it waits for (`say`, default stderr) and waits up to `timeout` seconds, then
    raises LockTimeout naming the holder. The kernel drops a flock with its process, so a lock
    left by a killed writer is free at once; its stale holder line is recognised and said.
    Not re-entrant: each writer takes it once (`videotext.apps.index_folder.build_index` for an
    index folder)."""
    import socket
    import sys

    target = Path(target)
    lock = target.parent / f".{target.name}.lock"
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    lock.parent.mkdir(parents=True, exist_ok=True)
    handle = open(lock, "a+", encoding="utf-8")
    try:
        deadline, waiting = time.monotonic() + max(0.0, timeout), False
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _read_holder(lock)
                if time.monotonic() >= deadline:
                    raise LockTimeout(f"{target}: another {what} is under way ({_describe(holder)}); waited "
                                      f"{timeout:.0f} s. Run again when it has finished (or stop that process)")
                if not waiting:
                    say(f"{target}: waiting for {_describe(holder)} to finish its {what}")
                    waiting = True
                time.sleep(0.2)
        stale = _read_holder(lock)
        if stale.get("pid") and not process_alive(int(stale["pid"])):
            say(f"{target}: the last {what} ({_describe(stale)}) ended without finishing; taking over")
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv)[:200],
                                 "started": time.strftime("%Y-%m-%dT%H:%M:%S")}))
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()  # released cleanly: no holder left to call stale
            handle.flush()
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    finally:
        handle.close()


def _read_holder(lock: Path) -> dict[str, Any]:
    try:
        holder = json.loads(lock.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


# what the writers say when a write hits a full disk, a quota or a file-size limit: Python's OSError
# (ENOSPC, EFBIG, EDQUOT), and the messages of libraries that wrap it (FAISS, HDF5, safetensors,
# torch.save's zip writer, numpy's short write)
_NO_SPACE = re.compile(r"No space left|File too large|Disk quota|errno = (27|28|122)\b|os error (27|28|122)\b|"
                       r"requested and \d+ written|unexpected pos \d+ vs \d+|index_write\.cpp")


def out_of_space(exc: BaseException) -> bool:
    """Whether `exc` is a write that found no room (a full disk, a quota, a file-size limit)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return True
    return bool(_NO_SPACE.search(str(exc)))


H5_OVERHEAD = 64 * 1024  # an HDF5 file's header, groups and attributes, generously


def ensure_room(path: str | os.PathLike, nbytes: int) -> None:
    """Raise OSError (EFBIG or ENOSPC, naming `path`) when a file of about `nbytes` cannot be
    written at `path`: over this process's file-size limit (RLIMIT_FSIZE) or the free space of its
    file system. Called before HDF5 writes, whose library does not recover from a failed write
    (the process was seen to crash with SIGSEGV), so that a full disk is one error line."""
    import resource

    path = Path(path)
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY and nbytes > limit:
        raise OSError(errno.EFBIG, f"File too large: about {nbytes} bytes to write, over the file-size limit of "
                                   f"{limit} bytes", str(path))
    folder = path if path.is_dir() else path.parent
    stats = os.statvfs(folder)
    free = stats.f_bavail * stats.f_frsize
    if nbytes > free:
        raise OSError(errno.ENOSPC, f"No space left on device: about {nbytes} bytes to write, {free} free",
                      str(path))
