"""Near-duplicate groups of an index: which entries are the same footage (re-encoded, resized,
cropped, trimmed, sped up, mirrored).

Each entry's vector is searched in the index itself for its `neighbours` nearest entries, so
the cost is n searches of k (O(n·k) scores with a graph index, never an n × n matrix); a pair
scoring at least `threshold` links its two entries, and the connected components of those
links are the groups (union-find). Clips of the same video never link each other (sliding
windows overlap). Works on any store with `ids`, `get`, `embeddings_for` and `search` (the
FAISS `Index`, `MilvusIndex`).

`DEFAULT_THRESHOLD` is for the `conse` run's vectors (docs/search.md, bench/duplicates.py);
other runs' vectors have other score scales: measure yours with a few known copies.
"""
from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from videotext.errors import VideoTextError
from videotext.io import atomic_open, write_json
from videotext.search.index import open_store

DEFAULT_THRESHOLD = 0.8  # conse vectors: pair precision 0.97, recall 1.00 on bench/duplicates.py's set (0.99, 0.96 on --new-edits)
DEFAULT_NEIGHBOURS = 20
BATCH = 256  # entries searched per call


@dataclass
class Group:
    """Entries that are copies of each other, and the links (scored pairs) that joined them."""

    members: list[str]
    links: list[tuple[str, str, float]] = field(default_factory=list)

    @property
    def best(self) -> dict[str, tuple[str, float]]:
        """Each member's highest-scoring partner in the group."""
        best: dict[str, tuple[str, float]] = {}
        for a, b, score in self.links:
            for one, other in ((a, b), (b, a)):
                if one not in best or score > best[one][1]:
                    best[one] = (other, score)
        return best


def near_pairs(index: Any, threshold: float = DEFAULT_THRESHOLD,
               neighbours: int = DEFAULT_NEIGHBOURS) -> dict[tuple[str, str], float]:
    """{(id a, id b) with a < b: score} of every entry's neighbours scoring ≥ threshold."""
    if neighbours < 1:
        raise VideoTextError(f"neighbours must be at least 1, got {neighbours}")
    videos = {entry.id: entry.video_id for entry in index.entries()}  # one read, also on Milvus
    ids = list(videos)
    pairs: dict[tuple[str, str], float] = {}
    for start in range(0, len(ids), BATCH):
        batch = ids[start : start + BATCH]
        for entry_id, hits in zip(batch, index.search(index.embeddings_for(batch), neighbours + 1)):
            for hit in hits:
                if hit.id == entry_id or hit.score < threshold or videos.get(hit.id) == videos[entry_id]:
                    continue
                key = (entry_id, hit.id) if entry_id < hit.id else (hit.id, entry_id)
                pairs[key] = max(pairs.get(key, -1.0), float(hit.score))
    return pairs


def group_pairs(pairs: dict[tuple[str, str], float]) -> list[Group]:
    """Connected components of the linked pairs (largest first, then by first id)."""
    parent: dict[str, str] = {}

    def root(node: str) -> str:
        parent.setdefault(node, node)
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for a, b in pairs:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    groups: dict[str, Group] = {}
    for node in sorted(parent):
        groups.setdefault(root(node), Group([])).members.append(node)
    for (a, b), score in sorted(pairs.items()):
        groups[root(a)].links.append((a, b, score))
    return sorted(groups.values(), key=lambda g: (-len(g.members), g.members[0]))


def find_duplicates(index: Any, threshold: float = DEFAULT_THRESHOLD,
                    neighbours: int = DEFAULT_NEIGHBOURS) -> list[Group]:
    """The near-duplicate groups of `index` (see the module docstring)."""
    return group_pairs(near_pairs(index, threshold, neighbours))


def report(index: Any, groups: list[Group], threshold: float, neighbours: int) -> dict[str, Any]:
    """The JSON document of a duplicate search: settings, and per group its members and links."""
    def member(entry_id: str, best: dict[str, tuple[str, float]]) -> dict[str, Any]:
        entry = index.get(entry_id)
        partner, score = best[entry_id]
        return {"id": entry_id, "video_id": entry.video_id, "path": entry.path, "start": entry.start,
                "end": entry.end, "best_match": partner, "score": round(score, 6)}

    documents = []
    for number, group in enumerate(groups, 1):
        best = group.best
        documents.append({"group": number, "size": len(group.members),
                          "members": [member(m, best) for m in group.members],
                          "links": [{"a": a, "b": b, "score": round(s, 6)} for a, b, s in group.links]})
    return {"threshold": threshold, "neighbours": neighbours, "entries": len(index),
            "duplicates": sum(len(g.members) for g in groups), "groups": documents}


def write_report(document: dict[str, Any], out: str | os.PathLike) -> tuple[Path, Path]:
    """`out` as JSON (the whole document) and `out` with .csv (one row per member: group, id,
    path, best match in the group, its score), both written atomically."""
    out = Path(out)
    json_path = out if out.suffix == ".json" else out.with_suffix(".json")
    csv_path = json_path.with_suffix(".csv")
    write_json(json_path, document)
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(["group", "id", "path", "start", "end", "best_match", "score"])
    for group in document["groups"]:
        for m in group["members"]:
            writer.writerow([group["group"], m["id"], m["path"] or "", "" if m["start"] is None else m["start"],
                             "" if m["end"] is None else m["end"], m["best_match"], m["score"]])
    with atomic_open(csv_path, "w", encoding="utf-8") as handle:
        handle.write(text.getvalue())
    return json_path, csv_path


def index_duplicates(folder: str | os.PathLike, threshold: float | None = None, neighbours: int = DEFAULT_NEIGHBOURS,
                     out: str | os.PathLike | None = None) -> tuple[list[Group], float, int, tuple[Path, Path]]:
    """The near-duplicate groups of the index folder `folder`, their report written to `out` (default
    `folder/duplicates.json` and `.csv`): (groups, the threshold used, entries searched, report paths)."""
    index = open_store(folder)
    threshold = DEFAULT_THRESHOLD if threshold is None else threshold
    groups = find_duplicates(index, threshold, neighbours)
    written = write_report(report(index, groups, threshold, neighbours), out or Path(folder) / "duplicates.json")
    return groups, threshold, len(index), written
