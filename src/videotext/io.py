"""Small I/O helpers shared by every module: atomic writes and failure logs."""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only on success.

    Readers never see a half-written file: a crash leaves the old file (or none).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; give the file normal permissions
    try:
        yield tmp_path
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs: Any) -> Iterator[IO]:
    """Open a file for writing so that it appears at `path` whole or not at all."""
    with atomic_path(path) as tmp:
        with open(tmp, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 1) -> None:
    """Atomically write `obj` as JSON."""
    with atomic_open(path, "w", encoding="utf-8") as handle:
        json.dump(obj, handle, indent=indent, ensure_ascii=False)
        handle.write("\n")


class FailureLog:
    """Append-only `failures.jsonl` for batch jobs: skip a broken item, record it, go on."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.count = 0

    def record(self, item: str, error: BaseException | str, **extra: Any) -> None:
        entry = {
            "item": item,
            "error": str(error),
            "type": type(error).__name__ if isinstance(error, BaseException) else "error",
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            **extra,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry, ensure_ascii=False) + "\n")
        self.count += 1

    def read(self) -> list[dict]:
        if not self.path.exists():
            return []
        with open(self.path, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]
