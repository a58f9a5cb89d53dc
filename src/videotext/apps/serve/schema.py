"""What the HTTP API answers: its response models, and the hits of a search as results (file paths
relative to the indexed folder, never the server's own)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional
from urllib.parse import quote

from pydantic import BaseModel, Field


class SaidLine(BaseModel):
    text: str
    start: float = Field(..., description="Seconds into the video where the line starts: the page plays from here.")
    end: float
    source: str = Field(..., description="subtitle, asr:ENGINE:MODEL for recognized speech, ocr:ENGINE:MODEL for "
                        "text read on screen.")
    confidence: Optional[float] = None


class WrittenLine(SaidLine):
    box: list[float] = Field(..., description="Where the text is on screen: pixel box [x0, y0, x1, y1] of the video.")


class Result(BaseModel):
    id: str
    video_id: str
    rank: int
    score: float
    path: Optional[str] = Field(None, description="The file, relative to the indexed folder (its name when outside it).")
    start: Optional[float] = Field(None, description="Seconds into the video where the hit starts: a clip's or a "
                                   "moment's start, 0 for a whole video.")
    end: Optional[float] = Field(None, description="Seconds into the video where the hit ends.")
    duration: Optional[float] = Field(None, description="The whole video's duration in seconds.")
    entry: Optional[str] = Field(None, description="For a moment (`moments=true`): the indexed entry of its video "
                                 "it was found through, whose file, thumbnails and neighbours (`/search/like`) "
                                 "the links name.")
    caption: Optional[str] = None
    thumbnail: str
    video: Optional[str] = None
    said: Optional[SaidLine] = Field(None, description="The transcript line that matched (search by what is said).")
    written: Optional[WrittenLine] = Field(None, description="The on-screen line that matched (search by what is "
                                           "written).")


class SearchResponse(BaseModel):
    query: str
    k: int
    results: list[Result]


class Health(BaseModel):
    status: str
    entries: int
    model: str
    dim: int
    kind: str
    version: str  # the published version of the index folder being served (`videotext.search.live`)
    store: dict[str, Any] = {}  # the store and what it serves: a Milvus alias and the collection behind it


class Problem(BaseModel):
    detail: Any


def public_path(path: str | None, root: str | None) -> str | None:
    """What the API shows of a file path: relative to the indexed folder `root` when the
    file lies in it, else the bare file name, never the server's absolute path."""
    if not path:
        return None
    file = Path(path)
    if root and file.is_absolute() and file.is_relative_to(root):
        return file.relative_to(root).as_posix()
    return file.name


def results_of(index: Any, hits: list) -> list[Result]:
    """Search hits as API results: public paths, the first caption, thumbnail and video links, and the
    spoken or written line that matched. A moment's links are those of the indexed entry it was found
    through (`meta["entry"]`), its thumbnail the frame at its start. A whole video of an index built
    before entries carried their duration ends where the file does, when that is known."""
    root = index.meta.get("root")
    results = []
    for h in hits:
        captions = h.meta.get("captions") or [None]
        duration = h.meta.get("duration")
        source = quote(str(h.meta.get("entry", h.id)), safe="")
        results.append(Result(
            id=h.id, video_id=h.video_id, rank=h.rank, score=float(h.score), path=public_path(h.path, root),
            start=h.start, end=h.end if h.end is not None else duration, duration=duration,
            entry=h.meta.get("entry"),
            caption=captions[0] if isinstance(captions, list) and captions else None,
            thumbnail=f"/thumbnail/{source}" + (f"?t={h.start:g}" if "entry" in h.meta else ""),
            video=f"/video/{source}" if h.path else None,
            said=SaidLine(**h.meta["said"]) if isinstance(h.meta.get("said"), dict) else None,
            written=WrittenLine(**h.meta["written"]) if isinstance(h.meta.get("written"), dict) else None))
    return results
