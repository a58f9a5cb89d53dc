"""A real HTTP server on the loopback that answers as the Hugging Face Hub does, for tests.

The clients (huggingface_hub under transformers, open_clip, timm, faster-whisper) talk to it through
`HF_ENDPOINT=http://127.0.0.1:PORT`, exactly as they talk to the hub or a mirror:

- `HEAD|GET /{repo_id}/resolve/{revision}/{path}`: the file, with `X-Repo-Commit`, `ETag`,
  `Content-Length`, `Accept-Ranges` and `Range` requests (206), as the hub sends them; a missing
  file is 404 with `X-Error-Code: EntryNotFound`, a missing repo 404 with `RepoNotFound`;
- `GET /api/models/{repo_id}[/revision/{rev}]`: the model info (`sha`, `siblings`);
- `GET /api/models/{repo_id}/tree/{rev}[/{path}]`: the file listing (`type`, `path`, `size`, `oid`);
- `HEAD|GET /files/{name}`: a plain file by URL (released checkpoints), with ranges.

Uploads, as `huggingface_hub`'s `HfApi` sends them (`create_repo`, `create_branch`, `create_commit`,
`upload_folder`) over the LFS protocol (clients set `HF_HUB_DISABLE_XET=1`, `env`, since this server
does not speak Xet):

- `POST /api/repos/create` (409 when it exists), `GET /api/models/{repo_id}/refs`,
  `POST /api/models/{repo_id}/branch/{branch}`, `POST /api/validate-yaml`;
- `POST /api/models/{repo_id}/preupload/{revision}`: each file's upload mode (`lfs` for weights and
  graphs and anything from 1 MiB, else `regular`);
- `POST /{repo_id}.git/info/lfs/objects/batch` (upload actions for the objects the repo lacks), then
  `PUT /lfs-upload/{repo_id}/{oid}` (the bytes, checked against their sha256) and `POST /lfs-verify/{oid}`;
- `POST /api/models/{repo_id}/commit/{branch}` (ndjson: a header, inline `file`s in base64, `lfsFile`s
  by oid, deletions): the one step that changes a revision, refused (412) when `parentCommit` is not
  the branch's head.

Writes need a bearer token (any; the LFS upload URL itself stands for it, as S3's pre-signed URLs do); `private(repo_id, token)` makes a repo answer only that token (401
`RepoNotFound` otherwise, as the hub does).

Faults for the error paths (a key ending in `*` matches every path it starts): `faults[path] = "html"` (an HTML page instead of the file),
`"truncate:N"` (announce the whole length, send N bytes, close), `"500"`, `"hang"` (read the request,
answer nothing until `release()`: a client killed meanwhile is a push interrupted halfway). Every request is
recorded in `requests` as (method, path), so a test can assert that a second run made none, and its
`Range` header (or "") in `ranges`, so a test can see a download continue.
"""
from __future__ import annotations

