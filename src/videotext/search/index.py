"""The vector index behind `videotext index build` / `videotext search`.

`Index` keeps L2-normalised float32 embeddings (so inner product = cosine) in FAISS,
beside one `Entry` per vector (a whole video, or a clip `[start, end]` of one).

Kinds (`kind=`), and why:

- ``"flat"``  exact `IndexFlatIP`; no training, no recall loss; cost linear in size.
- ``"hnsw"``  `IndexHNSWFlat` (inner product): sub-linear search and incremental adds
  with no training; recall depends on the data (bench/index.py: ≥0.99 recall@10 on
  embedding-like vectors, far less on isotropic random 256-d ones, the worst case). FAISS cannot delete from HNSW, so removed vectors
  become tombstones filtered out at search time (`IDSelector`); once they exceed
  `compact_ratio` of the graph, it is rebuilt from the live vectors.
- ``"ivf"``   `IndexIVFFlat`, k-means trained on the vectors present when it is built
  (nlist ≈ 4·sqrt(n), or `nlist=`); later adds reuse those centroids, `rebuild()` retrains.
- ``"ivfpq"`` `IndexIVFPQ` (~dim/4 bytes per vector): for indexes too big for memory;
  scores and `embeddings_for` are approximate (PQ-decoded) there.
- ``"auto"``  (default) flat up to `auto_threshold` vectors (40 000), HNSW above. From
  bench/index_scale.py on 2 shared cores: exact search costs ~47 ns per 256-d vector
  per query (p50 2.6 ms at 50 000, 47 ms at 10^6), so up to ~40 000 vectors it stays
  under 2 ms and needs no graph. HNSW keeps M = 32, efConstruction = 100, efSearch = 128:
  on 10^6 embedding-like (clustered) vectors a lighter graph (M = 16, efConstruction =
  64) already finds 99.2 % of the exact top 10 at efSearch 32 (p50 0.13 ms) and 100 %
  at efSearch 64 (p50 0.16 ms; built in 300 s, +1.5 GB resident), but on isotropic
  random vectors (20 000 × 64, tests/search/test_index.py) it drops to 0.76 where the
  defaults reach >= 0.95; data without structure is where recall is lost, so the
  defaults are sized for it. The choice is made whenever the index is (re)built: at the first `add`, on `rebuild()`, and once, automatically,
  when an `add` takes an auto-flat index past the threshold.

Ids: every entry gets an internal int64 label (`IndexIDMap2` / IVF ids), so adds and
removals never renumber anything. Adding an id that already exists *replaces* it
(upsert: re-indexing a changed video just adds it again); repeating an id inside one
`add` call is an error. Removing an unknown id is a no-op (deletions are idempotent).

Re-scoring parts: methods whose score is not one dot product (MMT's mixture weights,
ToCo's cross-encoder) keep, per entry, the parts of their video embedding that their own
scoring needs (`add(..., parts={"experts": [N, M, D], ...})`). The index shortlists by
the dot product; `parts_for(ids)` hands those parts back to re-score the shortlist
(`LoadedModel.search`). They follow adds, removals and save/load (`parts.npz`).

On disk (`save` / `load`): index.json (settings), index.faiss, entries.parquet (one
row per entry: 10^6 entries save and load in seconds, bench/index_scale.py) and, with
re-scoring parts, parts.npz. Folders of format version 1 (entries.jsonl) still load.

Not thread-safe for writes: do not `add`/`remove` while another thread searches.
"""
from __future__ import annotations

import contextlib
import gc
import io
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import faiss
import numpy as np

from videotext.digests import BLOCK, DamagedFile, VerifyingReader, read_verified
from videotext.errors import DataFormatError, VideoTextError
from videotext.io import atomic_path, write_json
from videotext.search.entries import FORMAT, Entry, Hit, as_matrix
from videotext.search.filters import entry_fields, matches, parse_filter
from videotext.search.moment_track import TRACK_FOLDER
from videotext.search.query_encoder import QUERY_FOLDER, SENTENCE_FOLDER
from videotext.search.milvus import DEFAULT_COLLECTION, STORE as MILVUS_STORE, MilvusIndex, is_milvus_uri, is_server_uri

