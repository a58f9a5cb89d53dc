"""A served index that follows its folder: each published version is loaded whole in the
background and swapped in between requests, so a request is answered from one version only.

A build marks its folder complete by writing `published.json` last: after the vectors, the
entries, the exported query encoder and the text channels (`--speech`, `--text`). A FAISS
folder is replaced whole by a rename (`Index.save`), and the new folder carries no marker until
its build has written everything, so a version is never seen half written; a Milvus folder names
the collection its build put behind the alias, and each version opens pinned to it (`search.milvus`). `LiveIndex` polls the
marker; when it names another version it opens that folder (its store, text channels and query
side) beside the one being served, checks that the marker did not move while
it read, and swaps one reference. Each request takes that reference once (`snapshot`) and reads
only it. A load that fails (a rename under way, a folder being written) keeps the served version
and is tried again at the next poll.
"""
from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from videotext.errors import VideoTextError
from videotext.io import write_json

PUBLISHED = "published.json"
UNPUBLISHED = "unpublished"  # the version of a folder built before builds wrote the marker

log = logging.getLogger("videotext.search")


def publish(folder: str | Path) -> str:
    """Mark the index folder complete (the last write of a build); returns the new version."""
    version = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    write_json(Path(folder) / PUBLISHED, {"version": version, "published": time.time()})
    return version


def published_version(folder: str | Path) -> str | None:
    """The version the folder's marker names; None while there is none (a build under way)."""
    try:
        record = json.loads((Path(folder) / PUBLISHED).read_text(encoding="utf-8"))
        return str(record["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True)
class Snapshot:
    """One version of a served index: everything a request reads."""

    version: str
    searchable: Any  # the folder opened for search (`videotext.apps.index_folder.SearchableIndex`)
    extra: dict[str, Any] = field(default_factory=dict)  # per-version caches (thumbnails)

    @property
    def index(self) -> Any:
        """The vector store of this version."""
        return self.searchable.index


class LiveIndex:
    """The served version of the index folder `folder`, swapped when a new one is published.

    `load(folder, previous)` builds a `Snapshot` (raising on a folder that cannot be read);
    `interval` seconds between polls of the marker (0: never swap). The first load happens here
    and its errors reach the caller."""

    def __init__(self, folder: str | Path, load: Callable[[Path, Snapshot | None, str], Snapshot],
                 interval: float = 1.0):
        self.folder = Path(folder)
        self._load = load
        self.interval = float(interval)
        self.snapshot = load(self.folder, None, published_version(self.folder) or UNPUBLISHED)
        self.swaps = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "LiveIndex":
        """Poll in a daemon thread (nothing to stop at exit)."""
        if self.interval > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._poll, name="videotext-live-index", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            self.refresh()

    def refresh(self) -> bool:
        """Swap in the published version if it is another one and loads whole; True if swapped."""
        version = published_version(self.folder)
        if version is None or version == self.snapshot.version:
            return False
        try:
            fresh = self._load(self.folder, self.snapshot, version)
        except (VideoTextError, OSError, ValueError, KeyError, RuntimeError) as exc:  # a rename or a write under way
            log.info("index %s: version %s not loaded yet (%s); serving %s", self.folder, version, exc,
                     self.snapshot.version)
            return False
        if published_version(self.folder) != version:  # republished while it was read: take the next one
            return False
        self.snapshot = fresh
        self.swaps += 1
        log.info("index %s: now serving version %s (%d entries)", self.folder, version, len(fresh.index))
        return True
