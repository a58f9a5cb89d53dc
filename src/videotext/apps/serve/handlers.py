"""The HTTP API's handlers, one named function each. Every handler reads the version of the index
being served once (`SearchService.snapshot`) and answers from it alone, so a version swapped in
meanwhile never mixes into one answer.

    GET /search?q=…&k=…     ranked hits (id, path, start, end, duration, score, thumbnail URL); `by` picks
                            what is shown, said, written (or both, all, a comma list), fused by `fusion`;
                            a hit found by what is said or written carries its line and time (`said`,
                            `written` with its box); `where=` keeps entries whose metadata pass a filter;
                            `moments=true` answers the best spans of videos (their start and end),
                            `span=NAME=VALUE` (repeatable) sets its span finder
    GET /search/like?id=…   the entries most like an indexed one (itself left out)
    POST /search/like?filename=…  the body an image or a video (≤ 64 MiB, else 413): the entries most
                            like it; decoded from a temporary file deleted before the answer
    GET /thumbnail/{id}     a JPEG frame from the clip's start, or from `t` seconds (cached in memory)
    GET /video/{id}         the indexed file, with HTTP range requests (206) so browsers seek
    GET /health             liveness, what is indexed, the version served and the store behind it
"""
from __future__ import annotations

import mimetypes
import tempfile
import threading
from pathlib import Path
from typing import Any, Optional

from fastapi import HTTPException, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from videotext.apps.serve.media import check_range
from videotext.apps.serve.schema import Health, SearchResponse, results_of
from videotext.errors import VideoTextError
from videotext.search.channels import BY_PATTERN
from videotext.search.entries import Entry
from videotext.search.examples import save_upload
from videotext.search.filters import parse_filter
from videotext.search.live import LiveIndex, Snapshot

MAX_QUERY_CHARS = 500  # longer than any caption in the datasets read here; guards the text encoder
MAX_K = 100
WHERE = "Metadata filter, e.g. start >= 30 and split == \"test\" (the grammar of videotext.search.filters)."


class SearchService:
    """What the handlers share: the served index (`live`), one lock for the query side (HF fast
    tokenizers are not re-entrant) and the upload limit."""

    def __init__(self, live: LiveIndex, max_upload_bytes: int):
        self.live, self.max_upload_bytes = live, max_upload_bytes
        self.query_lock = threading.Lock()

    @property
    def snapshot(self) -> Snapshot:
        return self.live.snapshot


def service(request: Request) -> SearchService:
    return request.app.state.service


def entry_for(index: Any, entry_id: str, need_file: bool = True) -> Entry:
    """The indexed entry `entry_id` (404 when unknown, or when its file is needed and gone)."""
    if entry_id not in index:
        raise HTTPException(404, f"no indexed video or clip with id {entry_id!r}")
    entry = index.get(entry_id)
    if need_file and (not entry.path or not Path(entry.path).is_file()):
        raise HTTPException(404, f"the file of {entry_id!r} is not available")
    return entry


def filter_of(where: Optional[str]) -> Optional[str]:
    """A `where` filter checked before the model runs (a malformed one is a 400 naming the position)."""
    if where is None or not where.strip():
        return None
    parse_filter(where)
    return where


async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None))


async def user_error(request: Request, exc: VideoTextError) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=400)


def health(request: Request) -> Health:
    snap = service(request).snapshot
    index = snap.index
    return Health(status="ok", entries=len(index), model=index.model, dim=index.dim, kind=index.kind,
                  version=snap.version, store=index.describe())


