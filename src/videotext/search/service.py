"""The HTTP search service behind `videotext serve INDEX`: FastAPI app + static web page.

    GET /search?q=…&k=…     ranked hits as JSON (id, path, start, end, score, thumbnail URL);
                            `by=shown|said|written|both|all` or a comma list: what is shown, said,
                            written on screen, fused (search.spoken; default all the index has);
                            a hit found by what is said or written carries its line and time
                            (`said`; `written` with its box)
                            `where=` keeps entries whose metadata pass a filter (search.filters)
                            `path` is relative to the indexed folder (`index.meta["root"]`),
                            else the file name: the server's own paths are never shown
    GET /search/like?id=…   query by example: the entries most like an indexed one (itself left out)
    POST /search/like?filename=…  the body an image or a video (≤ 64 MiB, else 413): the entries
                            most like it; one-line 400 when it is not an image or video or
                            cannot be decoded; decoded from a temporary file deleted before the answer
    GET /thumbnail/{id}     a JPEG frame from the clip's start (cached in memory)
    GET /video/{id}         the indexed file, with HTTP range requests (206) so browsers seek
    GET /health             liveness + what is indexed
    GET /openapi.json       the schema; GET / the search page (no external CDN)

Safety: files are looked up by entry id in the index, never built from a request path,
so only indexed files are served (no traversal). Every parameter is validated; user
mistakes get a 4xx JSON body `{"detail": …}`, never a 500. Swagger's /docs is off
because it loads its assets from a CDN. No endpoint writes (an upload
lives in a temporary folder while it is decoded, nothing of it is kept).

Access: on loopback the service is open. Served on any other address it needs a token
(`create_app(token=...)`, `videotext serve --token` or VIDEOTEXT_TOKEN): every endpoint then
answers 401 without `Authorization: Bearer TOKEN`, except the page itself and its static
files, which hold no data and ask for the token once (kept for the browser tab). Tokens are
compared in constant time (their SHA-256 digests, so not even the length leaks).
"""
from __future__ import annotations

import hashlib
import hmac
import io
import ipaddress
import mimetypes
import re
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Optional
from urllib.parse import quote

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from videotext.data.video import probe, read_frames
from videotext.errors import VideoTextError
from videotext.search.entries import Entry
from videotext.search.examples import MAX_UPLOAD_BYTES, save_upload
from videotext.search.filters import parse_filter
from videotext.search.index import Index
from videotext.search.live import LiveIndex, Snapshot
from videotext.search.spoken import load_lines, search_by

STATIC = Path(__file__).resolve().parent / "static"
BY_PATTERN = "^(all|both|(shown|said|written)(,(shown|said|written))*)$"  # search.spoken.parse_by's values
MAX_QUERY_CHARS = 500  # longer than any caption in the datasets read here; guards the text encoder
RELOAD_SECONDS = 1.0  # how often `serve` looks for a newly published version of its index folder
MAX_K = 100
THUMBNAIL_CACHE = 1024  # JPEGs kept in memory (~5 KB each at 160 px)
THUMBNAIL_SIZE = 240


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
    start: Optional[float] = None
    end: Optional[float] = None
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


def _model_of(index: Any) -> tuple[str, str | None]:
    """What decides the query model of an index: the model name and the run that built it."""
    return index.model, index.meta.get("run_dir")


def _load_searcher(index: Index, run_dir: str | Path | None, where: str | Path | None = None,
                   **settings: Any) -> Any:
    """The model of `run_dir`, else of the run that built `index` (search.runs.run_behind)."""
    from videotext.inference import load_model  # torch and the methods: not loaded when a `searcher` is given
    from videotext.search.runs import run_behind

    return load_model(run_behind(index, run_dir, where), **settings)


