"""One policy for bad records, shared by every reader (reader option ``on_bad=``).

Official annotation files as released hold a few records that break the schema's
rules: the ActivityNet Captions ``train.json`` has segments whose end precedes their
start, segments of zero length, and segments that end (by up to 0.01 s) after the
video's stated duration. A reader that refused such a file would be unusable, and one
that kept the records as they are would feed models impossible spans. Every reader
therefore sends each segment and caption it reads through a `BadRecords`, which
applies one of three policies:

- ``"repair"`` (default): swap a reversed start/end, clip an end to the video's
  duration; drop what cannot be repaired — a zero-length segment, a segment that
  starts at or after the video's end, an empty caption, an exact duplicate (the same
  start, end and sentence, or the same caption, of the same video in the same file).
- ``"drop"``: drop every bad record instead of repairing it.

Moment queries (Charades-STA, QVHighlights, ActivityNet's ``moments`` protocol) go through
`moment`: each span as above, a query left without a span dropped, a query whose video is
missing (no media file under the reader's ``video_dir``, or no known duration where the
format takes durations from a second file) dropped, and saliency clips past the video's end
dropped. Line-based files name the record ``line N``.
- ``"error"``: raise a `DataFormatError` naming the file, the record and the field.

Nothing is changed or dropped silently: every record touched is listed (kind, action,
file, record key, video, value) in `report()`, which readers keep in the dataset's
``meta["bad_records"]`` and ``videotext dataset convert`` prints and writes beside the
manifest.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from videotext.data.schema import Moment, Segment
from videotext.errors import DataFormatError

ON_BAD = ("repair", "drop", "error")

# kind → what is wrong with the record (the error message of on_bad="error")
KINDS = {
    "reversed": "segment ends before it starts",
    "past_duration": "segment ends after the video's duration",
    "outside_video": "segment starts at or after the end of the video",
    "zero_length": "segment has zero length",
    "empty_caption": "empty caption",
    "duplicate": "exact duplicate of an earlier record of the same video",
    "missing_video": "the query's video is not there (no media file under video_dir, or no known duration)",
    "clip_outside_video": "a saliency clip lies past the end of the video",
}


def check_on_bad(on_bad: str, source: object = "<reader>") -> str:
    """`on_bad` if it names a policy, else a DataFormatError listing the policies."""
    if on_bad not in ON_BAD:
        raise DataFormatError(source, "on_bad", f"unknown policy {on_bad!r}; known: {', '.join(ON_BAD)}")
    return on_bad


class BadRecords:
    """Applies the ``on_bad`` policy to the records of one read and keeps the report."""

    def __init__(self, on_bad: str = "repair", source: object = "<reader>"):
        self.on_bad = check_on_bad(on_bad, source)
        self.records: list[dict[str, Any]] = []
        # which file gave a video its first caption, and the captions a later file added
        # (one entry per video, so that a clip listed in two files is told from a duplicate)
        self._video_file: dict[str, str] = {}
        self._later_file: dict[tuple[str, str], str] = {}
        self._names: dict[str, str] = {}
        self.emptied: list[str] = []  # videos whose every text record was dropped
        self._moments_seen: dict[str, set[tuple]] = {}  # per video: (query, spans) kept so far

    # --- one record ----------------------------------------------------------------
    def _bad(self, kind: str, file: Path | str, key: str, video: str, value: Any, repaired: Any = None) -> bool:
        """Handle one bad record: True when it is kept (repaired), False when dropped."""
        if self.on_bad == "error":
            raise DataFormatError(file, key, f"{KINDS[kind]}: {value!r} (on_bad='repair' or 'drop' accepts the file)")
        keep = self.on_bad == "repair" and repaired is not None
        entry = {"kind": kind, "action": "repaired" if keep else "dropped", "file": str(file), "record": key,
                 "video": video, "value": value}
        if keep:
            entry["repaired"] = repaired
        self.records.append(entry)
        return keep

    def span(self, start: float, end: float, file: Path | str, key: str, video: str,
             duration: float | None = None) -> tuple[float, float] | None:
        """The (repaired) span of a segment, or None when it is dropped."""
        if end < start:
            if not self._bad("reversed", file, key, video, [start, end], [end, start]):
                return None
            start, end = end, start
        if duration is not None and end > duration:
            if start >= duration:
                self._bad("outside_video", file, key, video, {"span": [start, end], "duration": duration})
                return None
            if not self._bad("past_duration", file, key, video, {"span": [start, end], "duration": duration},
                             [start, duration]):
                return None
            end = duration
        if end == start:
            self._bad("zero_length", file, key, video, [start, end])
            return None
        return start, end

    def text(self, text: str, file: Path | str, key: str, video: str) -> str | None:
        """The stripped caption, or None when it is empty (dropped)."""
        text = text.strip()
        if not text:
            self._bad("empty_caption", file, key, video, text)
            return None
        return text

    def missing_video(self, file: Path | str, key: str, video: str, detail: str) -> None:
        """Report (or, under "error", raise for) a record whose video is missing; it is dropped."""
        self._bad("missing_video", file, key, video, detail)

    def moment(self, query: str, spans: Iterable[tuple[str, float, float]], file: Path | str, key: str, video: str,
               duration: float | None = None, clips: tuple[float, list[int], list[list[float]]] | None = None,
               qid: str | None = None) -> Moment | None:
        """A `Moment` from a query and its ``(record key, start, end)`` spans, bad parts repaired or
        dropped; None when the query is dropped (empty text, no span left, an exact duplicate).

        `clips` is ``(clip_length, clip ids, saliency rows)``; rows of clips past the video's
        end are dropped. A query released without spans (``spans`` empty) is kept as it is.
        """
        text = self.text(query, file, key, video)
        if text is None:
            return None
        given, kept = 0, []
        for span_key, start, end in spans:
            given += 1
            times = self.span(start, end, file, span_key, video, duration)
            if times is not None and times in kept:
                self._bad("duplicate", file, span_key, video, list(times))
            elif times is not None:
                kept.append(times)
        if given and not kept:
            return None
        identity = (text, tuple(kept))
        seen = self._moments_seen.setdefault(video, set())
        if identity in seen:
            self._bad("duplicate", file, key, video, [text, [list(t) for t in kept]])
            return None
        seen.add(identity)
        clip_length, clip_ids, saliency = clips if clips else (None, [], [])
        if clip_ids and duration is not None:
            limit = int(duration / clip_length)
            outside = [c for c in clip_ids if c >= limit]
            if outside:
                inside = [i for i, c in enumerate(clip_ids) if c < limit]
                repaired = self._bad("clip_outside_video", file, key, video,
                                     {"clip_ids": outside, "clips": limit, "clip_length": clip_length},
                                     [clip_ids[i] for i in inside])
                keep = inside if repaired else []  # "drop": the query keeps its spans, not its saliency
                clip_ids, saliency = [clip_ids[i] for i in keep], [saliency[i] for i in keep]
        return Moment(text, kept, id=qid, clip_length=clip_length if clip_ids else None,
                      clip_ids=list(clip_ids), saliency=[list(r) for r in saliency])

    # --- the records of one video --------------------------------------------------
    def segments(self, items: Iterable[tuple[str, str, float, float, str]], file: Path | str, video: str,
                 duration: float | None = None) -> list[Segment]:
        """Segments from ``(times key, sentence key, start, end, sentence)`` items, bad ones repaired or dropped.

        The two keys name the record's time field and its text field in the file
        (``v_x.timestamps[3]`` and ``v_x.sentences[3]`` in ActivityNet), so that a report
        or an error points at the field at fault.
        """
        out: list[Segment] = []
        seen: set[tuple[float, float, str]] = set()
        seen_any = False
        for times_key, text_key, start, end, sentence in items:
            seen_any = True
            times = self.span(start, end, file, times_key, video, duration)
            if times is None:
                continue
            text = self.text(sentence, file, text_key, video)
            if text is None:
                continue
            if (times[0], times[1], text) in seen:
                self._bad("duplicate", file, times_key, video, [times[0], times[1], text])
                continue
            seen.add((times[0], times[1], text))
            out.append(Segment(times[0], times[1], text))
        if seen_any and not out:
            self.emptied.append(video)
        return out

    def captions(self, items: Iterable[tuple[str, str]], file: Path | str, video: str,
                 existing: list[str] | None = None) -> list[str]:
        """New captions from ``(record key, text)`` items, empty ones and exact duplicates dropped.

        `existing` are the captions the video already has. A caption repeated within one
        file is a duplicate record; one that an earlier file already gave the same video
        (a clip listed in two split files, as in LSMDC) is the same caption, not a bad
        record, and is skipped without a report.
        """
        out: list[str] = []
        have = set(existing or ())
        name = self._names.setdefault(str(file), str(file))  # one string per file, shared by its videos
        first = self._video_file.setdefault(video, name)
        for key, raw in items:
            text = self.text(raw, file, key, video)
            if text is None:
                continue
            if text in out:
                self._bad("duplicate", file, key, video, text)
                continue
            if text in have:
                if self._later_file.get((video, text), first) == name:
                    self._bad("duplicate", file, key, video, text)
                else:  # the same caption listed again by another file: remember that this one did too
                    self._later_file[(video, text)] = name
                continue
            if name != first:
                self._later_file[(video, text)] = name
            out.append(text)
        return out

    # --- report --------------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        """``{"on_bad", "repaired": {kind: n}, "dropped": {kind: n}, "records": [...], "videos_without_text": [...]}``.

        ``videos_without_text`` lists the videos all of whose segments were dropped: they
        stay in the dataset (its published video count includes them) with no segments.
        """
        counts: dict[str, dict[str, int]] = {"repaired": {}, "dropped": {}}
        for entry in self.records:
            bucket = counts[entry["action"]]
            bucket[entry["kind"]] = bucket.get(entry["kind"], 0) + 1
        return {"on_bad": self.on_bad, **counts, "records": list(self.records),
                "videos_without_text": list(self.emptied)}


def summary(report: dict[str, Any] | None) -> str:
    """One line for a report: ``repaired 263 (reversed 2, past_duration 261); dropped 2 (zero_length 2)``."""
    if not report:
        return "no bad-record report"
    parts = []
    for action in ("repaired", "dropped"):
        counts = report.get(action) or {}
        total = sum(counts.values())
        detail = ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items()))
        parts.append(f"{action} {total}" + (f" ({detail})" if detail else ""))
    return f"bad records (on_bad={report.get('on_bad')}): " + "; ".join(parts)


def report_path(manifest: str | Path) -> Path:
    """Where ``videotext dataset convert`` writes the report: beside the manifest, ``<stem>.bad_records.json``."""
    manifest = Path(manifest)
    return manifest.with_name(f"{manifest.stem}.bad_records.json")


def examples(report: dict[str, Any] | None, limit: int = 3) -> list[str]:
    """One line per kind and action with its count and the first `limit` record keys (file: record)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for entry in (report or {}).get("records", []):
        groups.setdefault((entry["kind"], entry["action"]), []).append(entry)
    lines = []
    for (kind, action), entries in groups.items():
        shown = ", ".join(f"{Path(e['file']).name}: {e['record']}" for e in entries[:limit])
        more = f", … {len(entries) - limit} more" if len(entries) > limit else ""
        lines.append(f"  {kind} ({action} {len(entries)}): {shown}{more}")
    return lines
