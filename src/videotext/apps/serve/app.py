"""The HTTP search service behind `videotext serve INDEX`: a FastAPI app and its static page over an
index folder opened by the folder's owner (`videotext.apps.index_folder.open_index`), the same way
`videotext search` opens it: text queries through the folder's exported query side (no torch), the
run's model only where the folder has none or an example is uploaded.

Safety: files are looked up by entry id in the index, never built from a request path, so only
indexed files are served (no traversal). Every parameter is validated; user mistakes get a 4xx JSON
body `{"detail": …}`, never a 500. Swagger's /docs is off because it loads its assets from a CDN. No
endpoint writes (an upload lives in a temporary folder while it is decoded, nothing of it is kept).
Access: open on loopback; on any other address every endpoint but the page and its static files
needs the token (`access`). A newly published version of the folder is opened whole in the
background and swapped in between requests (`videotext.search.live`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from videotext.apps.index_folder import open_index
from videotext.apps.serve import handlers
from videotext.apps.serve.access import TokenGate, check_token
from videotext.apps.serve.media import Thumbnails
from videotext.apps.serve.schema import Problem
from videotext.errors import VideoTextError
from videotext.search.examples import MAX_UPLOAD_BYTES
from videotext.search.live import LiveIndex, Snapshot

STATIC = Path(__file__).resolve().parent / "static"
RELOAD_SECONDS = 1.0  # how often `serve` looks for a newly published version of its index folder


def create_app(index_dir: str | Path, run_dir: str | Path | None = None, *, searcher: Any = None,
               precision: str | None = None, threads: int | None = None, token: str | None = None,
               max_upload_bytes: int = MAX_UPLOAD_BYTES, reload_seconds: float = RELOAD_SECONDS) -> FastAPI:
    """The search app over the index folder `index_dir`.

    The folder is opened by `open_index` (`run_dir`, `precision`, `threads`: the model asked for, as
    `videotext search --run/--precision/--threads`; `searcher`: a query side of the caller's). With
    `token`, every endpoint but the page and its static files needs `Authorization: Bearer token`.
    Every `reload_seconds` the folder's published version is looked at: a new one (`index build`,
    `--update`) is opened the same way in the background and swapped in between requests, each
    request reading one version only; 0 serves the first version to the end."""
    check_token(token)

    def load_version(folder: Path, previous: Snapshot | None, version: str) -> Snapshot:
        opened = open_index(folder, run_dir, precision, threads, searcher=searcher,
                            previous=previous.searchable if previous is not None else None, version=version)
        return Snapshot(version, opened.warm(), {"thumbnails": Thumbnails()})

    live = LiveIndex(index_dir, load_version, interval=reload_seconds).start()
    app = FastAPI(title="videotext search", version="1", docs_url=None, redoc_url=None,
                  description="Search an index of videos with natural-language text.")
    app.state.live = live
    app.state.service = handlers.SearchService(live, max_upload_bytes)
    app.state.index = live.snapshot.index  # the first version
    if token is not None:
        app.middleware("http")(TokenGate(token))
    _routes(app, token is not None)
    return app


def _routes(app: FastAPI, with_token: bool) -> None:
    """The handlers (`handlers`), their error bodies, the static files and the page."""
    errors: dict[int | str, dict[str, Any]] = {400: {"model": Problem}, 404: {"model": Problem},
                                               422: {"model": Problem}}
    if with_token:
        errors[401] = {"model": Problem}
    app.add_exception_handler(StarletteHTTPException, handlers.http_error)
    app.add_exception_handler(VideoTextError, handlers.user_error)
    app.get("/health", response_model=handlers.Health)(handlers.health)
    app.get("/search", response_model=handlers.SearchResponse, responses=errors)(handlers.search)
    app.get("/search/like", response_model=handlers.SearchResponse, responses=errors)(handlers.search_like_id)
    app.post("/search/like", response_model=handlers.SearchResponse, responses={**errors, 413: {"model": Problem}},
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}}
             )(handlers.search_like_upload)
    app.get("/thumbnail/{entry_id:path}", responses={200: {"content": {"image/jpeg": {}}}, **errors},
            response_class=Response)(handlers.thumbnail)
    app.get("/video/{entry_id:path}", responses={200: {"content": {"video/mp4": {}}}, 206: {"description": "Partial"},
                                                 416: {"model": Problem}, **errors},
            response_class=FileResponse)(handlers.video)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.get("/", include_in_schema=False)(page)


def page() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html")


def serve(app: FastAPI, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run an app from `create_app` with uvicorn (blocking)."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level="info")
