"""HTTP(S) GET: the one client for released checkpoints (`videotext.download`) and training shards
(`videotext.data.streaming`). It is urllib's, so redirects are followed and proxies come from the
environment (`HTTP_PROXY`, `HTTPS_PROXY`, `NO_PROXY`) as in any Python program; its response
reads straight from the socket, which measured faster here than requests' (bench/streaming.py).
Standard library only.

- `get(url, timeout, offset)`: the response, from byte `offset` on (a `Range` request that
  continues a partial file; "416 range not satisfiable" comes back as a response for the caller
  to judge, any other HTTP error raises `urllib.error.HTTPError`); bodies come as sent
  (`Accept-Encoding: identity`);
- `stream(url, timeout)`: the body as a buffered binary stream, for readers that take a file;
- `blocks(response)`: the body in blocks, ending early (not raising) where the connection drops,
  so that the caller's size check (`announced_size`) words the failure;
- `failure(exc)`: what went wrong with a `get`, in a few words for a one-line message.

Trying again is the caller's: a checkpoint download continues on the next run (`download`), a
shard is read again after a backoff (`data.streaming.shard`).
"""
from __future__ import annotations

import http.client
import io
import urllib.error
import urllib.request
from typing import Any, BinaryIO, Callable, Iterator

USER_AGENT = "videotext"
BLOCK_BYTES = 1 << 20  # bytes per block of `blocks`
STREAM_BUFFER = 4 << 20  # bytes `stream` reads from the socket at a time


def get(url: str, timeout: float, offset: int = 0) -> Any:
    """The response to GET `url` from byte `offset` on (see the module doc); use it as a context manager."""
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416:
            return exc  # a response too: its headers say the whole size (Content-Range: bytes */N)
        raise


def stream(url: str, timeout: float) -> tuple[BinaryIO, Callable[[], None]]:
    """The body of `url` as a readable binary stream, and how to close it."""
    response = get(url, timeout)
    # tarfile reads a member header at a time: buffered, those are copies, not socket reads. (A
    # read-ahead thread was slower: it waits for the GIL while the samples are decoded.)
    return io.BufferedReader(response, STREAM_BUFFER), response.close


def blocks(response: Any, size: int = BLOCK_BYTES) -> Iterator[bytes]:
    """The body in blocks; a connection that drops ends it early (the size check words the failure)."""
    try:
        while block := response.read(size):
            yield block
    except (http.client.IncompleteRead, ConnectionError, TimeoutError) as exc:
        if getattr(exc, "partial", b""):
            yield exc.partial


def range_total(content_range: str) -> int | None:
    """The whole size from `Content-Range: bytes a-b/total` (or `bytes */total`)."""
    total = content_range.rpartition("/")[2].strip()
    return int(total) if total.isdigit() else None


def announced_size(response: Any, offset: int) -> int | None:
    """The whole file's size as the server announces it (None when it does not say): a range's
    total, else `offset` + Content-Length."""
    if response.getcode() == 206:
        return range_total(response.headers.get("Content-Range", ""))
    length = response.headers.get("Content-Length", "")
    return offset + int(length) if length.isdigit() else None


def failure(exc: BaseException) -> str | None:
    """What a failed `get` says for a message ("the server answered HTTP 404 Not Found", "cannot be
    reached (…)"); None for an error that is not about HTTP or the network."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"the server answered HTTP {exc.code} {exc.reason}"
    if isinstance(exc, (urllib.error.URLError, OSError, http.client.HTTPException)):
        return f"cannot be reached ({getattr(exc, 'reason', None) or exc})"
    return None
