"""Opening a shard by its name: a brace pattern expanded to URLs (`expand`), a URL opened as a
readable stream (`open_url`: local paths, HTTP(S) through `videotext.http_client`, `s3://` and
other fsspec URLs, `pipe:COMMAND`), and the shards' optional `shards.json` (`read_index`)."""
from __future__ import annotations

import json
import subprocess
from typing import Any, Callable, Sequence

from videotext import http_client
from videotext.data.shards import INDEX
from videotext.errors import VideoTextError

READ_BUFFER = 1 << 20  # bytes read from a local shard at a time


def expand(pattern: str | Sequence[str]) -> list[str]:
    """`https://host/data/shard-{000000..000099}.tar` → the shard URLs (also `a.tar::b.tar`)."""
    from webdataset.shardlists import expand_urls

    urls = [u for p in ([pattern] if isinstance(pattern, str) else pattern) for u in expand_urls(p)]
    if not urls:
        raise VideoTextError(f"data.shards {pattern!r}: names no shard")
    return urls


def open_url(url: str, timeout: float) -> tuple[Any, Callable[[], None]]:
    """A readable binary stream of `url`, and how to close it."""
    if url.startswith(("http://", "https://")):
        return http_client.stream(url, timeout)  # redirects and proxies followed; HTTP errors raise
    if url.startswith("pipe:"):
        process = subprocess.Popen(url[len("pipe:"):], shell=True, stdout=subprocess.PIPE)

        def close() -> None:
            process.stdout.close()
            process.wait()
        return process.stdout, close
    if "://" in url and not url.startswith("file://"):
        import fsspec

        handle = fsspec.open(url, "rb").open()  # s3://, gs://, … through their fsspec packages
        return handle, handle.close
    handle = open(url.removeprefix("file://"), "rb", buffering=READ_BUFFER)
    return handle, handle.close


def read_index(pattern: str, timeout: float = 30.0) -> dict[str, Any] | None:
    """The `shards.json` beside the first shard, when there is one (local or over HTTP)."""
    first = expand(pattern)[0]
    url = first.rsplit("/", 1)[0] + "/" + INDEX if "/" in first else INDEX
    try:
        stream, close = open_url(url, timeout)
        try:
            return json.loads(stream.read().decode("utf-8"))
        finally:
            close()
    except Exception:  # noqa: BLE001 - absent, unreachable or not JSON: an index is optional
        return None