class _Thumbnails:
    """JPEG frames at clip starts, an LRU of `capacity` entries (decoding costs ~20 ms)."""

    def __init__(self, capacity: int = THUMBNAIL_CACHE, size: int = THUMBNAIL_SIZE):
        self.capacity, self.size = capacity, size
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, entry: Entry) -> bytes:
        with self._lock:
            if entry.id in self._cache:
                self._cache.move_to_end(entry.id)
                return self._cache[entry.id]
        data = self._render(entry)
        with self._lock:
            self._cache[entry.id] = data
            while len(self._cache) > self.capacity:
                self._cache.popitem(last=False)
        return data

    def _render(self, entry: Entry) -> bytes:
        from PIL import Image

        path = Path(entry.path)  # type: ignore[arg-type]
        if path.suffix.lower() in (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp"):
            with Image.open(path) as img:
                img = img.convert("RGB")
        else:
            info = probe(path)
            start = entry.start or 0.0
            end = entry.end if entry.end is not None else info.duration
            t = min(start + 0.1, (start + end) / 2, max(info.duration - 1e-3, 0.0))  # a frame inside the clip
            img = Image.fromarray(read_frames(path, [t])[0])
        img.thumbnail((self.size, self.size))
        out = io.BytesIO()
        img.save(out, format="JPEG", quality=85)
        return out.getvalue()


_RANGE_PART = re.compile(r"(\d{0,18})-(\d{0,18})", re.ASCII)  # 18 digits: any real file size, no huge ints


def _check_range(header: str, size: int) -> None:
    """Reject a malformed or unsatisfiable Range header with a JSON 4xx (Starlette would
    answer those in plain text); well-formed ones are served by FileResponse."""
    units, sep, spec = header.partition("=")
    if not sep or units.strip().lower() != "bytes" or len(header) > 512:
        raise HTTPException(400, f"Range {header[:80]!r}: only 'bytes=start-end' ranges are supported")
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts or len(parts) > 16:
        raise HTTPException(400, f"Range {header[:80]!r}: expected 1 to 16 byte ranges")
    for part in parts:
        match = _RANGE_PART.fullmatch(part.replace(" ", ""))
        if not match or not any(match.groups()):
            raise HTTPException(400, f"Range {header[:80]!r}: {part[:40]!r} is not start-end")
        first, last = match.groups()
        if first and last and int(first) > int(last):
            raise HTTPException(400, f"Range {header[:80]!r}: start after end in {part!r}")
        if (first and int(first) >= size) or (not first and int(last) == 0):
            raise HTTPException(416, f"Range {header[:80]!r}: nothing of the file's {size} bytes is in range",
                                headers={"Content-Range": f"bytes */{size}"})


def is_loopback(host: str) -> bool:
    """True for addresses only this machine reaches: 127.0.0.0/8, ::1 and "localhost"."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def require_token_for(host: str, token: str | None) -> None:
    """Refuse to serve beyond loopback without a token: one error saying how to give one."""
    if not is_loopback(host) and not token:
        raise VideoTextError(f"--host {host} serves every indexed video and title to anyone who can reach the port: "
                             "pass --token TOKEN (or set VIDEOTEXT_TOKEN); requests must then send "
                             "'Authorization: Bearer TOKEN' (the page asks for it once)")


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def token_matches(header: str | None, token: str) -> bool:
    """Whether an Authorization header carries `Bearer token` (compared in constant time)."""
    scheme, _, given = (header or "").strip().partition(" ")
    bearer = scheme.lower() == "bearer"
    same = hmac.compare_digest(_digest(given.strip() if bearer else ""), _digest(token))
    return bearer and same


def create_app(index_dir: str | Path, run_dir: str | Path | None = None, *, searcher: Any = None,
               max_k: int = MAX_K, max_query_chars: int = MAX_QUERY_CHARS, precision: str | None = None,
               threads: int | None = None, token: str | None = None,
               max_upload_bytes: int = MAX_UPLOAD_BYTES, reload_seconds: float = RELOAD_SECONDS) -> FastAPI:
    """The search app over the index folder `index_dir`.

    `searcher` answers `searcher.search(query, index, k)` with hits; by default the run that
    built the index (`index.meta["run_dir"]`, or `run_dir`) loaded with `load_model`
    (`precision`, `threads`: its inference settings, default the run config's). With `token`,
    every endpoint but the page and its static files needs `Authorization: Bearer token`.
    Every `reload_seconds` the folder's published version is looked at: a new one (`index build`,
    `--update`) is loaded whole in the background and swapped in between requests, each request
    reading one version only (`videotext.search.live`); 0 serves the first version to the end.
    """
    if token is not None and not token.strip():
        raise VideoTextError("the access token is empty; choose a long random one (e.g. python -c "
                             "'import secrets; print(secrets.token_urlsafe(24))')")
    given = searcher

    def load_version(folder: Path, previous: Snapshot | None, version: str) -> Snapshot:
        index = Index.load(folder)
        spoken = load_lines(folder)  # the text channels it was built with (--speech, --text)
        for lines in spoken.values():
            lines.query_vector("warm")  # its sentence encoder loaded now, from this version's folder
        if given is not None:
            model = given
        elif previous is not None and _model_of(previous.index) == _model_of(index):
            model = previous.searcher
        else:
            model = _load_searcher(index, run_dir, folder, precision=precision, threads=threads)
        return Snapshot(version, index, spoken, model, {"thumbnails": _Thumbnails()})

    live = LiveIndex(index_dir, load_version, interval=reload_seconds).start()
    model_lock = threading.Lock()  # one query at a time through the model (HF fast tokenizers are not re-entrant)
    app = FastAPI(title="videotext search", version="1", docs_url=None, redoc_url=None,
                  description="Search an index of videos with natural-language text.")
    app.state.live = live
    app.state.index, app.state.searcher = live.snapshot.index, live.snapshot.searcher  # the first version
    errors = {400: {"model": Problem}, 404: {"model": Problem}, 422: {"model": Problem}}
    if token is not None:
        errors[401] = {"model": Problem}

        @app.middleware("http")
        async def require_token(request: Request, call_next: Any) -> Response:
            path = request.url.path
            if path == "/" or path.startswith("/static/") or token_matches(request.headers.get("authorization"), token):
                return await call_next(request)
            return JSONResponse({"detail": "this server needs its access token: send 'Authorization: Bearer TOKEN'"},
                                status_code=401, headers={"WWW-Authenticate": "Bearer"})

    def entry_for(index: Any, entry_id: str, need_file: bool = True) -> Entry:
        if entry_id not in index:
            raise HTTPException(404, f"no indexed video or clip with id {entry_id!r}")
        entry = index.get(entry_id)
        if need_file and (not entry.path or not Path(entry.path).is_file()):
            raise HTTPException(404, f"the file of {entry_id!r} is not available")
        return entry

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(VideoTextError)
    async def user_error(request: Request, exc: VideoTextError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=400)

    @app.get("/health", response_model=Health)
    def health() -> Health:
        snap = live.snapshot
        index = snap.index
        return Health(status="ok", entries=len(index), model=index.model, dim=index.dim, kind=index.kind,
                      version=snap.version)

    @app.get("/search", response_model=SearchResponse, responses=errors)
    def search(
        q: str = Query(..., min_length=1, max_length=max_query_chars, description="Text query."),
        k: int = Query(10, ge=1, le=max_k, description="Number of results."),
        where: Optional[str] = Query(None, max_length=2000, description="Metadata filter, e.g. start >= 30 and "
                                     "split == \"test\" (the grammar of videotext.search.filters)."),
        by: str = Query("all", pattern=BY_PATTERN, description="Match what is shown, said (transcript lines), written "
                        "(on screen), both (shown and said), all (every channel the index has) or a comma list, "
                        "fused by `fusion`."),
        fusion: str = Query("standard", pattern="^(standard|rrf)$", description="standard: each ranking's scores "
                            "standardised over the candidates and summed; rrf: reciprocal rank fusion."),
    ) -> SearchResponse:
        text = q.strip()
        if not text:
            raise HTTPException(422, "q: the query is empty")
        snap = live.snapshot  # one version for the whole request
        index = snap.index
        if not len(index):
            return SearchResponse(query=text, k=k, results=[])
        options = {}
        if where is not None and where.strip():
            parse_filter(where)  # a malformed filter is a 400 naming the position, before the model runs
            options["where"] = where
        with model_lock:
            hits = search_by(snap.searcher, index, snap.spoken, text, k=k, by=by, fusion=fusion, **options)
        return SearchResponse(query=text, k=k, results=results_of(index, hits))

    def results_of(index: Any, hits: list) -> list[Result]:
        root = index.meta.get("root")
        results = []
        for h in hits:
            captions = h.meta.get("captions") or [None]
            has_file = bool(h.path)
            results.append(Result(
                id=h.id, video_id=h.video_id, rank=h.rank, score=float(h.score), path=public_path(h.path, root),
                start=h.start, end=h.end,
                caption=captions[0] if isinstance(captions, list) and captions else None,
                thumbnail=f"/thumbnail/{quote(h.id, safe='')}",
                video=f"/video/{quote(h.id, safe='')}" if has_file else None,
                said=SaidLine(**h.meta["said"]) if isinstance(h.meta.get("said"), dict) else None,
                written=WrittenLine(**h.meta["written"]) if isinstance(h.meta.get("written"), dict) else None))
        return results

    def like_options(searcher: Any, where: Optional[str]) -> dict[str, Any]:
        if not hasattr(searcher, "search_like"):
            raise HTTPException(400, "this server's searcher cannot search by example")
        if where is not None and where.strip():
            parse_filter(where)
            return {"where": where}
        return {}

    @app.get("/search/like", response_model=SearchResponse, responses=errors)
    def search_like_id(
        id: str = Query(..., min_length=1, max_length=1000, description="An indexed entry: the results look like it."),
        k: int = Query(10, ge=1, le=max_k, description="Number of results."),
        where: Optional[str] = Query(None, max_length=2000, description="Metadata filter (as /search)."),
    ) -> SearchResponse:
        snap = live.snapshot
        entry_for(snap.index, id, need_file=False)  # 404 for an unknown id
        options = like_options(snap.searcher, where)
        with model_lock:
            hits = snap.searcher.search_like(None, snap.index, k=k, like_id=id, **options)
        return SearchResponse(query=f"like:{id}", k=k, results=results_of(snap.index, hits))

    @app.post("/search/like", response_model=SearchResponse, responses={**errors, 413: {"model": Problem}},
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}})
    async def search_like_upload(
        request: Request,
        filename: str = Query("upload", max_length=200, description="The file's name (its extension names "
                              "an image format)."),
        k: int = Query(10, ge=1, le=max_k, description="Number of results."),
        where: Optional[str] = Query(None, max_length=2000, description="Metadata filter (as /search)."),
    ) -> SearchResponse:
        """The body is an image or a video (at most `max_upload_bytes`); it is decoded from a
        temporary file that is deleted before the answer, nothing is stored."""
        snap = live.snapshot
        options = like_options(snap.searcher, where)
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_upload_bytes:
            raise HTTPException(413, f"{filename}: {int(declared)} bytes is over the upload limit of "
                                     f"{max_upload_bytes} bytes")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_upload_bytes:
                raise HTTPException(413, f"{filename}: over the upload limit of {max_upload_bytes} bytes")
        if not body:
            raise HTTPException(400, f"{filename}: the upload is empty (send an image or a video as the body)")
        name = Path(filename).name or "upload"
        with tempfile.TemporaryDirectory(prefix="videotext-upload-") as folder:
            path = save_upload(bytes(body), name, folder)
            def like_upload() -> list:
                with model_lock:
                    return snap.searcher.search_like(path, snap.index, k=k, **options)

            try:
                hits = await run_in_threadpool(like_upload)
            except VideoTextError as exc:  # the message names the temporary file: name the upload instead
                message = str(exc).replace(str(path), name).splitlines()[0]
                raise HTTPException(400, message) from None
        return SearchResponse(query=f"like:{name}", k=k, results=results_of(snap.index, hits))

    @app.get("/thumbnail/{entry_id:path}", responses={200: {"content": {"image/jpeg": {}}}, **errors},
             response_class=Response)
    def thumbnail(entry_id: str) -> Response:
        snap = live.snapshot
        entry = entry_for(snap.index, entry_id)
        try:
            data = snap.extra["thumbnails"].get(entry)
        except (VideoTextError, OSError, ValueError, IndexError):  # the error names the server's path: not shown
            raise HTTPException(404, f"no frame could be read from {entry_id!r}") from None
        return Response(data, media_type="image/jpeg", headers={"Cache-Control": "max-age=3600"})

    @app.get("/video/{entry_id:path}", responses={200: {"content": {"video/mp4": {}}}, 206: {"description": "Partial"},
                                             416: {"model": Problem}, **errors}, response_class=FileResponse)
    def video(entry_id: str, request: Request) -> FileResponse:
        entry = entry_for(live.snapshot.index, entry_id)
        path = Path(entry.path)  # type: ignore[arg-type]
        if "range" in request.headers:
            _check_range(request.headers["range"], path.stat().st_size)
        media_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        return FileResponse(path, media_type=media_type)  # Starlette answers Range with 206 + Content-Range

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    return app


def serve(app: FastAPI, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run an app from `create_app` with uvicorn (blocking)."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level="info")