import base64
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
        self.repos: dict[str, dict[str, Path]] = {}  # the files at each repo's main
        self.branches: dict[str, dict[str, str]] = {}  # repo -> branch -> commit
        self.trees: dict[str, dict[str, Path]] = {}  # commit -> its files
        self.owners: dict[str, str] = {}  # commit -> its repo
        self.tokens: dict[str, str] = {}  # private repo -> the token that may read it
        self.lfs: dict[tuple[str, str], Path] = {}  # (repo, sha256) -> a large file uploaded to that repo
        self.files: dict[str, Path] = {}
        self.faults: dict[str, str] = {}
        self.requests: list[tuple[str, str]] = []
        self.ranges: list[str] = []
        self._etags: dict[Path, str] = {}
        self._server: ThreadingHTTPServer | None = None
        self._lock = threading.RLock()
        self._released = threading.Event()

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
        digest = hashlib.sha1(repo_id.encode())
        for name, path in sorted(served.items()):
            digest.update(name.encode() + self.etag(path).encode())
        return self._set_head(repo_id, "main", digest.hexdigest(), served)

    def add_file(self, name: str, path: Path) -> str:
        """Serve `path` at `/files/{name}`; returns its URL."""
        self.files[name] = Path(path)
        return f"{self.url}/files/{name}"

    def commit(self, repo_id: str, revision: str = "main") -> str:
        """The commit (40 hex digits) a branch of the repo points at."""
        return self.branches[repo_id][revision]

    def private(self, repo_id: str, token: str) -> None:
        """Make `repo_id` answer only requests that send `token`."""
        self.tokens[repo_id] = token

    def release(self) -> None:
        """Let every request held by a `hang` fault go on (and those to come)."""
        self._released.set()

    def _set_head(self, repo_id: str, branch: str, commit: str, files: dict[str, Path]) -> str:
        with self._lock:
            self.trees[commit], self.owners[commit] = dict(files), repo_id
            self.branches.setdefault(repo_id, {})[branch] = commit
            if branch == "main":
                self.repos[repo_id] = dict(files)
        return commit

    def _tree(self, repo_id: str, revision: str) -> tuple[str, dict[str, Path]] | None:
        """(commit, files) of a branch or a commit of the repo; None when it has no such revision."""
        commit = self.branches.get(repo_id, {}).get(revision, revision)
        if self.owners.get(commit) != repo_id:
            return None
        return commit, self.trees[commit]

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

            def do_POST(self) -> None:
                hub._write(self)

            def do_PUT(self) -> None:
                hub._write(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._released.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def env(self, cache: Path) -> dict[str, str]:
        """Environment of a client process that uses this hub and its own cache, online."""
        env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                                                                "HF_DATASETS_OFFLINE")}
        env.update(HF_ENDPOINT=self.url, HF_HOME=str(cache), HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_XET="1",
                   HF_HUB_ETAG_TIMEOUT="5", HF_HUB_DOWNLOAD_TIMEOUT="10", XDG_CACHE_HOME=str(cache / "xdg"))
        for name in ("HF_HUB_CACHE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
            env.pop(name, None)
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
        if repo_id not in self.repos or not self._may_read(request, repo_id):
            return self._not_found(request, repo_id, head)
        found = self._tree(repo_id, revision)
        if found is None:
            return self._send(request, 404, b"Revision not found",
                              {"X-Error-Code": "RevisionNotFound", "Content-Type": "text/plain"}, head)
        commit, files = found
        file = files.get(name)
        if file is None:
            return self._send(request, 404, b"Entry not found", {"X-Error-Code": "EntryNotFound",
                                                                 "X-Repo-Commit": commit,
                                                                 "Content-Type": "text/plain"}, head)
        return self._send_file(request, file, {"X-Repo-Commit": commit, "ETag": f'"{self.etag(file)}"'}, head, fault)

    def _may_read(self, request: BaseHTTPRequestHandler, repo_id: str) -> bool:
        token = self.tokens.get(repo_id)
        return token is None or request.headers.get("Authorization", "") == f"Bearer {token}"

    def _not_found(self, request: BaseHTTPRequestHandler, repo_id: str, head: bool = False) -> None:
        status = 401 if repo_id in self.tokens else 404  # the hub: a private repo is "not found" without its token
        return self._send(request, status, json.dumps({"error": "Repository not found"}).encode(),
                          {"X-Error-Code": "RepoNotFound", "Content-Type": "application/json"}, head)

    def _api(self, request: BaseHTTPRequestHandler, rest: str, head: bool) -> None:
        repo_id, kind, revision, sub = rest, "", "main", ""
        if rest.endswith("/refs"):
            repo_id, kind = rest[: -len("/refs")], "refs"
        for marker in ("/revision/", "/tree/"):
            if marker in rest:
                repo_id, tail = rest.split(marker, 1)
                kind = marker.strip("/")
                revision, _, sub = tail.partition("/")
        if repo_id not in self.repos or not self._may_read(request, repo_id):
            return self._not_found(request, repo_id, head)
        if kind == "refs":
            body = json.dumps({"branches": [{"name": name, "ref": f"refs/heads/{name}", "targetCommit": commit}
                                            for name, commit in sorted(self.branches[repo_id].items())],
                               "converts": [], "tags": []}).encode()
            return self._send(request, 200, body, {"Content-Type": "application/json"}, head)
        found = self._tree(repo_id, revision)
        if found is None:
            return self._send(request, 404, json.dumps({"error": f"Invalid rev id: {revision}"}).encode(),
                              {"X-Error-Code": "RevisionNotFound", "Content-Type": "application/json"}, head)
        commit, files = found
        if kind == "tree":
            listing = [{"type": "file", "path": name, "size": path.stat().st_size, "oid": self.etag(path)[:40]}
                       for name, path in sorted(files.items()) if name.startswith(sub)]
            body = json.dumps(listing).encode()
        else:
            body = json.dumps({"id": repo_id, "modelId": repo_id, "sha": commit, "private": repo_id in self.tokens,
                               "tags": [],
                               "siblings": [{"rfilename": name} for name in sorted(files)]}).encode()
        return self._send(request, 200, body, {"Content-Type": "application/json", "X-Repo-Commit": commit}, head)

    # --- uploads -------------------------------------------------------------------------
    LFS_SUFFIXES = (".safetensors", ".onnx", ".bin", ".pt", ".pth", ".h5")
    LFS_FROM_BYTES = 1 << 20

    def _write(self, request: BaseHTTPRequestHandler) -> None:
        path = unquote(urlsplit(request.path).path)
        self.requests.append((request.command, path))
        self.ranges.append("")
        body = self._body(request)
        fault = self.faults.get(path, "") or next(
            (f for key, f in self.faults.items() if key.endswith("*") and path.startswith(key[:-1])), "")
        if fault == "hang":
            self._released.wait()
            request.close_connection = True
            return
        if fault == "500":
            return self._send(request, 500, b"internal error", {"Content-Type": "text/plain"}, False)
        if not path.startswith("/lfs-upload/") and not request.headers.get("Authorization", "").startswith("Bearer "):
            # (an LFS upload goes to the URL the batch answer gave, as to S3's pre-signed ones: no token)
            return self._json(request, 401, {"error": "Invalid credentials in Authorization header"})
        with self._lock:
            if path == "/api/repos/create":
                return self._create(request, json.loads(body))
            if path == "/api/validate-yaml":
                return self._json(request, 200, {"errors": [], "warnings": []})
            if path.startswith("/lfs-upload/"):
                repo_id, _, oid = path[len("/lfs-upload/"):].rpartition("/")
                return self._store(request, repo_id, oid, body)
            if path.startswith("/lfs-verify/"):
                return self._json(request, 200, {})
            match = re.fullmatch(r"/(.+?)\.git/info/lfs/objects/batch", path)
            if match:
                return self._batch(request, match.group(1), json.loads(body))
            match = re.fullmatch(r"/api/models/(.+?)/(preupload|commit|branch)/(.+)", path)
            if not match:
                return self._json(request, 404, {"error": "not found"})
            repo_id, kind, revision = match.groups()
            if repo_id not in self.repos or not self._may_read(request, repo_id):
                return self._not_found(request, repo_id)
            if kind == "branch":
                return self._branch(request, repo_id, revision, json.loads(body or b"{}"))
            if revision not in self.branches[repo_id]:
                return self._send(request, 404, json.dumps({"error": f"Invalid rev id: {revision}"}).encode(),
                                  {"X-Error-Code": "RevisionNotFound", "Content-Type": "application/json"}, False)
            if kind == "preupload":
                return self._preupload(request, json.loads(body))
            return self._commit(request, repo_id, revision, body)

    @staticmethod
    def _body(request: BaseHTTPRequestHandler) -> bytes:
        if request.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(request.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    request.rfile.readline()
                    return out
                out += request.rfile.read(size)
                request.rfile.readline()
        return request.rfile.read(int(request.headers.get("Content-Length") or 0))

    def _json(self, request: BaseHTTPRequestHandler, status: int, value: object) -> None:
        return self._send(request, status, json.dumps(value).encode(), {"Content-Type": "application/json"}, False)

    def _blob(self, content: bytes) -> Path:
        path = self.root / "blobs" / hashlib.sha256(content).hexdigest()
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        return path

    def _create(self, request: BaseHTTPRequestHandler, payload: dict) -> None:
        repo_id = f"{payload['organization']}/{payload['name']}" if payload.get("organization") else payload["name"]
        if repo_id in self.repos:
            return self._json(request, 409, {"error": "You already created this model repo", "url": f"{self.url}/{repo_id}"})
        self.add_repo(repo_id, {".gitattributes": "*.safetensors filter=lfs diff=lfs merge=lfs -text\n"})
        if payload.get("visibility") == "private" or payload.get("private"):
            self.tokens[repo_id] = request.headers["Authorization"][len("Bearer "):]
        return self._json(request, 200, {"url": f"{self.url}/{repo_id}", "name": repo_id})

    def _branch(self, request: BaseHTTPRequestHandler, repo_id: str, branch: str, payload: dict) -> None:
        if branch in self.branches[repo_id]:
            return self._json(request, 409, {"error": "Reference already exists"})
        found = self._tree(repo_id, payload.get("startingPoint") or "main")
        if found is None:
            return self._json(request, 404, {"error": "Invalid rev id"})
        self._set_head(repo_id, branch, *found)
        return self._json(request, 200, {})

    def _preupload(self, request: BaseHTTPRequestHandler, payload: dict) -> None:
        files = [{"path": f["path"], "uploadMode": "lfs" if f["path"].endswith(self.LFS_SUFFIXES) or
                  f["size"] >= self.LFS_FROM_BYTES else "regular", "shouldIgnore": False, "oid": None}
                 for f in payload["files"]]
        return self._json(request, 200, {"files": files})

    def _batch(self, request: BaseHTTPRequestHandler, repo_id: str, payload: dict) -> None:
        if repo_id not in self.repos or not self._may_read(request, repo_id):
            return self._not_found(request, repo_id)
        objects = []
        for item in payload["objects"]:
            answer = {"oid": item["oid"], "size": item["size"]}
            if (repo_id, item["oid"]) not in self.lfs:  # a repo's own large files (the hub keeps them per repo)
                answer["actions"] = {"upload": {"href": f"{self.url}/lfs-upload/{repo_id}/{item['oid']}"},
                                     "verify": {"href": f"{self.url}/lfs-verify/{item['oid']}"}}
            objects.append(answer)
        return self._json(request, 200, {"transfer": "basic", "objects": objects})

    def _store(self, request: BaseHTTPRequestHandler, repo_id: str, oid: str, body: bytes) -> None:
        if hashlib.sha256(body).hexdigest() != oid:
            return self._json(request, 400, {"error": "the bytes do not match the object id"})
        self.lfs[(repo_id, oid)] = self._blob(body)
        return self._send(request, 200, b"", {}, False)

    def _commit(self, request: BaseHTTPRequestHandler, repo_id: str, branch: str, body: bytes) -> None:
        head = self.branches[repo_id][branch]
        files = dict(self.trees[head])
        summary = ""
        for line in body.splitlines():
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "header":
                summary = value.get("summary", "")
                parent = value.get("parentCommit")
                if parent is not None and not head.startswith(parent):
                    return self._json(request, 412, {"error": "A commit has happened since. Please refresh and try again."})
            elif key == "file":
                files[value["path"]] = self._blob(base64.b64decode(value["content"]))
            elif key == "lfsFile":
                if (repo_id, value["oid"]) not in self.lfs:
                    return self._json(request, 422, {"error": f"LFS object {value['oid']} was never uploaded"})
                files[value["path"]] = self.lfs[(repo_id, value["oid"])]
            elif key == "deletedFile":
                files.pop(value["path"], None)
            elif key == "deletedFolder":
                files = {k: v for k, v in files.items() if not k.startswith(value["path"].rstrip("/") + "/")}
        digest = hashlib.sha1((head + summary).encode())
        for name, path in sorted(files.items()):
            digest.update(name.encode() + self.etag(path).encode())
        commit = self._set_head(repo_id, branch, digest.hexdigest(), files)
        return self._json(request, 200, {"commitUrl": f"{self.url}/{repo_id}/commit/{commit}", "commitOid": commit,
                                         "pullRequestUrl": None, "success": True})

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
