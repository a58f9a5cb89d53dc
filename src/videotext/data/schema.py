"""The one in-memory form of every video-text dataset.

Every reader in `videotext.data.readers` returns a `VideoTextDataset`; every loader,
extractor and evaluator consumes one. A dataset is a list of `Video`s, each with

- any number of free-form `captions` (MSR-VTT's 20 sentences, a COCO image's 5),
- timed `segments` with one sentence each (ActivityNet / YouCook2 events); the
  segments in order form the video's *paragraph* and are the clip level of the
  video → clips / paragraph → sentences hierarchy,
- optional `speech`: timed narration or ASR text (HowTo100M), used by the `words` expert,
- moment-retrieval queries (`moments`: a query, the span(s) of the video it describes, and
  per-clip saliency where a format has it: QVHighlights, Charades-STA, the synthetic long
  videos); a video without them offers one query per timed segment (`video_moments`), so
  ActivityNet Captions' and DiDeMo's sentences are moment queries too,

plus named `splits` (lists of video ids). It round-trips through a JSON manifest
(`save` / `load`) whose relative paths are resolved against the manifest's folder.

Images (COCO, CC3M, Tux Paint) are videos of kind ``"image"``: one frame, duration 0.
"""
from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from videotext.errors import DataFormatError
from videotext.io import write_json

MANIFEST_VERSION = 1
VIDEO_KINDS = ("video", "image")