VERSION = 2  # 2: entries in entries.parquet (1: entries.jsonl, still read)
ENTRIES, OLD_ENTRIES = "entries.parquet", "entries.jsonl"
# Folders a build writes beside the vectors (the exported query and sentence encoders,
# `videotext.search.query_encoder`; the moment track, `videotext.search.moment_track`) that a later
# save of the same folder keeps.
CARRIED = (QUERY_FOLDER, SENTENCE_FOLDER, TRACK_FOLDER)
KINDS = ("auto", "flat", "hnsw", "ivf", "ivfpq")
AUTO_THRESHOLD = 40_000  # exact search stays under 2 ms per query up to here (module docstring)


def _ivf_nlist(n: int) -> int:
    """≈ 4·sqrt(n) lists, but at least 39 training points per centroid (FAISS's minimum)."""
    return max(1, min(int(4 * math.sqrt(n)), n // 39))


class Index:
    """Embeddings + entries, searchable by cosine similarity. See the module docstring."""

    def __init__(
        self,
        dim: int,
        model: str = "",
        kind: str = "auto",
        metric: str = "ip",
        *,
        auto_threshold: int = AUTO_THRESHOLD,
        hnsw_m: int = 32,
        ef_construction: int = 100,
        ef_search: int = 128,
        nprobe: int | None = None,
        compact_ratio: float = 0.25,
        nlist: int | None = None,
    ):
        if not isinstance(dim, int) or dim <= 0:
            raise VideoTextError(f"index dim must be a positive integer, got {dim!r}")
        if kind not in KINDS:
            raise VideoTextError(f"unknown index kind {kind!r}; expected one of {', '.join(KINDS)}")
        if metric != "ip":
            raise VideoTextError(f"unknown index metric {metric!r}; expected 'ip' (cosine on normalised vectors)")
        self.dim, self.model, self.requested_kind, self.metric = dim, model, kind, metric
        self.auto_threshold = auto_threshold
        self.hnsw_m, self.ef_construction, self.ef_search = hnsw_m, ef_construction, ef_search
        self.nprobe, self.compact_ratio = nprobe, compact_ratio
        self.nlist = nlist  # IVF lists; None: ≈ 4·sqrt(n) at build time
        self.meta: dict[str, Any] = {}  # free-form, saved in index.json (e.g. the run that encoded it)
        self._faiss: faiss.Index | None = None  # built at the first add
        self._kind: str | None = None  # resolved kind of `_faiss`
        self._entries: dict[int, Entry] = {}  # label -> entry
        self._labels: dict[str, int] = {}  # id -> label
        self._dead: set[int] = set()  # HNSW tombstones (only ever grows until a rebuild)
        self._filter: tuple | None = None  # selectors built from _dead; reset when it changes
        self._next_label = 0
        self._parts: dict[int, dict[str, np.ndarray]] = {}  # label -> re-scoring parts (may be empty)
        self.part_names: tuple[str, ...] = ()  # names of the parts every entry carries

    # ---- inspection -------------------------------------------------------------------
    @property
    def kind(self) -> str:
        """The FAISS structure in use ("flat", "hnsw", …), or the requested kind before the first add."""
        return self._kind or self.requested_kind

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._labels

    def __repr__(self) -> str:
        return f"Index(dim={self.dim}, model={self.model!r}, kind={self.kind!r}, count={len(self)})"

    @property
    def ids(self) -> list[str]:
        return list(self._labels)

    def get(self, entry_id: str) -> Entry:
        return self._entries[self._label(entry_id)]

    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    def _label(self, entry_id: str) -> int:
        try:
            return self._labels[entry_id]
        except KeyError:
            raise VideoTextError(f"id {entry_id!r} is not in the index ({len(self)} entries)") from None

    # ---- building ---------------------------------------------------------------------
    def _choose_kind(self, n: int) -> str:
        if self.requested_kind != "auto":
            return self.requested_kind
        return "flat" if n <= self.auto_threshold else "hnsw"

    def _ivf_nprobe(self) -> int:
        nlist = faiss.extract_index_ivf(self._faiss).nlist
        return min(nlist, self.nprobe or max(1, nlist // 8))

    def _new_faiss(self, kind: str, train: np.ndarray) -> faiss.Index:
        d, ip = self.dim, faiss.METRIC_INNER_PRODUCT
        if kind == "flat":
            return faiss.IndexIDMap2(faiss.IndexFlatIP(d))
        if kind == "hnsw":
            hnsw = faiss.IndexHNSWFlat(d, self.hnsw_m, ip)
            hnsw.hnsw.efConstruction = self.ef_construction
            return faiss.IndexIDMap2(hnsw)
        nlist = min(self.nlist, max(1, len(train) // 39)) if self.nlist else _ivf_nlist(len(train))
        if kind == "ivf":
            ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, ip)
        else:  # ivfpq: ~4 dims per sub-quantizer, 8 bits each
            if len(train) < 256:
                raise VideoTextError(f"kind 'ivfpq' needs at least 256 vectors to train, got {len(train)}; use 'flat'")
            m = max(s for s in range(1, d + 1) if d % s == 0 and d // s >= 4) if d >= 4 else 1
            ivf = faiss.IndexIVFPQ(faiss.IndexFlatIP(d), d, nlist, m, 8, ip)
        ivf.cp.max_points_per_centroid = 64  # k-means on a sample: half the build time (bench)
        ivf.train(train)
        ivf.set_direct_map_type(faiss.DirectMap.Hashtable)  # reconstruct + remove by id
        return ivf

    def _build(self, vectors: np.ndarray, labels: np.ndarray) -> None:
        kind = self._choose_kind(len(vectors))
        index = self._new_faiss(kind, vectors)
        index.add_with_ids(vectors, labels)
        self._faiss, self._kind, self._dead, self._filter = index, kind, set(), None

    def _live(self) -> tuple[np.ndarray, np.ndarray]:
        labels = np.fromiter(self._entries, dtype=np.int64, count=len(self._entries))
        if self._faiss is None or not len(labels):
            return np.zeros((0, self.dim), np.float32), labels
        return self._faiss.reconstruct_batch(labels), labels

    def rebuild(self, kind: str | None = None) -> None:
        """Re-create the FAISS structure from the live vectors: drops tombstones, retrains
        IVF centroids, and re-resolves "auto" (or switches to `kind`)."""
        if kind is not None:
            if kind not in KINDS:
                raise VideoTextError(f"unknown index kind {kind!r}; expected one of {', '.join(KINDS)}")
            self.requested_kind = kind
        vectors, labels = self._live()
        if len(labels):
            self._build(vectors, labels)
        else:
            self._faiss, self._kind, self._dead = None, None, set()

    def add(self, embeddings: Any, entries: Sequence[Entry | str], parts: dict[str, Any] | None = None) -> None:
        """Add embeddings [N, D] (numpy or torch) with their entries; existing ids are replaced.
        `parts` (name -> [N, ...] arrays) are kept per entry for re-scoring (module docstring)."""
        vectors = as_matrix(embeddings, "embeddings")
        part_arrays = self._check_parts(parts, len(vectors))
        entries = [Entry(e) if isinstance(e, str) else e for e in entries]
        if vectors.shape[1] != self.dim:
            raise VideoTextError(f"embedding dim {vectors.shape[1]} does not match the index dim {self.dim}")
        if len(vectors) != len(entries):
            raise VideoTextError(f"{len(vectors)} embeddings but {len(entries)} entries")
        seen: set[str] = set()
        for e in entries:
            if not isinstance(e, Entry):
                raise VideoTextError(f"entries must be Entry objects or id strings, got {type(e).__name__}")
            if e.id in seen:
                raise VideoTextError(f"id {e.id!r} appears twice in one add()")
            seen.add(e.id)
        if not entries:
            return
        self.remove([e.id for e in entries if e.id in self._labels])  # upsert
        labels = np.arange(self._next_label, self._next_label + len(entries), dtype=np.int64)
        self._next_label += len(entries)
        grow_past_auto = (
            self.requested_kind == "auto" and self._kind == "flat"
            and len(self) + len(entries) > self.auto_threshold
        )
        if self._faiss is None or grow_past_auto:
            old_vectors, old_labels = self._live()
            self._build(np.concatenate([old_vectors, vectors]), np.concatenate([old_labels, labels]))
        else:
            self._faiss.add_with_ids(vectors, labels)
        for row, (label, entry) in enumerate(zip(labels.tolist(), entries)):
            self._entries[label], self._labels[entry.id] = entry, label
            if part_arrays:
                self._parts[label] = {name: arr[row].copy() for name, arr in part_arrays.items()}
        if part_arrays:
            self.part_names = tuple(sorted(part_arrays))

    def _check_parts(self, parts: dict[str, Any] | None, n: int) -> dict[str, np.ndarray]:
        """Parts as numpy arrays with N rows; the same names as the entries already stored."""
        arrays = {}
        for name, value in (parts or {}).items():
            if hasattr(value, "detach"):  # torch: bf16 / fp16 parts are stored as float32
                value = value.detach().to("cpu")
                value = (value.float() if value.is_floating_point() else value).numpy()
            arr = np.asarray(value)
            if arr.dtype.kind == "f" and arr.dtype != np.float32:
                arr = arr.astype(np.float32)
            if arr.ndim < 1 or len(arr) != n:
                raise VideoTextError(f"re-scoring part {name!r} has shape {arr.shape}, expected {n} rows")
            arrays[name] = arr
        if len(self) and n and tuple(sorted(arrays)) != self.part_names:
            raise VideoTextError(f"re-scoring parts {sorted(arrays)} differ from the index's {list(self.part_names)} "
                                 "(index every video with the same model)")
        return arrays

    def remove(self, ids: Iterable[str]) -> int:
        """Remove entries by id (unknown ids are ignored); returns how many were removed."""
        labels = [self._labels.pop(i) for i in dict.fromkeys(ids) if i in self._labels]
        if not labels:
            return 0
        for label in labels:
            del self._entries[label]
            self._parts.pop(label, None)
        if not self._entries:
            self._faiss, self._kind, self._dead = None, None, set()
            self.part_names = ()
        elif self._kind == "hnsw":
            self._dead.update(labels)
            self._filter = None
            if len(self._dead) > self.compact_ratio * self._faiss.ntotal:
                self.rebuild()
        else:
            self._faiss.remove_ids(np.asarray(labels, dtype=np.int64))
        return len(labels)

    def remove_video(self, video_id: str) -> int:
        """Remove a video and all its clips; returns how many entries were removed."""
        return self.remove([e.id for e in self._entries.values() if e.video_id == video_id])

    # ---- querying ---------------------------------------------------------------------
    def search(self, queries: Any, k: int = 10, where: str | None = None) -> list[list[Hit]]:
        """Top-k entries by cosine for each query [Q, D]; fewer if the index holds fewer.

        `where` (`videotext.search.filters`) keeps the entries whose metadata pass it. FAISS
        searches only those (an ID selector over the passing labels), so k results come back
        whenever k entries pass, with no over-fetch to guess."""
        q = as_matrix(queries, "queries")
        if q.shape[1] != self.dim:
            raise VideoTextError(f"query dim {q.shape[1]} does not match the index dim {self.dim}")
        if k < 1:
            raise VideoTextError(f"k must be at least 1, got {k}")
        allowed = self._passing(where) if where else None
        if self._faiss is None or not len(q) or (allowed is not None and not len(allowed)):
            return [[] for _ in range(len(q))]
        k = min(k, len(self) if allowed is None else len(allowed))
        params = None
        selector = None if allowed is None else faiss.IDSelectorBatch(allowed)
        if self._kind == "hnsw":
            params = faiss.SearchParametersHNSW()
            params.efSearch = max(self.ef_search, k)
            if self._dead and selector is None:
                params.sel = self._tombstone_filter()
        elif self._kind in ("ivf", "ivfpq"):
            params = faiss.SearchParametersIVF()
            params.nprobe = self._ivf_nprobe()
        else:
            params = faiss.SearchParameters() if selector is not None else None
        if selector is not None:
            params.sel = selector  # passing labels are live: no tombstone among them
        scores, labels = self._faiss.search(q, k, params=params)
        return [
            [
                Hit(**self._entries[label].to_dict(), score=float(score), rank=rank)
                for rank, (score, label) in enumerate(zip(row_s.tolist(), row_l.tolist()), 1)
                if label >= 0
            ]
            for row_s, row_l in zip(scores, labels)
        ]

    def _passing(self, where: str) -> np.ndarray:
        """Labels [M] of the entries whose metadata pass filter `where` (parsed once per call)."""
        tree = parse_filter(where)
        return np.fromiter((label for label, entry in self._entries.items() if matches(tree, entry_fields(entry))),
                           np.int64)

    def _tombstone_filter(self) -> faiss.IDSelector:
        """An HNSW selector excluding removed labels, cached until the tombstones change."""
        if self._filter is None:
            dead = faiss.IDSelectorBatch(np.fromiter(self._dead, np.int64, len(self._dead)))
            self._filter = (dead, faiss.IDSelectorNot(dead))  # keeps both alive
        return self._filter[1]

    def search_one(self, query: Any, k: int = 10, where: str | None = None) -> list[Hit]:
        """`search` for one query vector [D]."""
        q = as_matrix(query, "query")
        if len(q) != 1:
            raise VideoTextError(f"search_one takes one query vector, got {len(q)}; use search()")
        return self.search(q, k, where)[0]

    def embeddings_for(self, ids: Sequence[str]) -> np.ndarray:
        """Stored (normalised) embeddings [len(ids), D], e.g. to re-score a shortlist with a
        method's own similarity. Exact except for "ivfpq" (PQ-decoded)."""
        labels = np.asarray([self._label(i) for i in ids], dtype=np.int64)
        if not len(labels):
            return np.zeros((0, self.dim), np.float32)
        return self._faiss.reconstruct_batch(labels)

    reconstruct = embeddings_for

    def parts_for(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored re-scoring parts of `ids`, stacked: name -> [len(ids), ...]."""
        labels = [self._label(i) for i in ids]
        return {name: np.stack([self._parts[label][name] for label in labels]) if labels
                else np.zeros((0,), np.float32) for name in self.part_names}

    # ---- what a build asks of a store (the same calls on `MilvusIndex`) -----------------
    concurrent_inserts = False  # rows live in this process until `save`: one writer
    multi_process = True  # a saved folder opens in any number of processes

    def begin_writing(self, out: str | os.PathLike | None = None) -> None:
        """Nothing to start: no row reaches the folder before `save` replaces it whole."""

    def describe(self) -> dict[str, Any]:
        """The store (what `/health` shows)."""
        return {"store": "faiss", "kind": self.kind}

    def publish(self) -> None:
        """Nothing to swap in: `save` replaces the folder atomically."""

    # ---- persistence ------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write the folder `path` (index.json, entries.parquet, index.faiss) atomically: it is
        written beside `path` then renamed, so a crash leaves the old index or none."""
        target = Path(path)
        if target.exists() and (not target.is_dir() or (any(target.iterdir()) and not (target / "index.json").exists())):
            raise VideoTextError(f"{target}: exists and is not a videotext index folder; refusing to overwrite it")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
        way_back = REBUILD.format(folder=target)  # recorded with each file's digest (`videotext.digests`)
        try:
            with atomic_path(tmp / "index.faiss", way_back) as p:
                faiss.write_index(self._faiss or faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim)), str(p))
            with atomic_path(tmp / ENTRIES, way_back) as p:
                write_entries(p, self._entries)
            if self.part_names:
                labels = list(self._entries)
                with atomic_path(tmp / "parts.npz", way_back) as p, open(p, "wb") as f:
                    np.savez(f, __labels__=np.asarray(labels, np.int64),
                             **{name: np.stack([self._parts[label][name] for label in labels])
                                for name in self.part_names})
            write_json(tmp / "index.json", {
                "format": FORMAT, "version": VERSION, "dim": self.dim, "model": self.model,
                "kind": self._kind, "requested_kind": self.requested_kind, "metric": self.metric,
                "count": len(self), "next_label": self._next_label, "faiss_version": faiss.__version__,
                "parts": list(self.part_names),
                "meta": self.meta,
                "params": {
                    "auto_threshold": self.auto_threshold, "hnsw_m": self.hnsw_m,
                    "ef_construction": self.ef_construction, "ef_search": self.ef_search,
                    "nprobe": self.nprobe, "compact_ratio": self.compact_ratio, "nlist": self.nlist,
                },
            }, way_back=way_back)
            if target.exists():  # swap: old aside, new in, old removed
                for name in CARRIED:  # what the build exported beside the vectors stays with them
                    if (target / name).is_dir() and not (tmp / name).exists():
                        shutil.copytree(target / name, tmp / name, copy_function=_link_or_copy)
                old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
                os.replace(target, old)
                os.replace(tmp, target)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return target

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Index | MilvusIndex":
        """The index saved in the folder `path`: this FAISS index, or the Milvus collection
        its index.json names (`open_store`). A missing or inconsistent folder raises
        VideoTextError."""
        return open_store(path)

    @classmethod
    def _load(cls, folder: Path) -> "Index":
        if not folder.is_dir():
            raise VideoTextError(f"{folder}: index folder not found (build one with `videotext index build`)")
        for name in ("index.json", ENTRIES, "index.faiss"):
            if not (folder / name).is_file() and not (name == ENTRIES and (folder / OLD_ENTRIES).is_file()):
                raise DataFormatError(folder / name, None, "missing; not a videotext index folder (or an interrupted copy)")
        info_path = folder / "index.json"
        way_back = REBUILD.format(folder=folder)
        try:
            info = json.loads(read_verified(info_path, way_back).decode("utf-8"))
            if info.get("format") != FORMAT:
                raise DataFormatError(info_path, "format", f"expected {FORMAT!r}, got {info.get('format')!r}")
            if not isinstance(info.get("version"), int) or info["version"] > VERSION:
                raise DataFormatError(info_path, "version", f"expected <= {VERSION}, got {info.get('version')!r}")
            index = cls(info["dim"], info.get("model", ""), info.get("requested_kind", "auto"),
                        info.get("metric", "ip"), **info.get("params", {}))
            count, index._next_label = int(info["count"]), int(info["next_label"])
            index.meta = dict(info.get("meta", {}))
        except (ValueError, KeyError, TypeError, VideoTextError) as err:
            if isinstance(err, DataFormatError):
                raise
            raise DataFormatError(info_path, None, f"corrupt index metadata ({err})") from None
        entries_path = folder / (ENTRIES if (folder / ENTRIES).is_file() else OLD_ENTRIES)  # version 1: JSON lines
        for label, entry in (read_entries(entries_path, way_back) if entries_path.name == ENTRIES
                             else read_entry_lines(entries_path)):
            index._entries[label], index._labels[entry.id] = entry, label
        if len(index._labels) != len(index._entries):
            raise DataFormatError(entries_path, None, "the same id appears on several lines")
        if len(index) != count:
            raise DataFormatError(entries_path, None, f"{len(index)} entries but index.json says {count}")
        index._load_parts(folder / "parts.npz", [str(p) for p in info.get("parts", [])], way_back)
        if count:
            faiss_path = folder / "index.faiss"
            reader = VerifyingReader(faiss_path, way_back)  # hashes the bytes FAISS reads, as it reads them
            try:
                index._faiss = faiss.read_index(faiss.PyCallbackIOReader(reader.read, BLOCK))
            except RuntimeError as err:
                reader.close()
                raise DataFormatError(faiss_path, None, f"unreadable FAISS index ({str(err).splitlines()[0]})") from None
            reader.finish()
            index._kind = info.get("kind")
            wrapped = isinstance(index._faiss, faiss.IndexIDMap2)
            if index._kind not in KINDS[1:] or wrapped != (index._kind in ("flat", "hnsw")):
                raise DataFormatError(faiss_path, None, f"{type(index._faiss).__name__} does not match kind {index._kind!r}")
            if index._faiss.d != index.dim:
                raise DataFormatError(faiss_path, None, f"vector dim {index._faiss.d} but index.json says {index.dim}")
            if wrapped:  # labels are listed: check them one by one; HNSW's extra ones are tombstones
                stored = set(faiss.vector_to_array(index._faiss.id_map).tolist())
                index._dead = stored - set(index._entries)
                consistent = len(stored) - len(index._dead) == count and (index._kind == "hnsw" or not index._dead)
            else:
                consistent = index._faiss.ntotal == count
            if not consistent or not all(label < index._next_label for label in index._entries):
                raise DataFormatError(faiss_path, None, f"holds {index._faiss.ntotal} vectors, inconsistent with {count} entries")
        return index

    def _load_parts(self, path: Path, names: list[str], way_back: str) -> None:
        if not names:
            return
        try:
            with np.load(io.BytesIO(read_verified(path, way_back)), allow_pickle=False) as data:
                labels = data["__labels__"].tolist()
                arrays = {name: data[name] for name in names}
        except (OSError, KeyError, ValueError) as err:
            raise DataFormatError(path, None, f"unreadable re-scoring parts ({err})") from None
        if sorted(labels) != sorted(self._entries) or any(len(a) != len(labels) for a in arrays.values()):
            raise DataFormatError(path, None, f"parts of {len(labels)} entries, inconsistent with {len(self)} entries")
        self._parts = {label: {n: a[row] for n, a in arrays.items()} for row, label in enumerate(labels)}
        self.part_names = tuple(sorted(names))


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for a block that only allocates (nothing it makes
    is garbage yet), back to its earlier state after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def write_entries(path: str | os.PathLike, entries: dict[int, Entry]) -> None:
    """Entries as one Parquet table (label, id, path, start, end, video_id, meta as JSON text):
    1 M entries save in about a second, where a JSON document of them took ten."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    values = list(entries.values())
    metas = []
    for entry in values:
        try:
            metas.append(json.dumps(entry.meta, ensure_ascii=False) if entry.meta else "{}")
        except (TypeError, ValueError) as err:
            raise VideoTextError(f"entry {entry.id!r}: meta is not JSON-serialisable ({err})") from None
    table = pa.table({
        "label": pa.array(list(entries), pa.int64()),
        "id": pa.array([e.id for e in values], pa.string()),
        "path": pa.array([e.path for e in values], pa.string()),
        "start": pa.array([e.start for e in values], pa.float64()),
        "end": pa.array([e.end for e in values], pa.float64()),
        "video_id": pa.array([e.video_id for e in values], pa.string()),
        "meta": pa.array(metas, pa.string()),
    })
    pq.write_table(table, path)


def _entry(id: str, path: str | None, start: float | None, end: float | None, video_id: str, meta: dict) -> Entry:
    """An Entry without re-running the checks of `__post_init__` (stored entries passed them)."""
    entry = Entry.__new__(Entry)
    entry.__dict__.update(id=id, path=path, start=start, end=end, video_id=video_id, meta=meta)
    return entry


def read_entries(path: Path, way_back: str | None = None) -> list[tuple[int, Entry]]:
    """(label, entry) pairs of an entries.parquet written by `write_entries` (checked against its
    digest as it is read)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = ["label", "id", "path", "start", "end", "video_id", "meta"]
    data = read_verified(path, way_back)
    try:
        with pq.ParquetFile(pa.BufferReader(data)) as handle:  # read_table would import pyarrow.dataset and pandas (0.5 s)
            table = handle.read(columns=columns)
        data = {name: table.column(name).to_pylist() for name in columns}
        metas = data["meta"]
        meta = [{} for _ in metas] if all(m == "{}" for m in metas) else json.loads("[" + ",".join(metas) + "]")
    except (pa.ArrowException, OSError, ValueError, KeyError) as err:
        raise DataFormatError(path, None, f"unreadable index entries ({str(err).splitlines()[0]})") from None
    if any(v is None for v in data["id"]) or any(v is None for v in data["label"]):
        raise DataFormatError(path, None, "an entry has no id or label")
    return [(label, _entry(*fields)) for label, *fields in
            zip(data["label"], data["id"], data["path"], data["start"], data["end"], data["video_id"], meta)]


def read_entry_lines(path: Path) -> list[tuple[int, Entry]]:
    """(label, entry) pairs of a version-1 entries.jsonl (one JSON object per line)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                out.append((int(row.pop("label")), Entry.from_dict(row)))
            except (ValueError, KeyError, TypeError, VideoTextError) as err:
                raise DataFormatError(path, f"line {line_no}", f"bad entry ({err})") from None
    return out


# ---- choosing the store ---------------------------------------------------------------------
def open_store(path: str | os.PathLike) -> "Index | MilvusIndex":
    """The index saved in the folder `path`: FAISS, or the Milvus collection its index.json
    names (`"store": "milvus"`). A missing or inconsistent folder raises VideoTextError."""
    info_path = Path(path) / "index.json"
    if info_path.is_file():
        try:
            settings = json.loads(read_verified(info_path, REBUILD.format(folder=Path(path))).decode("utf-8"))  # names where it is now
        except DamagedFile:
            raise
        except (OSError, ValueError):
            settings = {}
        if isinstance(settings, dict) and settings.get("store") == MILVUS_STORE:
            return _open_milvus(Path(path), settings)
    with _gc_paused():  # 10^6 new Entry objects would set off ~100 full collections: 2.3x slower
        try:
            return Index._load(Path(path))
        except DamagedFile:  # its line already names the way back
            raise
        except DataFormatError as exc:  # a damaged file: the one line names it and the way back
            raise DataFormatError(exc.path, exc.key, f"{exc.problem}; {REBUILD.format(folder=path)}") from None


@contextlib.contextmanager
def _quiet(*loggers: str) -> Iterator[None]:
    """Silence these loggers for a moment (the error they would log is raised as one line)."""
    import logging

    saved = [(logging.getLogger(name), logging.getLogger(name).level) for name in loggers]
    for logger, _ in saved:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in saved:
            logger.setLevel(level)


def _open_milvus(path: Path, settings: dict) -> "MilvusIndex":
    """The Milvus collection an index folder names. Milvus Lite keeps its data in files on this
    machine: what it cannot read there is damage, said in one line with the way back."""
    location = str(settings.get("location", ""))
    remedy = REBUILD.format(folder=f"{path} --store {location}")
    with contextlib.suppress(ImportError):  # configures its loggers as it imports: before quieting them
        import pymilvus  # noqa: F401
    try:
        with _quiet("pymilvus", "milvus_lite"):  # their loggers print the same error as a traceback
            return MilvusIndex.from_settings(settings)
    except DamagedFile:
        raise
    except DataFormatError as exc:
        raise DataFormatError(exc.path, exc.key, f"{exc.problem}; {remedy}") from None
    except VideoTextError:
        raise
    except Exception as exc:  # pymilvus's MilvusException (and gRPC errors) carry Milvus's message
        message = " ".join(str(getattr(exc, "message", None) or exc).split())[:300]
        if location.startswith("milvus:"):
            raise DataFormatError(location.removeprefix("milvus:"), None,
                                  f"damaged Milvus Lite data ({message}); {remedy}") from None
        raise VideoTextError(f"Milvus at {location}: {message}") from None


REBUILD = ("rebuild the index with `videotext index build RUN SOURCE -o {folder}` (the features already "
           "extracted are reused) or restore the folder from a copy")


def new_index(dim: int, model: str, store: str = "faiss", collection: str = DEFAULT_COLLECTION,
              staged: bool = False) -> "Index | MilvusIndex":
    """An empty index for vectors of `dim`: FAISS in the index folder (`store="faiss"`), or a
    Milvus collection (`milvus:PATH.db` for Milvus Lite, `http(s)://HOST:PORT` for a server);
    `staged`: an existing collection of that name is replaced only by `publish`."""
    if store == "faiss":
        return Index(dim=dim, model=model)
    if is_milvus_uri(store):
        return MilvusIndex(store, dim, model=model, collection=collection, staged=staged)
    raise VideoTextError(f"--store {store!r}: expected faiss, milvus:PATH.db or http(s)://HOST:PORT")


def takes_concurrent_inserts(store: str) -> bool:
    """Whether an index made by `new_index(…, store)` takes inserts from several processes at
    once (a Milvus server), before it exists; an open index says so itself (`concurrent_inserts`)."""
    return is_server_uri(store)


def _link_or_copy(source: str, target: str) -> str:
    """A hard link of `source` at `target` (a copy across file systems); a symbolic link (the hub cache's
    files are links to its blobs) is followed: Linux's link() would link the link itself."""
    try:
        os.link(os.path.realpath(source), target)
    except OSError:
        shutil.copy2(source, target)
    return target
