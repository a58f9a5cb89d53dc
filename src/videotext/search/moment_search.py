"""A search for moments: the query's spans in the videos an index finds for it.

    query vector ─▶ index.search (shortlist: which videos) ─▶ per video, the query's cosine with each
    step (`search.moment_track`) ─▶ spans (`eval.span_finder.find_spans`) ─▶ the k best, as hits

The index's own vectors (whole videos or windows) choose the candidate videos: the distinct videos of
its `shortlist_width(k)` best entries, at most `videos` of them; every step of each is scored, so the
cost is that of the candidates' steps (10 hours at one step a second: 36 000 dot products and the
span search, well under a second on 2 cores). A moment is a `Hit` whose id is `VIDEO@START-END`, with
the start and end of the span, its score (`Span.score`: its mean step cosine minus its context's),
the metadata of its video, and `meta["entry"]`, the indexed entry of that video it was found through
(the HTTP service serves its file and thumbnails by that id).

A filter (`where`) keeps the moments that pass it: those of the videos it keeps, whose own start and
end pass what it says of `start` and `end`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from videotext.errors import VideoTextError
from videotext.search.entries import Hit, as_matrix
from videotext.search.filters import entry_fields, fields_of, matches, parse_filter
from videotext.search.moment_track import MomentTrack
from videotext.eval.span_finder import DEFAULT_SETTINGS, SpanSettings, find_spans
from videotext.search.shortlist import shortlist_width

CANDIDATE_VIDEOS = 20  # videos whose steps are scored for a top-k of at most this many moments
CLIP_KEYS = ("merged_ids", "index_score", "said", "written")  # a candidate entry's keys that are not its video's


def query_vector(searcher: Any, query: str) -> np.ndarray:
    """The unit vector [D] of a text query on a query side (the exported encoder or the run's model)."""
    encode = getattr(searcher, "query_vectors", None)
    if encode is None:
        raise VideoTextError(f"{type(searcher).__name__} cannot encode a query vector; a search for moments "
                             "needs the index's exported query side or its run")
    return as_matrix(encode([query]), "query vectors")[0]


def find_moments(index: Any, track: MomentTrack, query: np.ndarray, k: int = 10, where: str | None = None,
                 videos: int | None = None, settings: SpanSettings = DEFAULT_SETTINGS) -> list[Hit]:
    """The k best moments for the unit query vector `query` [D] (module docstring)."""
    if k < 1:
        raise VideoTextError(f"k must be at least 1, got {k}")
    if len(query) != track.dim:
        raise VideoTextError(f"query width {len(query)} does not match the moment track's {track.dim}")
    tree = parse_filter(where) if where else None
    on_span = tree is not None and bool(fields_of(tree) & {"start", "end"})
    # a filter on times is checked on the spans; the shortlist then takes any entry of a video
    shortlist = index.search(query[None], shortlist_width(k), where=None if on_span else where)[0]
    sources: dict[str, Hit] = {}
    for hit in shortlist:
        if hit.video_id in track and hit.video_id not in sources:
            sources[hit.video_id] = hit
            if len(sources) == (videos or max(k, CANDIDATE_VIDEOS)):
                break
    moments = []
    for video_id, source in sources.items():
        scores, starts, ends = track.scores(video_id, query)
        meta = {key: value for key, value in source.meta.items() if key not in CLIP_KEYS}
        for span in find_spans(scores, starts, ends, k=k, settings=settings):
            moment = Hit(id=f"{video_id}@{span.start:g}-{span.end:g}", path=source.path, start=span.start,
                         end=span.end, video_id=video_id, meta={**meta, "entry": source.id, "inside": span.inside},
                         score=span.score, rank=0)
            if tree is None or matches(tree, entry_fields(moment)):
                moments.append(moment)
    moments.sort(key=lambda hit: -hit.score)
    for rank, moment in enumerate(moments[:k], 1):
        moment.rank = rank
    return moments[:k]
