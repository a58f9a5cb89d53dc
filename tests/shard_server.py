"""A real HTTP server (http.server, threads) serving a folder of shards, with faults injected per
file: `drop` (the connection closes halfway through the body), `500` (an HTTP 500 answer), `slow`
(the body stalls longer than the reader's timeout) and `truncated` (the first half of the file,
served as if whole). Each fault has a count of requests it spoils; after those the file is served
as it is (`truncated` with count -1 stays truncated)."""
from __future__ import annotations

import http.server
import socket
import threading
import time
from pathlib import Path


class ShardServer:
    def __init__(self, folder: Path, stall_seconds: float = 3.0):
        self.folder, self.stall = Path(folder), stall_seconds
        self.faults: dict[str, list] = {}  # file name -> [kind, requests left]
        self.requests: dict[str, int] = {}
        self.lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                name = self.path.lstrip("/")
                path = server.folder / name
                with server.lock:
                    server.requests[name] = server.requests.get(name, 0) + 1
                    fault = server.faults.get(name)
                    kind = None
                    if fault and fault[1] != 0:
                        kind = fault[0]
                        fault[1] -= 1 if fault[1] > 0 else 0
                if not path.is_file():
                    self.send_error(404)
                    return
                data = path.read_bytes()
                if kind == "500":
                    self.send_error(500, "injected")
                    return
                body = data[: len(data) // 2] if kind == "truncated" else data
                self.send_response(200)
                self.send_header("Content-Length", str(len(data) if kind in ("drop", "slow") else len(body)))
                self.end_headers()
                try:
                    if kind == "drop":
                        self.wfile.write(data[: len(data) // 2])
                        self.wfile.flush()
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    if kind == "slow":
                        self.wfile.write(data[: len(data) // 4])
                        self.wfile.flush()
                        time.sleep(server.stall)
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError, OSError):
                    pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def fault(self, name: str, kind: str, count: int = 1) -> None:
        with self.lock:
            self.faults[name] = [kind, count]

    def clear(self) -> None:
        with self.lock:
            self.faults.clear()
            self.requests.clear()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
