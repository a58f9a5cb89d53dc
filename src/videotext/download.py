"""Download a file by URL into the videotext cache: resumable, checked, atomic.

Released checkpoints are plain files on the authors' web servers (hundreds of MB, on links that
break or turn into sign-in pages). `download(url)` keeps each one in
`cache_folder("checkpoints")/<hash of the URL>/<file name>` (`videotext.cache`):

- a file already there is returned with no request (and its sha256 checked when one is given);
- bytes arrive in `<file name>.part`; a connection that closes before `Content-Length` is reached
  leaves the partial file and fails with one line, and the next call continues it with an HTTP
  `Range` request (a server that ignores the range starts the file again);
- the complete file is renamed into place only once its size equals `Content-Length` and its
  sha256 (when given) matches, so a reader never sees a half file;
- an HTML page (`Content-Type: text/html`, or a body that starts like one) is refused and nothing
  is written; an unreachable server or an HTTP error is one line naming the URL, the cache folder
  and the remedy (download it by hand and give the path).

`archive_member` takes one file out of a downloaded `.tar(.gz)` (COOT's models come as one archive).
Standard library only (HTTP through `videotext.http_client`, urllib's: redirects and proxies as in
any Python program), so it works wherever Python does.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
from pathlib import Path
from typing import Iterator
from urllib.parse import unquote, urlsplit

from videotext import http_client
from videotext.cache import CACHE_ENV, cache_folder, cache_root  # noqa: F401  (CACHE_ENV, cache_root: their old home)
from videotext.errors import VideoTextError
from videotext.io import atomic_path, file_lock
from videotext.weights import sha256_of

TIMEOUT_S = 60.0
BLOCK_BYTES = http_client.BLOCK_BYTES
HTML_STARTS = (b"<!doctype", b"<html")


class DownloadError(VideoTextError):
    """A file could not be had by URL: unreachable, an HTTP error, a web page, short or wrong bytes."""


def is_url(text: str) -> bool:
    """Whether `text` is an http(s) URL (anything else is a path or a name)."""
    return urlsplit(str(text)).scheme.lower() in ("http", "https")


def cached_path(url: str, filename: str | None = None) -> Path:
    """The cache path of `url`: a folder per URL (so equal file names never collide), its file name inside."""
    name = filename or unquote(urlsplit(url).path).rstrip("/").rpartition("/")[2] or "download"
    return cache_folder("checkpoints") / hashlib.sha256(url.encode()).hexdigest()[:16] / name


def check_sha256(path: Path, expected: str, source: str, remove: bool = True) -> None:
    """Refuse a file whose sha256 is not `expected` (a changed release or a damaged copy); a cached
    file is removed so that the next try downloads it again."""
    expected, actual = expected.strip().lower(), sha256_of(path)
    if actual == expected:
        return
    if remove:
        path.unlink(missing_ok=True)
    what = f"the file was removed from the cache ({path.parent})" if remove else f"the file is {path}"
    raise DownloadError(f"{source}: sha256 mismatch: expected {expected}, got {actual}; {what}")


def remedy(url: str) -> str:
    """Where the cache is and what to do when a URL cannot serve the file."""
    return (f"cache folder {cache_folder('checkpoints')}; remedy: download {url} by hand (a browser, wget or curl) and "
            "pass the file's PATH instead of the URL")


def download(url: str, *, sha256: str | None = None, filename: str | None = None,
             progress: bool = True, timeout_s: float = TIMEOUT_S) -> Path:
    """The cached file of `url`, downloaded (or continued) first if it is not complete in the cache."""
    target = cached_path(url, filename)
    part = target.with_name(target.name + ".part")
    with file_lock(cache_folder("checkpoints") / ".locks" / target.parent.name):  # one URL, two processes: the second waits
        if target.exists():
            if sha256:
                check_sha256(target, sha256, url)
            return target
        _fetch(url, part, progress, timeout_s)
        if sha256:
            check_sha256(part, sha256, url)
        os.replace(part, target)
    return target


def _fetch(url: str, part: Path, progress: bool, timeout_s: float) -> None:
    """Bring `part` to the whole file, continuing what is there."""
    offset = part.stat().st_size if part.exists() else 0
    with _open(url, offset, timeout_s) as response:
        status = response.getcode()
        if status == 416:  # the range starts at or past the end: the part is whole, or stale
            if http_client.range_total(response.headers.get("Content-Range", "")) == offset:
                return
            part.unlink()
            return _fetch(url, part, progress, timeout_s)
        _refuse_html(url, response.headers.get("Content-Type", ""))
        if status != 206:  # a whole answer (the server ignored the range, or none was asked): start again
            offset = 0
        total = http_client.announced_size(response, offset)
        blocks = http_client.blocks(response)
        first = next(blocks, b"")
        if offset == 0:
            _refuse_html(url, "", first)  # nothing was written yet: a page leaves no trace in the cache
        part.parent.mkdir(parents=True, exist_ok=True)
        with open(part, "ab" if offset else "wb") as handle, _progress(part, total, offset, progress) as bar:
            for block in _chain(first, blocks):
                handle.write(block)
                bar.update(len(block))
    _check_size(url, part, total)


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest


def _progress(part: Path, total: int | None, done: int, enabled: bool):
    """A tqdm bar on stderr (quiet when not a terminal or not wanted)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, unit="B", unit_scale=True, unit_divisor=1024, leave=False,
                desc=part.name.removesuffix(".part"), disable=None if enabled else True)


