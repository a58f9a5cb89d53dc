"""The index in Milvus: Milvus Lite (the engine in a local file) or a Milvus server by URI.

`MilvusIndex` answers the same calls as the in-process FAISS `Index` (`add`, `remove`,
`search` with `k` and a filter, `get`, `entries`, `embeddings_for`, `parts_for`, `len`), so
`index build`, `search`, `serve` and the Python API work on either. Where one machine is not
enough, Milvus shards and replicates the collection itself; this module builds none of that.

    milvus:PATH.db                      Milvus Lite, embedded (tests, laptops); one writer
    http://HOST:19530 (or https://)     a Milvus standalone or distributed server

Published through an alias (`--collection`, default "videotext"): clients search the alias; each
version of the index is a collection of its own, `<alias>__v<N>`. A build (fresh, or an update, which
first copies the version it updates) writes a new collection and moves the alias onto it in one call
(`alter_alias`) when it is whole, so no search ever finds the name missing or a version half written.
The version it replaced is marked retired and dropped by a later build once `RETIRE_GRACE` seconds
have passed, so a served snapshot still reading it (`search.live`) has time to move to the new one.
An index folder pins the collection it was saved with, beside the alias. Each version's schema: the entry id
(primary key), the L2-normalised float32 vector (inner product = cosine), the entry's
metadata as scalar fields that filters can use (path, video_id, start, end, duration, hash,
dataset, split, tags; nullable where an entry has none) and the rest of `Entry.meta` as JSON.
Methods that re-score a shortlist keep their per-entry parts as a compressed npz string.
Exact search uses a FLAT index; `kind="hnsw"` / `"ivf"` select Milvus's HNSW / IVF_FLAT.

The folder given to `index build -o` keeps only index.json, which names the store, the URI,
the alias and the collection behind it; `open_store(folder)` (`search.index`) hands back a
`MilvusIndex` from it. A collection made before aliases (named as the alias itself) is replaced,
once, by its first build: dropped, then its name given to the alias.
"""
from __future__ import annotations

import base64
import io
import math
import os
import re
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from videotext.errors import DataFormatError, VideoTextError
from videotext.io import write_json
from videotext.search.filters import parse_filter, to_milvus
from videotext.search.entries import FORMAT, Entry, Hit, as_matrix

STORE = "milvus"
SCHEME = "milvus:"
DEFAULT_COLLECTION = "videotext"
FILTER_FIELDS = ("path", "video_id", "start", "end", "duration", "hash", "dataset", "split", "tags")
STRING_FIELDS = ("path", "video_id", "hash", "dataset", "split")
NUMBER_FIELDS = ("start", "end", "duration")
MAX_STRING = 4096  # characters of a path or an id
MAX_PARTS = 65_535  # Milvus's longest VARCHAR: re-scoring parts of one entry, npz, base64
MILVUS_KINDS = {"auto": "FLAT", "flat": "FLAT", "hnsw": "HNSW", "ivf": "IVF_FLAT"}
PROPERTY_FORMAT, PROPERTY_MODEL = "videotext.format", "videotext.model"  # collection properties
PROPERTY_RETIRED = "videotext.retired"  # when the alias moved off a version (seconds since the epoch)
VERSION_SUFFIX = "__v"  # a version's collection: <alias>__v<N>
RETIRE_GRACE = 600.0  # seconds a retired version is kept for the readers still on it (a served snapshot)
BATCH = 2_000  # rows per insert / query call (a gRPC message stays far below its size limit)


def is_milvus_uri(location: str | os.PathLike) -> bool:
    """True for `milvus:PATH.db` and `http(s)://HOST:PORT`: a location `MilvusIndex` opens."""
    text = str(location)
    return text.startswith(SCHEME) or is_server_uri(text)


def is_server_uri(location: str | os.PathLike) -> bool:
    """True for `http(s)://HOST:PORT`: a Milvus server, which several processes write at once."""
    return str(location).startswith(("http://", "https://"))


def client_uri(location: str) -> str:
    """What pymilvus's MilvusClient takes: the .db file path for Milvus Lite, else the URI."""
    if location.startswith(SCHEME):
        path = location[len(SCHEME):]
        if not path.endswith(".db"):
            raise VideoTextError(f"--store {location}: a Milvus Lite file must end in .db (milvus:PATH.db)")
        Path(path).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
        return str(Path(path).expanduser().resolve())
    return location