def search(
    request: Request,
    q: str = Query(..., min_length=1, max_length=MAX_QUERY_CHARS, description="Text query."),
    k: int = Query(10, ge=1, le=MAX_K, description="Number of results."),
    where: Optional[str] = Query(None, max_length=2000, description=WHERE),
    by: str = Query("all", pattern=BY_PATTERN, description="Match what is shown, said (transcript lines), written "
                    "(on screen), both (shown and said), all (every channel the index has) or a comma list, "
                    "fused by `fusion`."),
    fusion: str = Query("standard", pattern="^(standard|rrf)$", description="standard: each ranking's scores "
                        "standardised over the candidates and summed; rrf: reciprocal rank fusion."),
    moments: bool = Query(False, description="Answer the best spans of videos (start, end, score) found in the "
                          "index's moment track, instead of its entries."),
    span: Optional[list[str]] = Query(None, description="With `moments=true`: a span finder "
                                      "setting NAME=VALUE over its defaults (repeatable: `span=max_steps=6`)."),
) -> SearchResponse:
    text = q.strip()
    if not text:
        raise HTTPException(422, "q: the query is empty")
    served = service(request)
    snap = served.snapshot  # one version for the whole request
    if not len(snap.index):
        return SearchResponse(query=text, k=k, results=[])
    where = filter_of(where)
    with served.query_lock:
        hits = snap.searchable.search(text, k=k, by=by, where=where, fusion=fusion, moments=moments,
                                      spans=span or None)
    return SearchResponse(query=text, k=k, results=results_of(snap.index, hits))


def search_like_id(
    request: Request,
    id: str = Query(..., min_length=1, max_length=1000, description="An indexed entry: the results look like it."),
    k: int = Query(10, ge=1, le=MAX_K, description="Number of results."),
    where: Optional[str] = Query(None, max_length=2000, description="Metadata filter (as /search)."),
) -> SearchResponse:
    snap = service(request).snapshot
    entry_for(snap.index, id, need_file=False)  # 404 for an unknown id
    hits = snap.searchable.like(id=id, k=k, where=filter_of(where))
    return SearchResponse(query=f"like:{id}", k=k, results=results_of(snap.index, hits))


async def search_like_upload(
    request: Request,
    filename: str = Query("upload", max_length=200, description="The file's name (its extension names "
                          "an image format)."),
    k: int = Query(10, ge=1, le=MAX_K, description="Number of results."),
    where: Optional[str] = Query(None, max_length=2000, description="Metadata filter (as /search)."),
) -> SearchResponse:
    """The body is an image or a video (at most the server's upload limit); it is decoded from a
    temporary file that is deleted before the answer, nothing is stored."""
    served = service(request)
    snap = served.snapshot
    where = filter_of(where)
    body = await read_upload(request, filename, served.max_upload_bytes)
    name = Path(filename).name or "upload"
    with tempfile.TemporaryDirectory(prefix="videotext-upload-") as folder:
        path = save_upload(body, name, folder)

        def like_upload() -> list:
            with served.query_lock:
                return snap.searchable.like(path, k=k, where=where)

        try:
            hits = await run_in_threadpool(like_upload)
        except VideoTextError as exc:  # the message names the temporary file: name the upload instead
            raise HTTPException(400, str(exc).replace(str(path), name).splitlines()[0]) from None
    return SearchResponse(query=f"like:{name}", k=k, results=results_of(snap.index, hits))


async def read_upload(request: Request, filename: str, limit: int) -> bytes:
    """The request body, refused (413) past `limit` bytes, as declared or as it arrives; 400 when empty."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"{filename}: {int(declared)} bytes is over the upload limit of {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise HTTPException(413, f"{filename}: over the upload limit of {limit} bytes")
    if not body:
        raise HTTPException(400, f"{filename}: the upload is empty (send an image or a video as the body)")
    return bytes(body)


def thumbnail(request: Request, entry_id: str,
              t: Optional[float] = Query(None, ge=0.0, le=1e7, description="Seconds into the video: the frame "
                                         "there (a moment's start) instead of the clip's start.")) -> Response:
    snap = service(request).snapshot
    entry = entry_for(snap.index, entry_id)
    try:
        data = snap.extra["thumbnails"].get(entry, t)
    except (VideoTextError, OSError, ValueError, IndexError):  # the error names the server's path: not shown
        raise HTTPException(404, f"no frame could be read from {entry_id!r}") from None
    return Response(data, media_type="image/jpeg", headers={"Cache-Control": "max-age=3600"})


def video(request: Request, entry_id: str) -> FileResponse:
    entry = entry_for(service(request).snapshot.index, entry_id)
    path = Path(entry.path)  # type: ignore[arg-type]
    if "range" in request.headers:
        check_range(request.headers["range"], path.stat().st_size)
    media_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return FileResponse(path, media_type=media_type)  # Starlette answers Range with 206 + Content-Range
