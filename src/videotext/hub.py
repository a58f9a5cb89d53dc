"""Weights by name from the Hugging Face Hub, through the library that owns them.

Every model a user names (an HF text model by hub id, an open_clip tag, `timm:NAME`, a Whisper
size, a T5 decoder) is downloaded by its own library (transformers, open_clip, timm,
faster-whisper), all of which go through `huggingface_hub`: the standard cache
(`HF_HOME`, `HF_HUB_CACHE`), its progress bars, a mirror by `HF_ENDPOINT`, cache only by
`HF_HUB_OFFLINE=1`. This module never sets offline mode: that is a choice of the machine
(the project's Makefile and tests set it; a user's machine does not).

`from_hub(what, load)` runs `load()` twice at most:
1. with the hub client held to its cache, so a weight fetched once is read again with no request;
2. if that finds nothing cached (and the user did not ask for offline), as the library does by
   default: download into the cache.
A failure to reach the hub or to find the name is one `HubError` naming the weight, the cache
folder and the remedies, never a traceback.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import Callable, Iterator, TypeVar

from videotext.cache import cache_folder
from videotext.errors import VideoTextError

T = TypeVar("T")
log = logging.getLogger("videotext.hub")
_lock = threading.RLock()  # the offline switch below is process-wide


class HubError(VideoTextError):
    """A named weight could not be had: the hub is unreachable, the name is unknown, or nothing is cached."""


def _constants():
    from huggingface_hub import constants  # read at call time: the user's environment, tests' patches

    return constants


def endpoint() -> str:
    return str(_constants().ENDPOINT)


def offline_requested() -> bool:
    """The user (or the machine: Makefile, CI) asked for cache-only loading (`HF_HUB_OFFLINE=1`)."""
    return bool(_constants().HF_HUB_OFFLINE)


@contextlib.contextmanager
def cache_only() -> Iterator[None]:
    """Hold the hub client to its cache (what `HF_HUB_OFFLINE=1` does) inside the block."""
    constants = _constants()
    with _lock:
        before = constants.HF_HUB_OFFLINE
        constants.HF_HUB_OFFLINE = True
        try:
            yield
        finally:
            constants.HF_HUB_OFFLINE = before


# What an error (or one it wraps) says, by its class names and its words: each library words it its own way.
UNKNOWN = ({"RepositoryNotFoundError", "RevisionNotFoundError", "RemoteEntryNotFoundError", "GatedRepoError"}, ())
CUT_SHORT = ({"RemoteProtocolError", "IncompleteRead", "ChunkedEncodingError"},
             ("complete message body", "incompleteread", "consistency check failed"))
UNREACHABLE = ({"OfflineModeIsEnabled", "LocalEntryNotFoundError", "ConnectError", "ConnectTimeout", "ReadTimeout",
                "TimeoutException", "ReadError", "ConnectionError", "HfHubHTTPError", "FileMetadataError",
                "NetworkError"},
               ("local_files_only", "offline mode", "couldn't connect",
                "cannot find the requested files in the local cache", "not cached"))


def _says(exc: BaseException | None, kind: tuple[set[str], tuple[str, ...]]) -> bool:
    """Whether `exc` or an error it wraps (its cause or context) is of `kind` (class names, phrases)."""
    names, phrases = kind
    for _ in range(8):
        if exc is None:
            return False
        text = str(exc).lower()
        if any(cls.__name__ in names for cls in type(exc).__mro__) or any(p in text for p in phrases):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text[:300] + "…") if len(text) > 300 else text


def unreachable_message(what: str, exc: BaseException | None = None) -> str:
    """One line: which weight, where the cache is, and the three remedies."""
    how = "HF_HUB_OFFLINE=1 is set and it is not in the cache" if offline_requested() \
        else f"the hub at {endpoint()} cannot be reached and it is not in the cache"
    cause = f" ({type(exc).__name__})" if exc is not None else ""
    return (f"{what}: {how}{cause}; cache folder {cache_folder('hub')}. Remedies: connect to the internet, or set "
            f"HF_ENDPOINT to a mirror; HF_HUB_OFFLINE=1 loads only what is cached; or give a local file or folder "
            f"instead of the name")


def real_tokenizer(tokenizer: T) -> T:
    """`tokenizer`, unless it is an HF tokenizer with no vocabulary beyond its special tokens: what
    transformers builds, with no error, when the hub client is held to a cache that holds a model's
    config.json but not its tokenizer files. Raising makes `from_hub` download them."""
    specials = getattr(tokenizer, "all_special_tokens", None)
    if specials is not None and len(tokenizer) <= len(set(specials)):  # type: ignore[arg-type]
        raise LookupError(f"{getattr(tokenizer, 'name_or_path', 'tokenizer')}: no vocabulary "
                          "(tokenizer files not cached)")
    return tokenizer


def reachable(timeout: float = 5.0) -> bool:
    """Whether anything answers at the hub endpoint (any HTTP status counts), probed once without
    retries: the clients retry a dead endpoint for most of a minute before they give up."""
    from urllib.parse import urlsplit
    import socket

    parts = urlsplit(endpoint())
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy") or os.environ.get("HTTP_PROXY") \
            or os.environ.get("http_proxy") or os.environ.get("ALL_PROXY"):
        return True  # through a proxy: let the client find out
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout):
            return True
    except OSError:
        return False


def from_hub(what: str, load: Callable[[], T]) -> T:
    """`load()` from the hub cache if the weight is there (no request), else as its library downloads it.

    `what` names the weight for messages ("text model 'bert-base-cased'"). Unknown names and an
    unreachable hub become one `HubError`; errors that are not about the hub pass through.
    """
    if not offline_requested():
        try:
            with cache_only():
                return load()
        except VideoTextError:
            raise
        except Exception:  # noqa: BLE001 - not cached (each library words it differently): download below
            log.debug("%s: not in the hub cache, downloading", what)
        if not reachable():
            raise HubError(unreachable_message(what))
    try:
        return load()
    except VideoTextError:
        raise
    except Exception as exc:  # noqa: BLE001 - sorted by what it says about the hub
        if _says(exc, UNKNOWN):
            raise HubError(f"{what}: not found on the hub at {endpoint()} ({_first_line(exc)}); check the name, "
                           f"or give a local file or folder") from None
        if _says(exc, CUT_SHORT):
            raise HubError(f"{what}: the download from {endpoint()} was cut short ({_first_line(exc)}); nothing "
                           f"incomplete is loaded: run the command again to resume it (cache folder "
                           f"{cache_folder('hub')})") from None
        if _says(exc, UNREACHABLE):
            raise HubError(unreachable_message(what, exc)) from None
        raise


def is_local(name: str) -> bool:
    """A name that is a path on this machine (a file or a folder), not a hub id."""
    return bool(name) and os.path.exists(os.path.expanduser(str(name)))