def _open(url: str, offset: int, timeout_s: float):
    """GET `url` from byte `offset` on (`http_client.get`); HTTP and network failures become one
    line with the remedy."""
    try:
        return http_client.get(url, timeout_s, offset)
    except Exception as exc:  # noqa: BLE001 - worded by the client; anything else passes through
        what = http_client.failure(exc)
        if what is None:
            raise
        raise DownloadError(f"{url}: {what}; {remedy(url)}") from None


def _refuse_html(url: str, content_type: str, first: bytes = b"") -> None:
    """A sign-in, confirmation or error page is not a checkpoint: refuse it before anything is kept."""
    if content_type.split(";")[0].strip().lower() == "text/html" or first.lstrip()[:9].lower().startswith(HTML_STARTS):
        raise DownloadError(f"{url}: the server answered an HTML page, not a file (the link may need a sign-in or "
                            f"a confirmation in a browser); nothing was cached; {remedy(url)}")


def _check_size(url: str, part: Path, total: int | None) -> None:
    """Refuse a file shorter (kept, to continue) or longer (removed) than the server announced."""
    size = part.stat().st_size
    if total is None or size == total:
        return
    if size > total:
        part.unlink()
        raise DownloadError(f"{url}: received {size} bytes but the server announced {total}; the partial file was "
                            f"removed, try again; {remedy(url)}")
    raise DownloadError(f"{url}: the download stopped at {size} of {total} bytes; run the same command again to "
                        f"continue it from {part}; {remedy(url)}")


def archive_member(archive: Path, name: str) -> Path:
    """The file called `name` (a base name) inside the tar archive `archive`, extracted once beside it.

    Only that regular file is written (no paths from the archive are followed), atomically."""
    target = archive.parent / (archive.name + ".d") / name
    if target.exists():
        return target
    try:
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.isfile()]
            found = [m for m in members if m.name.rpartition("/")[2] == name]
            if not found:
                names = sorted(m.name for m in members)
                raise DownloadError(f"{archive}: no file {name!r} in this archive (it holds {names[:20]})")
            source = tar.extractfile(found[0])
            with atomic_path(target) as tmp, open(tmp, "wb") as out:
                shutil.copyfileobj(source, out, BLOCK_BYTES)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise DownloadError(f"{archive}: not a readable tar archive ({exc}); remove it and download it again") from None
    return target