def connect(location: str, token: str | None = None) -> Any:
    """A MilvusClient for `location`; one clear error when the package or the server is missing."""
    try:
        from pymilvus import MilvusClient
    except ImportError:
        raise VideoTextError("the Milvus store needs pymilvus (and milvus-lite for milvus:PATH.db): "
                             "pip install 'videotext[milvus]'") from None
    token = token if token is not None else os.environ.get("MILVUS_TOKEN", "")
    try:
        return MilvusClient(client_uri(location), **({"token": token} if token else {}), timeout=10)
    except VideoTextError:
        raise
    except Exception as exc:  # pymilvus raises its own and gRPC errors: one line naming the URI
        raise VideoTextError(f"cannot reach Milvus at {location}: {exc}") from None


class MilvusIndex:
    """Embeddings + entries in one Milvus collection, searchable by cosine. See the module docstring."""

    store = STORE

    def __init__(self, location: str, dim: int, model: str = "", collection: str = DEFAULT_COLLECTION,
                 kind: str = "auto", *, token: str | None = None, create: bool = True, staged: bool = False,
                 pinned: str | None = None):
        """The index published as `collection` (an alias) at `location`: the version behind it, or the
        collection `pinned` names (an index folder's own). `staged`: a fresh build, written into a new
        version that `publish` puts behind the alias. `create`: with no version yet, make the first."""
        if not isinstance(dim, int) or dim <= 0:
            raise VideoTextError(f"index dim must be a positive integer, got {dim!r}")
        if kind not in MILVUS_KINDS:
            raise VideoTextError(f"index kind {kind!r} is not offered by the Milvus store; "
                                 f"expected one of {', '.join(MILVUS_KINDS)}")
        self.location, self.dim, self.model, self.alias = str(location), dim, model, collection
        self.requested_kind = kind
        self.meta: dict[str, Any] = {}
        self.part_names: tuple[str, ...] = ()
        self.writable = False  # True for a version this object made and has not published: written in place
        self.opened: str | None = None  # the version this object read before it started its own
        self._client = connect(self.location, token)
        served = pinned if pinned is not None and self._client.has_collection(pinned) else self.target()
        if staged:
            self.collection = served or self.alias
            self._new_version()
        elif served is not None:
            self.collection = served
            self._check_collection()
            self._load(served)
        elif create:  # nothing there yet: the first version, published empty at once
            self._new_version()
            self.publish()
            self.writable = True
        else:
            raise VideoTextError(f"Milvus at {self.location} has no collection {collection!r}")

    # ---- what a build asks of a store (the same calls on the FAISS `Index`) -------------
    @property
    def concurrent_inserts(self) -> bool:
        """True for a Milvus server: every torchrun rank may insert its own rows at once
        (each with its own copy of this index: it pickles as its settings and reconnects)."""
        return is_server_uri(self.location)

    @property
    def multi_process(self) -> bool:
        """False for Milvus Lite, whose file one process holds; True for a server."""
        return self.concurrent_inserts

    def begin_writing(self, out: str | os.PathLike | None = None) -> None:
        """Before the first row of an update: a new version, a copy of the one served, that the rows
        go into; the served version is never written in place (`publish` swaps them)."""
        if not self.writable:
            self._new_version(copy=True)

    def __reduce__(self) -> tuple:
        """Pickled as its settings and the version being written: another process unpickles a
        connection of its own to the same collection."""
        return _reopen, (self.settings(), self.writable)

    def describe(self) -> dict[str, Any]:
        """The store, the alias clients search and the collection behind it (what `/health` shows)."""
        return {"store": STORE, "alias": self.alias, "collection": self.collection}

    def target(self) -> str | None:
        """The collection the alias names now: None when there is none, the alias itself for a
        collection made before aliases."""
        if self.alias in self._client.list_aliases().get("aliases", []):
            return str(self._client.describe_alias(self.alias)["collection_name"])
        return self.alias if self._client.has_collection(self.alias) else None

    def publish(self) -> None:
        """Put the version written by this object behind the alias, in one call (`alter_alias`). The
        version it replaces is marked retired (`RETIRE_GRACE`); versions retired longer ago, and
        versions a killed build left unpublished, are dropped. No-op when nothing was written."""
        if not self.writable:
            return
        self._client.flush(self.collection)
        before = self.target()
        now = str(time.time())
        for name in {before, self.opened} - {None, self.alias, self.collection}:
            self._client.alter_collection_properties(name, properties={PROPERTY_RETIRED: now})
        if before == self.alias:  # a collection made before aliases holds the name: replaced once
            self._client.drop_collection(self.alias)
            before = None
        if before is None:
            self._client.create_alias(self.collection, self.alias)
        else:
            self._client.alter_alias(self.collection, self.alias)
        self.writable, self.opened = False, None
        self._drop_old_versions()

    def _new_version(self, copy: bool = False) -> None:
        """Start writing a new version `<alias>__v<N>`: empty, or (`copy`) with every row of the one
        this object reads. Versions a killed build left unpublished go first."""
        self._drop_old_versions()
        numbers = [int(m.group(1)) for name in self._client.list_collections()
                   if (m := re.fullmatch(re.escape(self.alias + VERSION_SUFFIX) + r"(\d+)", name))]
        source = self.collection if copy else None
        self.collection = f"{self.alias}{VERSION_SUFFIX}{max(numbers, default=0) + 1}"
        self._create_collection()
        if source is not None:
            for rows in self._iterate(source, ["vector", *FILTER_FIELDS, "meta", "parts"]):
                self._client.insert(self.collection, rows)
        self.opened, self.writable = source, True

    def _drop_old_versions(self) -> None:
        """Drop this alias's versions that nobody needs: unpublished ones (a killed build's) and those
        retired more than RETIRE_GRACE seconds ago; never the one behind the alias, nor the ones this
        object reads or writes."""
        keep = {self.target(), getattr(self, "collection", None), self.opened}
        ours = re.compile(re.escape(self.alias) + r"__(v\d+|building|staged)")  # versions; a staged build's before aliases
        for name in self._client.list_collections():
            if name in keep or not ours.fullmatch(name):
                continue
            retired = (self._client.describe_collection(name).get("properties") or {}).get(PROPERTY_RETIRED)
            if retired is None or time.time() - float(retired) > RETIRE_GRACE:
                self._client.drop_collection(name)

    def _load(self, name: str) -> None:
        """Load a collection into memory for search (a reopened one may be released)."""
        state = str(self._client.get_load_state(name).get("state", ""))
        if "Loaded" not in state or "NotLoad" in state:
            self._client.load_collection(name)

    # ---- the collection ---------------------------------------------------------------
    def _create_collection(self) -> None:
        from pymilvus import DataType

        schema = self._client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=MAX_STRING)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=self.dim)
        for name in STRING_FIELDS:
            schema.add_field(name, DataType.VARCHAR, max_length=MAX_STRING, nullable=True)
        for name in NUMBER_FIELDS:
            schema.add_field(name, DataType.DOUBLE, nullable=True)
        schema.add_field("tags", DataType.ARRAY, element_type=DataType.VARCHAR, max_capacity=256,
                         max_length=256, nullable=True)
        schema.add_field("meta", DataType.JSON, nullable=True)
        schema.add_field("parts", DataType.VARCHAR, max_length=MAX_PARTS, nullable=True)
        index = self._client.prepare_index_params()
        params = {"HNSW": {"M": 32, "efConstruction": 100}, "IVF_FLAT": {"nlist": 1024}}.get(self.kind, {})
        index.add_index("vector", index_type=self.kind, metric_type="IP", params=params)
        self._client.create_collection(self.collection, schema=schema, index_params=index,
                                       properties={PROPERTY_FORMAT: FORMAT, PROPERTY_MODEL: self.model})

    def _check_collection(self) -> None:
        """An existing collection must hold vectors of this dimension from the same model."""
        described = self._client.describe_collection(self.collection)
        vector = next((f for f in described["fields"] if f["name"] == "vector"), None)
        dim = int((vector or {}).get("params", {}).get("dim", -1))
        if dim != self.dim:
            raise VideoTextError(f"Milvus collection {self.collection!r} at {self.location} holds {dim}-d vectors; "
                                 f"this model's are {self.dim}-d (use another --collection)")
        stored = (described.get("properties") or {}).get(PROPERTY_MODEL, "")
        if stored and self.model and stored != self.model:
            raise VideoTextError(f"Milvus collection {self.collection!r} at {self.location} was built with model "
                                 f"{stored!r}, not {self.model!r} (use another --collection)")

    @property
    def kind(self) -> str:
        return MILVUS_KINDS[self.requested_kind]

    # ---- inspection -------------------------------------------------------------------
    def __len__(self) -> int:
        rows = self._client.query(self.collection, filter="", output_fields=["count(*)"])
        return int(rows[0]["count(*)"]) if rows else 0

    count = __len__

    def __contains__(self, entry_id: object) -> bool:
        return isinstance(entry_id, str) and bool(self._client.get(self.collection, ids=[entry_id], output_fields=["id"]))

    def __repr__(self) -> str:
        return f"MilvusIndex({self.location!r}, collection={self.collection!r}, dim={self.dim}, model={self.model!r})"

    @property
    def ids(self) -> list[str]:
        return [e.id for e in self.entries()]

    def get(self, entry_id: str) -> Entry:
        rows = self._client.get(self.collection, ids=[entry_id], output_fields=[*FILTER_FIELDS, "meta"])
        if not rows:
            raise VideoTextError(f"id {entry_id!r} is not in Milvus collection {self.collection!r}")
        return _entry(rows[0])

    def entries(self) -> list[Entry]:
        out = []
        for rows in self._iterate(self.collection, [*FILTER_FIELDS, "meta"]):
            out += [_entry(row) for row in rows]
        return out

    def _iterate(self, collection: str, fields: list[str]) -> Iterable[list[dict]]:
        iterator = self._client.query_iterator(collection, batch_size=BATCH, filter="", output_fields=["id", *fields])
        try:
            while rows := iterator.next():
                yield rows
        finally:
            iterator.close()

    # ---- writing ----------------------------------------------------------------------
    def add(self, embeddings: Any, entries: Sequence[Entry | str], parts: dict[str, Any] | None = None) -> None:
        """Upsert embeddings [N, D] with their entries (an existing id is replaced)."""
        vectors = as_matrix(embeddings, "embeddings")
        entries = [Entry(e) if isinstance(e, str) else e for e in entries]
        if vectors.shape[1] != self.dim:
            raise VideoTextError(f"embedding dim {vectors.shape[1]} does not match the index dim {self.dim}")
        if len(vectors) != len(entries):
            raise VideoTextError(f"{len(vectors)} embeddings but {len(entries)} entries")
        if len({e.id for e in entries}) != len(entries):
            raise VideoTextError("an id appears twice in one add()")
        part_arrays = {name: np.asarray(value.detach().float().cpu() if hasattr(value, "detach") else value)
                       for name, value in (parts or {}).items()}
        if part_arrays:
            self.part_names = tuple(sorted(part_arrays))
        rows = [_row(entry, vector, {n: a[i] for n, a in part_arrays.items()})
                for i, (entry, vector) in enumerate(zip(entries, vectors))]
        if rows:
            self.begin_writing()
        for start in range(0, len(rows), BATCH):
            self._client.upsert(self.collection, rows[start : start + BATCH])

    def remove(self, ids: Iterable[str]) -> int:
        ids = [i for i in dict.fromkeys(ids) if i in self]
        if ids:
            self.begin_writing()
            self._client.delete(self.collection, ids=ids)
        return len(ids)

    def remove_video(self, video_id: str) -> int:
        return self.remove([e.id for e in self.entries() if e.video_id == video_id])

    # ---- querying ---------------------------------------------------------------------
    def search(self, queries: Any, k: int = 10, where: str | None = None) -> list[list[Hit]]:
        """Top-k entries by cosine for each query [Q, D], among those passing filter `where`."""
        q = as_matrix(queries, "queries")
        if q.shape[1] != self.dim:
            raise VideoTextError(f"query dim {q.shape[1]} does not match the index dim {self.dim}")
        if k < 1:
            raise VideoTextError(f"k must be at least 1, got {k}")
        if not len(q):
            return []
        expression = to_milvus(parse_filter(where)) if where else ""
        params = {"metric_type": "IP", "params": {"HNSW": {"ef": max(128, k)}, "IVF_FLAT": {"nprobe": 32}}.get(self.kind, {})}
        results = self._client.search(self.collection, data=q.tolist(), limit=k, filter=expression,
                                      output_fields=[*FILTER_FIELDS, "meta"], search_params=params)
        return [[Hit(**_entry({"id": hit["id"], **hit["entity"]}).to_dict(), score=float(hit["distance"]), rank=rank)
                 for rank, hit in enumerate(row, 1)] for row in results]

    def search_one(self, query: Any, k: int = 10, where: str | None = None) -> list[Hit]:
        return self.search(as_matrix(query, "query")[:1], k, where)[0]

    def embeddings_for(self, ids: Sequence[str]) -> np.ndarray:
        rows = {r["id"]: r["vector"] for r in self._client.get(self.collection, ids=list(ids), output_fields=["vector"])}
        missing = [i for i in ids if i not in rows]
        if missing:
            raise VideoTextError(f"id {missing[0]!r} is not in Milvus collection {self.collection!r}")
        return np.asarray([rows[i] for i in ids], dtype=np.float32).reshape(len(ids), self.dim)

    def parts_for(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        rows = {r["id"]: r.get("parts") for r in self._client.get(self.collection, ids=list(ids), output_fields=["parts"])}
        decoded = [_decode_parts(rows.get(i)) for i in ids]
        names = (self.part_names or tuple(sorted(decoded[0]))) if decoded else ()
        return {name: np.stack([d[name] for d in decoded]) for name in names}

    # ---- persistence ------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write the index folder: index.json naming the store, the URI, the alias and the version
        behind it (the data lives in Milvus; a Milvus Lite file keeps its own path). A version this
        object wrote is published first."""
        target = Path(path)
        if target.exists() and not target.is_dir():
            raise VideoTextError(f"{target}: exists and is not an index folder; refusing to overwrite it")
        self.publish()
        self._client.flush(self.collection)
        target.mkdir(parents=True, exist_ok=True)
        # atomic: the folder names the old version or the new one; the count lets an open see lost rows
        write_json(target / "index.json", {**self.settings(), "count": len(self)},
                   way_back=f"rebuild the index with `videotext index build RUN SOURCE -o {target} --store {self.location}`")
        return target

    def settings(self) -> dict[str, Any]:
        """What index.json records: the store, the URI, the alias, the version behind it and the
        index settings."""
        return {"format": FORMAT, "store": STORE, "location": self.location, "collection": self.alias,
                "version": self.collection, "dim": self.dim, "model": self.model, "kind": self.requested_kind,
                "part_names": list(self.part_names), "meta": self.meta}

    @classmethod
    def from_settings(cls, settings: dict[str, Any], token: str | None = None) -> "MilvusIndex":
        """The index an index.json names, pinned to the version it was saved with (while that version
        is kept: `RETIRE_GRACE`), else the one behind the alias."""
        index = cls(settings["location"], int(settings["dim"]), settings.get("model", ""),
                    settings.get("collection", DEFAULT_COLLECTION), settings.get("kind", "auto"), token=token,
                    create=False, pinned=settings.get("version"))
        index.meta = dict(settings.get("meta") or {})
        index.part_names = tuple(settings.get("part_names") or ())
        # rows lost (Milvus Lite fell back to an older manifest) or added by another program; an update
        # cut short names its videos as pending and may have written some of them: no count to hold it to
        if "count" in settings and not index.meta.get("pending") and len(index) != int(settings["count"]):
            raise DataFormatError(client_uri(index.location), None, f"collection {index.collection!r} holds {len(index)} "
                                  f"entries; the index folder recorded {settings['count']} (its data is damaged or "
                                  f"was changed by another program)")
        return index

    def close(self) -> None:
        self._client.close()


def _reopen(settings: dict[str, Any], writable: bool) -> MilvusIndex:
    """A `MilvusIndex` unpickled in another process (`MilvusIndex.__reduce__`): the version it was
    writing, written in place."""
    index = MilvusIndex.from_settings(settings)
    index.writable = writable
    return index


def _row(entry: Entry, vector: np.ndarray, parts: dict[str, np.ndarray]) -> dict[str, Any]:
    meta = dict(entry.meta)
    row: dict[str, Any] = {"id": entry.id, "vector": vector.tolist(), "path": entry.path, "video_id": entry.video_id,
                           "start": entry.start, "end": entry.end}
    for name in ("duration", "hash", "dataset", "split", "tags"):
        row[name] = meta.pop(name, None)
    for name in NUMBER_FIELDS:
        if row[name] is not None:
            row[name] = float(row[name])
            if not math.isfinite(row[name]):
                row[name] = None
    row["tags"] = [str(t) for t in row["tags"]] if row["tags"] is not None else None
    row["meta"] = meta or None
    row["parts"] = _encode_parts(parts) if parts else None
    if row["parts"] is not None and len(row["parts"]) > MAX_PARTS:
        raise VideoTextError(f"entry {entry.id!r}: its re-scoring parts take {len(row['parts'])} characters, more "
                             f"than a Milvus field holds ({MAX_PARTS}); index this method with the FAISS store")
    return row


def _entry(row: dict[str, Any]) -> Entry:
    meta = dict(row.get("meta") or {})
    for name in ("duration", "hash", "dataset", "split", "tags"):
        if row.get(name) is not None:
            meta[name] = list(row[name]) if name == "tags" else row[name]
    return Entry(id=row["id"], path=row.get("path"), start=row.get("start"), end=row.get("end"),
                 video_id=row.get("video_id") or "", meta=meta)


def _encode_parts(parts: dict[str, np.ndarray]) -> str:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{name: np.asarray(value) for name, value in parts.items()})
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _decode_parts(text: str | None) -> dict[str, np.ndarray]:
    if not text:
        return {}
    with np.load(io.BytesIO(base64.b64decode(text))) as data:
        return {name: data[name] for name in data.files}
