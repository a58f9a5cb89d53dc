"""The channels of a search and the router between them: what is shown (the run's model, through the
index's vectors), what is said (transcript lines) and what is written on screen (OCR lines), each
ranked on its own and fused by one rule (`search.fusion`).

`--by` (CLI) and `by=` (HTTP, Python) name the channels: shown, said, written, both (shown and said),
all (every channel the index has) or a comma list. A channel named that the index lacks is one error
naming the `index build` option that adds it.
"""
from __future__ import annotations

import os
from typing import Any

from videotext.errors import VideoTextError
from videotext.search.entries import Entry, Hit
from videotext.search.fusion import DEFAULT_FUSION, FUSION_DEPTH, check_fusion, fuse_hits
from videotext.search.spoken import LINE_FILES, SpokenIndex

CHANNELS = ("shown", "said", "written")  # what is shown (the run's model), said (transcripts), written (on screen)
REBUILD = {"said": "--speech", "written": "--text"}
BY = (*CHANNELS, "both", "all")  # both: shown and said; all: every channel the index has
BY_PATTERN = "^(all|both|(shown|said|written)(,(shown|said|written))*)$"  # the values `parse_by` takes


def parse_by(by: str) -> list[str]:
    """The channels of a `--by` value: one of shown, said, written, both (shown and said), all (every
    channel), or a comma list of channels; one clear error otherwise."""
    names = [part.strip() for part in str(by).split(",") if part.strip()]
    if len(names) == 1 and names[0] in ("both", "all"):
        return ["shown", "said"] if names[0] == "both" else list(CHANNELS)
    wrong = [n for n in names if n not in CHANNELS]
    if not names or wrong:
        raise VideoTextError(f"--by {by!r}: expected shown, said, written, both, all or a comma list of "
                             f"{', '.join(CHANNELS)}")
    return list(dict.fromkeys(names))


def load_lines(folder: str | os.PathLike) -> dict[str, SpokenIndex]:
    """The text channels an index folder was built with: {"said": …, "written": …} (those present)."""
    found = {channel: SpokenIndex.load(folder, channel) for channel in LINE_FILES}
    return {channel: lines for channel, lines in found.items() if lines is not None}


def search_by(searcher: Any, index: Any, spoken: SpokenIndex | dict[str, SpokenIndex] | None, query: str, k: int = 10,
              by: str = "both", where: str | None = None, fusion: str = DEFAULT_FUSION) -> list[Hit]:
    """Hits for one query by what is shown (`searcher.search`, the method's), said or written
    (`SpokenIndex.search`: BM25 and sentence vectors over the lines), or several of them fused by
    `fusion`, each FUSION_DEPTH deep. `spoken` is the index's text channels (`load_lines`; a single
    SpokenIndex is its own channel). A channel named alone or in a list that the index lacks is an
    error naming the rebuild option; `both` and `all` take the channels the index has."""
    channels = parse_by(by)
    check_fusion(fusion)
    lines = spoken if isinstance(spoken, dict) else {} if spoken is None else {spoken.channel: spoken}
    if by.strip() in ("both", "all"):
        channels = [c for c in channels if c == "shown" or c in lines]
    for channel in channels:
        if channel != "shown" and channel not in lines:
            what = "transcripts" if channel == "said" else "on-screen text"
            raise VideoTextError(f"this index holds no {what}: rebuild it with "
                                 f"`videotext index build {REBUILD[channel]}`")
    if channels == ["shown"]:
        return searcher.search(query, index, k=k, where=where)

    def entry_of(entry_id: str) -> Entry | None:
        try:
            return index.get(entry_id)
        except (KeyError, VideoTextError):
            return None

    depth = k if len(channels) == 1 else max(FUSION_DEPTH, 5 * k)
    rankings = []
    for channel in channels:
        if channel == "shown":
            rankings.append(searcher.search(query, index, k=depth, where=where))
        else:
            rankings.append(lines[channel].search(query, entry_of, k=depth, where=where, fusion=fusion))
    return rankings[0] if len(rankings) == 1 else fuse_hits(rankings, k, fusion)