@dataclass
class Segment:
    """A timed span of a video with one sentence (an event, a clip, a narration line)."""

    start: float  # seconds
    end: float  # seconds
    sentence: str

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass
class Moment:
    """A moment-retrieval query on one video: its text and the span(s) of the video it describes.

    `spans` are the ground truth in seconds, one or more (empty for queries released without
    answers, such as QVHighlights' test split). Formats that score clips for saliency keep it
    as `clip_ids` (clips of `clip_length` seconds numbered from 0) with one row of
    `saliency` scores per listed clip (QVHighlights: 2-s clips, three annotators, 0-4).
    `id` is the format's query id (QVHighlights' qid); without one, `moment_id` names it.
    """

    query: str
    spans: list[tuple[float, float]] = field(default_factory=list)
    id: str | None = None
    clip_length: float | None = None
    clip_ids: list[int] = field(default_factory=list)
    saliency: list[list[float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"query": self.query, "spans": [[s, e] for s, e in self.spans]}
        if self.id is not None:
            out["id"] = self.id
        if self.clip_ids:
            out.update(clip_length=self.clip_length, clip_ids=list(self.clip_ids),
                       saliency=[list(row) for row in self.saliency])
        return out

    @classmethod
    def from_dict(cls, data: Any, source: object, where: str) -> "Moment":
        try:
            spans = [(float(s), float(e)) for s, e in data.get("spans", []) or []]
            moment = cls(
                query=str(data["query"]), spans=spans, id=None if data.get("id") is None else str(data["id"]),
                clip_length=None if data.get("clip_length") is None else float(data["clip_length"]),
                clip_ids=[int(i) for i in data.get("clip_ids", []) or []],
                saliency=[[float(x) for x in row] for row in data.get("saliency", []) or []],
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise DataFormatError(source, where, f"expected an object with query, spans [[start, end], ...] "
                                                 f"and optional id, clip_length, clip_ids, saliency ({exc!r})") from None
        if len(moment.clip_ids) != len(moment.saliency) or (moment.clip_ids and not moment.clip_length):
            raise DataFormatError(source, where, f"{len(moment.clip_ids)} clip_ids but {len(moment.saliency)} "
                                                 "saliency rows (and clip_length needed with them)")
        return moment


@dataclass
class Video:
    """One video (or image) and all the text attached to it."""

    id: str
    path: str | None = None  # media file; relative paths are relative to the dataset root
    duration: float | None = None  # seconds; None when unknown until decoded
    captions: list[str] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    speech: list[Segment] = field(default_factory=list)
    moments: list[Moment] = field(default_factory=list)  # moment-retrieval queries (see `video_moments`)
    kind: str = "video"  # "video" or "image"
    feature_key: str | None = None  # key in a FeatureStore; defaults to `id`
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The key of this video's features in a FeatureStore."""
        return self.feature_key or self.id

    @property
    def paragraph(self) -> str:
        """The segment sentences in time order, joined: the paragraph of the hierarchy."""
        return " ".join(s.sentence.strip() for s in self.sorted_segments())

    def sorted_segments(self) -> list[Segment]:
        return sorted(self.segments, key=lambda s: (s.start, s.end))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["moments"] = [m.to_dict() for m in self.moments]
        # drop empty optional fields to keep manifests small and readable
        for name in ("segments", "speech", "moments", "meta", "captions"):
            if not out[name]:
                del out[name]
        for name in ("path", "duration", "feature_key"):
            if out[name] is None:
                del out[name]
        if out["kind"] == "video":
            del out["kind"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: object = "<manifest>") -> "Video":
        if not isinstance(data, dict) or "id" not in data:
            raise DataFormatError(source, "videos[]", "each video must be an object with an 'id'")
        vid = str(data["id"])
        where = f"videos[{vid}]"

        def segments(name: str) -> list[Segment]:
            items = data.get(name, []) or []
            try:
                return [Segment(float(s["start"]), float(s["end"]), str(s["sentence"])) for s in items]
            except (KeyError, TypeError, ValueError) as exc:
                raise DataFormatError(
                    source, f"{where}.{name}", f"expected objects with start, end, sentence ({exc!r})"
                ) from None

        captions = data.get("captions", []) or []
        if not isinstance(captions, list) or not all(isinstance(c, str) for c in captions):
            raise DataFormatError(source, f"{where}.captions", "expected a list of strings")
        kind = data.get("kind", "video")
        if kind not in VIDEO_KINDS:
            raise DataFormatError(source, f"{where}.kind", f"expected one of {VIDEO_KINDS}, got {kind!r}")
        duration = data.get("duration")
        moments = data.get("moments", []) or []
        if not isinstance(moments, list):
            raise DataFormatError(source, f"{where}.moments", "expected a list of moments")
        return cls(
            id=vid,
            path=data.get("path"),
            duration=None if duration is None else float(duration),
            captions=list(captions),
            segments=segments("segments"),
            speech=segments("speech"),
            moments=[Moment.from_dict(m, source, f"{where}.moments[{i}]") for i, m in enumerate(moments)],
            kind=kind,
            feature_key=data.get("feature_key"),
            meta=dict(data.get("meta", {}) or {}),
        )


def video_moments(video: Video) -> list[Moment]:
    """The moment queries of a video: its `moments`, else one per timed segment (its sentence and span)."""
    if video.moments:
        return video.moments
    return [Moment(s.sentence, [(s.start, s.end)]) for s in video.segments]


def moment_id(video: Video, index: int, moment: Moment) -> str:
    """A query's id: the format's own (`Moment.id`), else ``<video id>:<index among its moments>``."""
    return moment.id if moment.id is not None else f"{video.id}:{index}"


@dataclass
class MomentQuery:
    """One moment query of a dataset, as evaluation and training read it."""

    qid: str
    video: Video
    moment: Moment

    @property
    def query(self) -> str:
        return self.moment.query

    @property
    def spans(self) -> list[tuple[float, float]]:
        return self.moment.spans


@dataclass
class CaptionRef:
    """One caption as a retrieval query: which video it belongs to and its position."""

    video_id: str
    index: int  # position in Video.captions
    text: str


class VideoTextDataset:
    """Videos with their captions, segments and speech, plus named splits.

    `videos` keeps insertion order; `splits` maps a split name ("train", "val", "test",
    or any other) to an ordered list of video ids. `root` is the folder relative media
    paths are resolved against.
    """

    def __init__(
        self,
        name: str,
        videos: Iterable[Video] = (),
        splits: dict[str, list[str]] | None = None,
        root: str | Path | None = None,
        meta: dict[str, Any] | None = None,
    ):
        self.name = name
        self.videos: dict[str, Video] = {}
        for video in videos:
            self.add(video)
        self.splits: dict[str, list[str]] = {k: list(v) for k, v in (splits or {}).items()}
        self.root = Path(root) if root is not None else None
        self.meta: dict[str, Any] = dict(meta or {})
        # where exactly these videos come from, when a file says it: {"manifest": PATH} or with its
        # "split"; kept by `split` and by a `subset` of every video, set by `load` (an index built from
        # it checks and updates against that same source)
        self.origin: dict[str, str] | None = None

    # --- container -------------------------------------------------------------------
    def add(self, video: Video) -> None:
        if video.id in self.videos:
            raise DataFormatError(self.name, f"videos[{video.id}]", "duplicate video id")
        self.videos[video.id] = video

    def __len__(self) -> int:
        return len(self.videos)

    def __iter__(self) -> Iterator[Video]:
        return iter(self.videos.values())

    def __getitem__(self, video_id: str) -> Video:
        return self.videos[video_id]

    def __contains__(self, video_id: object) -> bool:
        return video_id in self.videos

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}={len(v)}" for k, v in self.splits.items())
        return f"VideoTextDataset({self.name!r}, videos={len(self)}, splits: {sizes or 'none'})"

    # --- splits ----------------------------------------------------------------------
    def split(self, name: str) -> "VideoTextDataset":
        """The sub-dataset of one split (same root and meta; the split becomes its only one)."""
        if name not in self.splits:
            raise DataFormatError(
                self.name, f"splits.{name}", f"no such split; available: {sorted(self.splits)}"
            )
        ids = self.splits[name]
        part = VideoTextDataset(
            f"{self.name}:{name}", (self.videos[i] for i in ids), {name: list(ids)}, self.root, self.meta
        )
        part.origin = {**self.origin, "split": name} if self.origin and "split" not in self.origin else None
        return part

    def subset(self, ids: Iterable[str], name: str | None = None) -> "VideoTextDataset":
        """A dataset of the given video ids, with every split restricted to them."""
        keep = [i for i in ids if i in self.videos]
        keep_set = set(keep)
        splits = {k: [i for i in v if i in keep_set] for k, v in self.splits.items()}
        part = VideoTextDataset(name or self.name, (self.videos[i] for i in keep), splits, self.root, self.meta)
        part.origin = self.origin if keep_set == set(self.videos) else None
        return part

    def carve_validation(
        self, source: str = "train", fraction: float | None = None, count: int | None = None,
        seed: int = 0, name: str = "val",
    ) -> None:
        """Move a seeded random part of split `source` into a new split `name`.

        Used where a dataset's official protocol has no validation split of its own
        (MSR-VTT 1k-A: its "val" list *is* the test set), so that model selection never
        looks at test. The draw is `random.Random(seed).sample` over the sorted ids, so
        it is the same on every machine and independent of file order.
        """
        if source not in self.splits:
            raise DataFormatError(self.name, f"splits.{source}", "no such split to carve validation from")
        ids = sorted(self.splits[source])
        if count is None:  # a fraction keeps at least one video on each side where there are two
            count = round(len(ids) * (0.1 if fraction is None else fraction))
            if len(ids) >= 2:
                count = min(max(count, 1), len(ids) - 1)
        if not 0 < count < len(ids):
            raise DataFormatError(
                self.name, f"splits.{source}", f"cannot carve {count} validation videos from {len(ids)}"
            )
        held = set(random.Random(seed).sample(ids, count))
        self.origin = None  # its splits are no longer those of a file
        self.splits[name] = [i for i in self.splits[source] if i in held]
        self.splits[source] = [i for i in self.splits[source] if i not in held]
        self.meta.setdefault("validation", {})[name] = {"from": source, "count": count, "seed": seed}

    # --- derived views ---------------------------------------------------------------
    def caption_refs(self) -> list[CaptionRef]:
        """Every caption as a query, in video order then caption order."""
        return [CaptionRef(v.id, i, c) for v in self for i, c in enumerate(v.captions)]

    def moment_queries(self, with_spans: bool = True) -> list[MomentQuery]:
        """Every moment query (`video_moments`), in video order; with `with_spans`, only those with a
        ground-truth span (the ones that can be trained on or evaluated)."""
        return [MomentQuery(moment_id(v, i, m), v, m) for v in self for i, m in enumerate(video_moments(v))
                if m.spans or not with_spans]

    def media_path(self, video: Video | str) -> Path | None:
        """Absolute path of a video's media file (None when the video has no file)."""
        if isinstance(video, str):
            video = self.videos[video]
        if video.path is None:
            return None
        path = Path(video.path)
        if not path.is_absolute() and self.root is not None:
            path = self.root / path
        return path

    def validate(self, source: object | None = None) -> None:
        """Check internal consistency: split ids exist, segment times are sane."""
        where = source or self.name
        for split, ids in self.splits.items():
            missing = [i for i in ids if i not in self.videos]
            if missing:
                raise DataFormatError(
                    where, f"splits.{split}", f"{len(missing)} ids are not videos, e.g. {missing[:3]}"
                )
        for video in self:
            for seg in video.segments + video.speech:
                if seg.end < seg.start:
                    raise DataFormatError(
                        where, f"videos[{video.id}]", f"segment ends before it starts: {seg}"
                    )
            for index, moment in enumerate(video.moments):
                for start, end in moment.spans:
                    if end < start:
                        raise DataFormatError(where, f"videos[{video.id}].moments[{index}]",
                                              f"span ends before it starts: [{start}, {end}]")

    # --- manifest I/O ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "videotext-manifest",
            "version": MANIFEST_VERSION,
            "name": self.name,
            "meta": self.meta,
            "splits": self.splits,
            "videos": [v.to_dict() for v in self],
        }

    def save(self, path: str | Path) -> Path:
        """Write the JSON manifest atomically. Media paths are stored relative to its folder."""
        path = Path(path)
        data = self.to_dict()
        root = self.root
        if root is not None:
            base = path.parent.resolve()
            for entry in data["videos"]:
                if "path" in entry:
                    entry["path"] = _relative_to(root / entry["path"], base)
        write_json(path, data)
        return path

    @classmethod
    def from_dict(cls, data: Any, source: object = "<manifest>", root: str | Path | None = None) -> "VideoTextDataset":
        if not isinstance(data, dict) or data.get("format") != "videotext-manifest":
            raise DataFormatError(source, "format", "not a videotext manifest (expected format: videotext-manifest)")
        if data.get("version", MANIFEST_VERSION) > MANIFEST_VERSION:
            raise DataFormatError(source, "version", f"made by a newer videotext (version {data['version']})")
        videos = data.get("videos")
        if not isinstance(videos, list):
            raise DataFormatError(source, "videos", "expected a list of videos")
        splits = data.get("splits", {}) or {}
        if not isinstance(splits, dict):
            raise DataFormatError(source, "splits", "expected an object of split name → list of ids")
        dataset = cls(
            str(data.get("name", "dataset")),
            (Video.from_dict(v, source) for v in videos),
            splits,
            root,
            data.get("meta", {}),
        )
        dataset.validate(source)
        return dataset

    @classmethod
    def load(cls, path: str | Path) -> "VideoTextDataset":
        """Read a JSON manifest; relative media paths resolve against its folder."""
        path = Path(path)
        if not path.is_file():
            raise DataFormatError(path, None, "manifest file not found")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise DataFormatError(path, None, f"not valid JSON: {exc}") from None
        dataset = cls.from_dict(data, path, root=path.parent.resolve())
        dataset.origin = {"manifest": str(path.resolve())}
        return dataset


def _relative_to(path: Path, base: Path) -> str:
    path = path.resolve()
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)
