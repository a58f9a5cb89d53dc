"""A real HTTP server on the loopback that answers as the Hugging Face Hub does, for tests.

The clients (huggingface_hub under transformers, open_clip, timm, faster-whisper) talk to it through
`HF_ENDPOINT=http://127.0.0.1:PORT`, exactly as they talk to the hub or a mirror:

- `HEAD|GET /{repo_id}/resolve/{revision}/{path}`: the file, with `X-Repo-Commit`, `ETag`,
  `Content-Length`, `Accept-Ranges` and `Range` requests (206), as the hub sends them; a missing
  file is 404 with `X-Error-Code: EntryNotFound`, a missing repo 404 with `RepoNotFound`;
- `GET /api/models/{repo_id}[/revision/{rev}]`: the model info (`sha`, `siblings`);
- `GET /api/models/{repo_id}/tree/{rev}[/{path}]`: the file listing (`type`, `path`, `size`, `oid`);
- `HEAD|GET /files/{name}`: a plain file by URL (released checkpoints), with ranges.

Faults for the error paths (a key ending in `*` matches every path it starts): `faults[path] = "html"` (an HTML page instead of the file),
`"truncate:N"` (announce the whole length, send N bytes, close), `"500"`. Every request is
recorded in `requests` as (method, path), so a test can assert that a second run made none, and its
`Range` header (or "") in `ranges`, so a test can see a download continue.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

HTML_PAGE = b"<!DOCTYPE html><html><head><title>Sign in</title></head><body>Please sign in.</body></html>"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class LocalHub:
    """Repos (`add_repo`) and plain files (`add_file`) served on 127.0.0.1 until `stop()`."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.repos: dict[str, dict[str, Path]] = {}
        self.files: dict[str, Path] = {}
        self.faults: dict[str, str] = {}
        self.requests: list[tuple[str, str]] = []
        self.ranges: list[str] = []
        self._etags: dict[Path, str] = {}
        self._server: ThreadingHTTPServer | None = None

    # --- content -------------------------------------------------------------------------
    def add_repo(self, repo_id: str, files: dict[str, Path | bytes | str] | Path) -> str:
        """Serve `files` (name -> path, bytes or text; or a folder, every file in it) as hub repo `repo_id`."""
        folder = self.root / "repos" / repo_id
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        if isinstance(files, (str, Path)) and Path(files).is_dir():
            files = {str(p.relative_to(files)): p for p in sorted(Path(files).rglob("*")) if p.is_file()}
        served = {}
        for name, content in files.items():
            target = folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, Path):
                shutil.copyfile(content, target)
            elif isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content)
            served[name] = target
        self.repos[repo_id] = served
        return self.commit(repo_id)

    def add_file(self, name: str, path: Path) -> str:
        """Serve `path` at `/files/{name}`; returns its URL."""
        self.files[name] = Path(path)
        return f"{self.url}/files/{name}"

    def commit(self, repo_id: str) -> str:
        """The repo's commit hash: 40 hex digits derived from its files."""
        digest = hashlib.sha1(repo_id.encode())
        for name, path in sorted(self.repos[repo_id].items()):
            digest.update(name.encode() + self.etag(path).encode())
        return digest.hexdigest()

    def etag(self, path: Path) -> str:
        if path not in self._etags:
            self._etags[path] = _sha256(path)
        return self._etags[path]

    def hub_requests(self) -> list[tuple[str, str]]:
        return list(self.requests)

    # --- server --------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None, "start() the hub first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "LocalHub":
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                hub._answer(self, head=True)

            def do_GET(self) -> None:
                hub._answer(self, head=False)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def env(self, cache: Path) -> dict[str, str]:
        """Environment of a client process that uses this hub and its own cache, online."""
        env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                                                                "HF_DATASETS_OFFLINE")}
        env.update(HF_ENDPOINT=self.url, HF_HOME=str(cache), HF_HUB_DISABLE_TELEMETRY="1",
                   HF_HUB_ETAG_TIMEOUT="5", HF_HUB_DOWNLOAD_TIMEOUT="10", XDG_CACHE_HOME=str(cache / "xdg"))
        env.pop("HF_HUB_CACHE", None)
        return env

    # --- answers -------------------------------------------------------------------------
    def _answer(self, request: BaseHTTPRequestHandler, head: bool) -> None:
        path = unquote(urlsplit(request.path).path)
        self.requests.append(("HEAD" if head else "GET", path))
        self.ranges.append(request.headers.get("Range", ""))
        fault = self.faults.get(path, "") or next(
            (f for key, f in self.faults.items() if key.endswith("*") and path.startswith(key[:-1])), "")
        if fault == "500":
            return self._send(request, 500, b"internal error", {"Content-Type": "text/plain"}, head)
        if fault == "html":
            return self._send(request, 200, HTML_PAGE, {"Content-Type": "text/html; charset=utf-8"}, head)
        if path.startswith("/files/"):
            file = self.files.get(path[len("/files/"):])
            if file is None:
                return self._send(request, 404, b"not found", {"Content-Type": "text/plain"}, head)
            return self._send_file(request, file, {}, head, fault)
        if path.startswith("/api/models/"):
            return self._api(request, path[len("/api/models/"):], head)
        match = re.fullmatch(r"/(.+?)/resolve/([^/]+)/(.+)", path)
        if not match:
            return self._send(request, 404, b"not found", {"Content-Type": "text/plain"}, head)
        repo_id, revision, name = match.groups()
        if repo_id not in self.repos:
            return self._send(request, 404, b"Repository not found",
                              {"X-Error-Code": "RepoNotFound", "Content-Type": "text/plain"}, head)
        commit = self.commit(repo_id)
        if revision not in ("main", commit):
            return self._send(request, 404, b"Revision not found",
                              {"X-Error-Code": "RevisionNotFound", "Content-Type": "text/plain"}, head)
        file = self.repos[repo_id].get(name)
        if file is None:
            return self._send(request, 404, b"Entry not found", {"X-Error-Code": "EntryNotFound",
                                                                 "X-Repo-Commit": commit,
                                                                 "Content-Type": "text/plain"}, head)
        return self._send_file(request, file, {"X-Repo-Commit": commit, "ETag": f'"{self.etag(file)}"'}, head, fault)

    def _api(self, request: BaseHTTPRequestHandler, rest: str, head: bool) -> None:
        repo_id, kind, revision, sub = rest, "", "main", ""
        for marker in ("/revision/", "/tree/"):
            if marker in rest:
                repo_id, tail = rest.split(marker, 1)
                kind = marker.strip("/")
                revision, _, sub = tail.partition("/")
        if repo_id not in self.repos:
            return self._send(request, 404, json.dumps({"error": "Repository not found"}).encode(),
                              {"X-Error-Code": "RepoNotFound", "Content-Type": "application/json"}, head)
        commit = self.commit(repo_id)
        files = self.repos[repo_id]
        if kind == "tree":
            listing = [{"type": "file", "path": name, "size": path.stat().st_size, "oid": self.etag(path)[:40]}
                       for name, path in sorted(files.items()) if name.startswith(sub)]
            body = json.dumps(listing).encode()
        else:
            body = json.dumps({"id": repo_id, "modelId": repo_id, "sha": commit, "private": False, "tags": [],
                               "siblings": [{"rfilename": name} for name in sorted(files)]}).encode()
        return self._send(request, 200, body, {"Content-Type": "application/json", "X-Repo-Commit": commit}, head)

    @staticmethod
    def _send(request: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str], head: bool) -> None:
        request.send_response(status)
        for key, value in headers.items():
            request.send_header(key, value)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        if not head:
            request.wfile.write(body)

    @staticmethod
    def _send_file(request: BaseHTTPRequestHandler, file: Path, headers: dict[str, str], head: bool,
                   fault: str) -> None:
        size = file.stat().st_size
        start, end, status = 0, size - 1, 200
        ranged = request.headers.get("Range", "")
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", ranged.strip())
        if match:
            start = int(match.group(1))
            end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            if start >= size:
                request.send_response(416)
                request.send_header("Content-Range", f"bytes */{size}")
                request.send_header("Content-Length", "0")
                request.end_headers()
                return
            status = 206
        request.send_response(status)
        for key, value in headers.items():
            request.send_header(key, value)
        request.send_header("Content-Type", "application/octet-stream")
        request.send_header("Accept-Ranges", "bytes")
        request.send_header("Content-Length", str(end - start + 1))
        if status == 206:
            request.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        request.end_headers()
        if head:
            return
        limit = end - start + 1
        if fault.startswith("truncate:"):
            limit = min(limit, max(0, int(fault.split(":", 1)[1]) - start))
        with open(file, "rb") as handle:
            handle.seek(start)
            left = limit
            while left > 0:
                block = handle.read(min(left, 1 << 20))
                if not block:
                    break
                try:
                    request.wfile.write(block)
                except (BrokenPipeError, ConnectionResetError):
                    return
                left -= len(block)
        if fault.startswith("truncate:"):
            request.close_connection = True
            try:
                request.wfile.flush()
                request.connection.shutdown(2)
            except OSError:
                pass
