"""FeatureStore: pre-extracted per-expert features, one HDF5 file per expert.

Layout of a store folder::

    <root>/<expert>.h5            the store proper, one file per expert
        attrs: format="videotext-features", version, expert, dim, dtype, config (JSON)
        /<quoted key>/            one group per video (key quoted: "/" → "%2F", "%" → "%25")
            features   [T, D]     float16 by default (float32 when asked or when a value
                                  overflows float16); always returned as float32
            timestamps [T]        float64 seconds, the start of each time step
            attrs: key (the original key), step (seconds per step; 0 = irregular, e.g.
                   words), missing (True when the expert has nothing for this video:
                   no audio track, no speech; MMT masks such experts out)
    <root>/.parts/<expert>/*.h5   finished batches not merged yet (same layout)
    <root>/.chunks/<expert>/<quoted key>/chunk-*.npz
                                  finished stretches of a long video whose extraction is
                                  under way (`extract.chunk_seconds`); the video's entry is
                                  written from them once its last stretch is done
    <root>/failures.jsonl         videos an extraction or import had to skip
    <root>/sources.json           key -> content fingerprint of the media file the key's
                                  features came from (written by `index build`; a file
                                  changed in place has its features discarded and re-made)

Crash safety: `<expert>.h5` is never opened for writing in place. A `FeatureWriter`
writes each batch of finished videos to a new part file (via temp file + rename, so a
part is whole or absent), and `commit()` merges parts into a copy of the main file
that then atomically replaces it. A run killed at any moment leaves the previous main
file intact plus whole parts, which the next run counts as done and merges.

Reading: `FeatureStore.get` keeps one read handle per expert file, opened lazily in
the process that reads. Handles are dropped after `fork()` (the pid is checked) and
when the store is pickled, so a store can be handed to DataLoader workers.

Features made elsewhere (COOT, MMT, folders of arrays) come in through
`videotext.data.feature_import.import_features`.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Iterator
from urllib.parse import quote, unquote

import h5py
import numpy as np

from videotext import digests
from videotext.errors import DataFormatError
from videotext.io import H5_OVERHEAD, atomic_path, ensure_room, file_lock, process_alive, write_json

FORMAT = "videotext-features"
VERSION = 1
FLOAT16_MAX = float(np.finfo(np.float16).max)
DTYPES = ("float16", "float32")
SOURCES = "sources.json"  # key -> fingerprint of the media file its features came from
SOURCES_WAY_BACK = "delete it: the next index build re-hashes the videos"


def encode_key(key: str) -> str:
    """An HDF5-safe group name for a video key (reversible with `decode_key`)."""
    if not key:
        raise ValueError("feature keys must be non-empty")
    name = quote(key, safe=" !#$&'()*+,-.:;<=>?@[]^_`{|}~")
    if name in (".", ".."):
        name = name.replace(".", "%2E")
    return name


def decode_key(name: str) -> str:
    return unquote(name)


# what a user does about a damaged feature file (recorded with its digest, `videotext.digests`)
WAY_BACK = ("delete it and run the extraction again (`videotext extract`, or `videotext index build`, which "
            "extracts what is missing): only the videos it held are extracted again")


def open_h5(path: Path, mode: str = "r") -> h5py.File:
    """An HDF5 file, a `DataFormatError` naming it when it cannot be opened. Opened to read, it is
    first checked against the digest recorded when it was written (once per process)."""
    if mode == "r":
        digests.verify_file(path, WAY_BACK)
    try:
        return h5py.File(path, mode)
    except OSError as exc:
        raise DataFormatError(path, None, f"damaged feature file, cannot open it as HDF5 ({exc}); {WAY_BACK}") from None


class FeatureStore:
    """Read access to a folder of per-expert feature files (see the module docstring)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self._handles: dict[str, h5py.File] = {}
        self._pid = os.getpid()

    # --- files and handles -------------------------------------------------------------
    def path(self, expert: str) -> Path:
        return self.root / f"{expert}.h5"

    def parts_dir(self, expert: str) -> Path:
        return self.root / ".parts" / expert

    def _file(self, expert: str) -> h5py.File:
        if self._pid != os.getpid():  # forked: never touch the parent's HDF5 handles
            self._handles, self._pid = {}, os.getpid()
        handle = self._handles.get(expert)
        if handle is None or not handle.id.valid:
            path = self.path(expert)
            if not path.is_file():
                raise KeyError(f"no features for expert {expert!r} in {self.root} (have: {self.experts})")
            handle = open_h5(path)
            if handle.attrs.get("format") != FORMAT:
                handle.close()
                raise DataFormatError(path, "format", f"not a {FORMAT} file")
            self._handles[expert] = handle
        return handle

    def close(self) -> None:
        """Close all read handles (they reopen on the next read)."""
        if self._pid == os.getpid():
            for handle in self._handles.values():
                with contextlib.suppress(Exception):
                    handle.close()
        self._handles = {}

    refresh = close  # after a merge replaced a file, reopen to see the new content

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["root"])

    def __enter__(self) -> "FeatureStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FeatureStore({str(self.root)!r}, experts={self.experts})"

    # --- queries -----------------------------------------------------------------------
    @property
    def experts(self) -> list[str]:
        """Experts with a merged file in the store, sorted."""
        if not self.root.is_dir():
            return []
        return sorted(p.stem for p in self.root.glob("*.h5") if not p.name.startswith("."))

    def keys(self, expert: str) -> list[str]:
        return [decode_key(name) for name in self._file(expert).keys()]

    def has_expert(self, expert: str) -> bool:
        return self.path(expert).is_file()

    def has(self, expert: str, key: str) -> bool:
        if not self.path(expert).is_file():
            return False
        return encode_key(key) in self._file(expert)

    def __contains__(self, item: tuple[str, str]) -> bool:
        return self.has(*item)

    def _group(self, expert: str, key: str) -> h5py.Group:
        handle = self._file(expert)
        try:
            return handle[encode_key(key)]
        except KeyError:
            raise KeyError(f"video {key!r} not in {self.path(expert)}") from None

    def get(self, expert: str, key: str, rows: slice | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(features float32 [T, D], timestamps float64 [T]) of one video; `rows` reads only
        those steps (a clip of a long video without loading the whole video)."""
        group = self._group(expert, key)
        rows = slice(None) if rows is None else rows
        features = group["features"][rows].astype(np.float32, copy=False)
        return features, group["timestamps"][rows]

    def stored(self, expert: str, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(features [T, D] in the dtype they are stored in, timestamps float64 [T]): for copying
        them elsewhere (shards) without widening float16 to float32."""
        group = self._group(expert, key)
        return group["features"][()], group["timestamps"][()]

    def stored_nbytes(self, expert: str, key: str) -> tuple[int, int]:
        """Bytes of one video's stored features and of its timestamps, without reading them."""
        group = self._group(expert, key)
        return tuple(int(np.prod(group[name].shape)) * group[name].dtype.itemsize for name in ("features", "timestamps"))

    def timestamps(self, expert: str, key: str) -> np.ndarray:
        """Step start times (seconds, float64 [T]) of one video, without its features."""
        return self._group(expert, key)["timestamps"][()]

    def is_missing(self, expert: str, key: str) -> bool:
        """True when the expert had nothing for this video (e.g. no audio track)."""
        return bool(self._group(expert, key).attrs.get("missing", False))

    def entry(self, expert: str, key: str) -> dict[str, Any]:
        """Per-video attributes: step (s), missing, and anything the extractor added."""
        return {k: _plain(v) for k, v in self._group(expert, key).attrs.items()}

    def info(self, expert: str) -> dict[str, Any]:
        """File attributes: expert, dim, dtype, version and the extractor config (parsed)."""
        attrs = {k: _plain(v) for k, v in self._file(expert).attrs.items()}
        attrs["config"] = json.loads(attrs.get("config") or "{}")
        return attrs

    def dim(self, expert: str) -> int:
        return int(self._file(expert).attrs["dim"])

    def __len__(self) -> int:
        return len(self.experts)

    def items(self, expert: str) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
        for key in self.keys(expert):
            yield (key, *self.get(expert, key))

    # --- media fingerprints and stale entries ------------------------------------------
    def sources(self) -> dict[str, dict[str, Any]]:
        """The fingerprint (`data.media_files.fingerprint`) of each key's media file when its
        features were made for an index: key -> {"hash", "size", "mtime_ns"} ({} when none)."""
        path = self.root / SOURCES
        try:
            record = json.loads(digests.read_verified(path, SOURCES_WAY_BACK)) if path.is_file() else {}
        except ValueError as exc:
            if isinstance(exc, DataFormatError):
                raise
            raise DataFormatError(path, None, "not JSON (delete it: the next index build re-hashes the videos)") from None
        return record if isinstance(record, dict) else {}

    def record_sources(self, fingerprints: dict[str, dict[str, Any]]) -> None:
        """Merge `fingerprints` (key -> fingerprint) into the store's record (atomic, locked)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with file_lock(self.root / ".sources.lock"):
            write_json(self.root / SOURCES, {**self.sources(), **fingerprints}, way_back=SOURCES_WAY_BACK)

    def discard(self, keys: Iterable[str]) -> int:
        """Remove `keys` from every expert: the merged file, finished parts and staged chunks
        of a long video (each file rewritten aside, then renamed over the old one, so a crash
        leaves it whole). Used when a video's file changed in place: its features are stale
        and must be extracted again. Returns how many (expert, key) entries were removed."""
        names = {encode_key(key) for key in keys}
        removed = 0
        if not names:
            return 0
        experts = {p.stem for p in self.root.glob("*.h5") if not p.name.startswith(".")}
        experts |= {p.name for p in (self.root / ".parts").glob("*") if p.is_dir()}
        self.close()
        for expert in sorted(experts):
            with file_lock(self.root / f".{expert}.lock"):
                for path in [self.path(expert), *sorted(self.parts_dir(expert).glob("part-*.h5"))]:
                    removed += _rewrite_without(path, names) if path.is_file() else 0
            for name in names:
                shutil.rmtree(self.root / ".chunks" / expert / name, ignore_errors=True)
        self.close()
        return removed

    # --- writing -----------------------------------------------------------------------
    def writer(
        self, expert: str, dim: int, config: dict[str, Any] | None = None, *,
        dtype: str = "float16", flush_every: int = 64, overwrite: bool = False,
    ) -> "FeatureWriter":
        """A crash-safe writer for one expert (see `FeatureWriter`)."""
        return FeatureWriter(self, expert, dim, config, dtype=dtype, flush_every=flush_every, overwrite=overwrite)


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.generic):
        return value.item()
    return value


def _config_json(config: dict[str, Any] | None) -> str:
    return json.dumps(config or {}, sort_keys=True, default=str)


class FeatureWriter:
    """Adds videos to one expert of a store without ever risking the existing file.

    `add()` buffers results; every `flush_every` videos (and on `flush()`) the buffer
    becomes a new part file (temp + rename); `commit()` merges all parts into the
    expert file by copy + atomic replace. `done_keys()` counts merged and part entries,
    which is what makes extraction resumable. Several processes may write parts at
    once (names are unique); merges take a file lock.
    """

    def __init__(
        self, store: FeatureStore, expert: str, dim: int, config: dict[str, Any] | None = None, *,
        dtype: str = "float16", flush_every: int = 64, overwrite: bool = False,
    ):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
        self.store, self.expert, self.dim, self.dtype = store, expert, int(dim), dtype
        self.config = _config_json(config)
        self.flush_every = max(1, int(flush_every))
        self.buffer: list[tuple[str, np.ndarray, np.ndarray, dict[str, Any]]] = []
        self.written = 0
        store.root.mkdir(parents=True, exist_ok=True)
        self.parts = store.parts_dir(expert)
        _clean_part_temps(self.parts)
        if overwrite:
            store.close()
            store.path(expert).unlink(missing_ok=True)
            digests.forget(store.path(expert))
            shutil.rmtree(self.parts, ignore_errors=True)
        self._check_compatible()

    # --- compatibility with what is already there ---------------------------------------
    def _check_compatible(self) -> None:
        for path in [self.store.path(self.expert), *self._part_files()]:
            if not path.is_file():
                continue
            with open_h5(path) as handle:
                attrs = handle.attrs
                if attrs.get("format") != FORMAT:
                    raise DataFormatError(path, "format", f"not a {FORMAT} file")
                if int(attrs["dim"]) != self.dim:
                    raise DataFormatError(
                        path, "dim", f"has dimension {int(attrs['dim'])}, the extractor gives {self.dim}; "
                        "use another output folder or overwrite=True"
                    )
                if _plain(attrs.get("config", "{}")) != self.config:
                    raise DataFormatError(
                        path, "config", f"was made with another configuration ({_plain(attrs.get('config'))}, "
                        f"now {self.config}); use another output folder or overwrite=True"
                    )

    def _part_files(self) -> list[Path]:
        return sorted(self.parts.glob("part-*.h5")) if self.parts.is_dir() else []

    def done_keys(self) -> set[str]:
        """Keys already stored: merged into the expert file or in a finished part."""
        keys: set[str] = set()
        for path in [self.store.path(self.expert), *self._part_files()]:
            if path.is_file():
                with open_h5(path) as handle:
                    keys.update(decode_key(name) for name in handle.keys())
        return keys | {item[0] for item in self.buffer}

    # --- adding ------------------------------------------------------------------------
    def add(
        self, key: str, features: np.ndarray, timestamps: np.ndarray, *,
        step: float = 0.0, missing: bool = False, **attrs: Any,
    ) -> None:
        """Queue one video's features [T, D] and timestamps [T] (seconds, step starts)."""
        features = np.asarray(features, dtype=np.float32)
        timestamps = np.asarray(timestamps, dtype=np.float64).reshape(-1)
        where = self.store.path(self.expert)
        if features.ndim != 2 or features.shape[1] != self.dim:
            raise DataFormatError(where, key, f"features must be [T, {self.dim}], got {list(features.shape)}")
        if timestamps.shape[0] != features.shape[0]:
            raise DataFormatError(where, key, f"{features.shape[0]} feature rows but {timestamps.shape[0]} timestamps")
        if not (np.all(np.isfinite(features)) and np.all(np.isfinite(timestamps))):
            raise DataFormatError(where, key, "features or timestamps contain NaN or infinity")
        encode_key(key)
        self.buffer.append((key, features, timestamps, {"step": float(step), "missing": bool(missing), **attrs}))
        if len(self.buffer) >= self.flush_every:
            self.flush()

    def add_pieces(
        self, key: str, pieces: Any, *, step: float = 0.0, missing: bool = False, **attrs: Any,
    ) -> Path:
        """Write one video given as consecutive pieces straight to its own part file, one piece
        in memory at a time: `pieces()` returns an iterable of (features [t, D], timestamps [t])
        and is called twice (a first pass sizes the entry and picks its dtype)."""
        self.flush()
        rows, peak = 0, 0.0
        for features, timestamps in pieces():
            features = np.asarray(features, dtype=np.float32)
            where = self.store.path(self.expert)
            if features.ndim != 2 or features.shape[1] != self.dim or len(timestamps) != len(features):
                raise DataFormatError(where, key, f"piece of shape {list(features.shape)} with {len(timestamps)} "
                                      f"timestamps; expected [t, {self.dim}] and t timestamps")
            if not (np.all(np.isfinite(features)) and np.all(np.isfinite(timestamps))):
                raise DataFormatError(where, key, "features or timestamps contain NaN or infinity")
            rows += len(features)
            peak = max(peak, float(np.abs(features).max()) if features.size else 0.0)
        store_dtype = "float32" if self.dtype == "float16" and peak > FLOAT16_MAX else self.dtype
        target = self._new_part()
        ensure_room(target, H5_OVERHEAD + rows * (self.dim * np.dtype(store_dtype).itemsize + 8))
        with atomic_path(target, WAY_BACK) as tmp:
            with h5py.File(tmp, "w") as handle:
                self._write_header(handle)
                group = handle.create_group(encode_key(key))
                values = group.create_dataset("features", shape=(rows, self.dim), dtype=store_dtype)
                stamps = group.create_dataset("timestamps", shape=(rows,), dtype=np.float64)
                row = 0
                for features, timestamps in pieces():
                    values[row : row + len(features)] = np.asarray(features, dtype=np.float32).astype(store_dtype)
                    stamps[row : row + len(features)] = np.asarray(timestamps, dtype=np.float64)
                    row += len(features)
                group.attrs["key"] = key
                for name_, value in {"step": float(step), "missing": bool(missing), **attrs}.items():
                    group.attrs[name_] = value
            _fsync(tmp)
        self.written += 1
        return target

    def _new_part(self) -> Path:
        self.parts.mkdir(parents=True, exist_ok=True)
        name = f"part-{time.time_ns():020d}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.h5"
        return self.parts / name

    def flush(self) -> Path | None:
        """Write the buffered videos to a new part file (whole or not at all)."""
        if not self.buffer:
            return None
        target = self._new_part()
        ensure_room(target, H5_OVERHEAD + sum(np.asarray(f).size * 4 + np.asarray(t).size * 8 + 4096
                                              for _, f, t, _ in self.buffer))
        with atomic_path(target, WAY_BACK) as tmp:
            with h5py.File(tmp, "w") as handle:
                self._write_header(handle)
                for key, features, timestamps, attrs in self.buffer:
                    _write_entry(handle, key, features, timestamps, attrs, self.dtype)
            _fsync(tmp)
        self.written += len(self.buffer)
        self.buffer = []
        return target

    def _write_header(self, handle: h5py.File) -> None:
        handle.attrs.update(
            {"format": FORMAT, "version": VERSION, "expert": self.expert, "dim": self.dim,
             "dtype": self.dtype, "config": self.config}
        )

    # --- merging -----------------------------------------------------------------------
    def commit(self) -> int:
        """Flush, then merge every part into `<expert>.h5` atomically. Returns videos merged."""
        self.flush()
        with file_lock(self.store.root / f".{self.expert}.lock"):
            _clean_main_temps(self.store.root, self.expert)
            parts = self._part_files()
            if not parts:
                return 0
            main = self.store.path(self.expert)
            merged = 0
            ensure_room(main, H5_OVERHEAD + (main.stat().st_size if main.is_file() else 0)
                        + sum(part.stat().st_size for part in parts))
            with atomic_path(main, WAY_BACK) as tmp:
                if main.is_file():
                    digests.verify_file(main, WAY_BACK)  # never carry damage into the merged file
                    shutil.copyfile(main, tmp)
                    handle = h5py.File(tmp, "a")
                else:
                    handle = h5py.File(tmp, "w")
                    self._write_header(handle)
                with handle:
                    for part in parts:
                        with open_h5(part) as src:
                            for name in src.keys():
                                if name in handle:
                                    del handle[name]
                                src.copy(src[name], handle, name=name)
                                merged += 1
                _fsync(tmp)
                self.store.close()  # readers in this process reopen the new file
            _fsync_dir(self.store.root)
            for part in parts:  # merged parts are only removed once the new file is in place
                part.unlink(missing_ok=True)
                digests.forget(part)
            return merged

    def __enter__(self) -> "FeatureWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.commit()


def _write_entry(
    handle: h5py.File, key: str, features: np.ndarray, timestamps: np.ndarray, attrs: dict[str, Any], dtype: str
) -> None:
    name = encode_key(key)
    if name in handle:
        del handle[name]
    group = handle.create_group(name)
    store_dtype = dtype
    if dtype == "float16" and features.size and float(np.abs(features).max()) > FLOAT16_MAX:
        store_dtype = "float32"  # keep values float16 cannot hold
    group.create_dataset("features", data=features.astype(store_dtype))
    group.create_dataset("timestamps", data=timestamps)
    group.attrs["key"] = key
    for name_, value in attrs.items():
        group.attrs[name_] = value


def _rewrite_without(path: Path, names: set[str]) -> int:
    """Rewrite the HDF5 file `path` without the groups `names` (copy aside + rename); returns
    how many it held."""
    with open_h5(path) as handle:
        present = [name for name in handle.keys() if name in names]
    if not present:
        return 0
    ensure_room(path, H5_OVERHEAD + path.stat().st_size)
    with atomic_path(path, WAY_BACK) as tmp:
        with open_h5(path) as src, h5py.File(tmp, "w") as dst:
            dst.attrs.update(dict(src.attrs))
            for name in src.keys():
                if name not in names:
                    src.copy(src[name], dst, name=name)
        _fsync(tmp)
    return len(present)


def _fsync(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _clean_part_temps(folder: Path) -> None:
    """Remove half-written part files left by killed writers of this host.

    Part names carry host and pid (`part-<ns>-<host>-<pid>-<id>.h5`, temp copies
    `.part-….h5.<random>.tmp`), so only temps of dead processes are removed.
    """
    if not folder.is_dir():
        return
    host = socket.gethostname()
    for tmp in folder.glob(".part-*.tmp"):
        fields = tmp.name[1:].split("-")
        if len(fields) < 5 or "-".join(fields[2:-2]) != host or not fields[-2].isdigit():
            continue
        if not process_alive(int(fields[-2])):
            tmp.unlink(missing_ok=True)


def _clean_main_temps(root: Path, expert: str) -> None:
    """Remove temp copies of `<expert>.h5` left by a killed merge (call under the lock)."""
    for tmp in root.glob(f".{expert}.h5.*.tmp"):
        tmp.unlink(missing_ok=True)



def store_equal(a: FeatureStore, b: FeatureStore, experts: Iterable[str] | None = None) -> bool:
    """True when two stores hold the same keys, features, timestamps and flags."""
    for expert in experts or sorted(set(a.experts) | set(b.experts)):
        if a.has_expert(expert) != b.has_expert(expert):
            return False
        if sorted(a.keys(expert)) != sorted(b.keys(expert)):
            return False
        for key in a.keys(expert):
            fa, ta = a.get(expert, key)
            fb, tb = b.get(expert, key)
            if not (np.array_equal(fa, fb) and np.array_equal(ta, tb) and a.is_missing(expert, key) == b.is_missing(expert, key)):
                return False
    return True

