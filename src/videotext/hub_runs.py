"""Trained runs shared by name on the Hugging Face Hub: `hf-hub:ORG/NAME[@REVISION]` turned into a
checked local run folder, wherever a run folder is taken (the one resolver: `resolve_run`).

`videotext push RUN ORG/NAME` (`videotext.apps.push`) uploads a run as one hub repository:

    README.md                           the model card; its front matter's `videotext:` block records
                                        the method, every other file's size and the sha256 of the
                                        config and of the weights
    config.yaml                         the run's pinned config, without the paths of its training data
    extraction.json                     how the training features were extracted, per expert: new
                                        videos are extracted the same way (`RunModel.extraction_settings`)
    checkpoints/best/model.safetensors  the validation-selected weights
    checkpoints/best/meta.json          the checkpoint's record (method, model config, expert widths)
    checkpoints/best/query_encoder/     the exported query side, where the run has one

`resolve_run(spec)` brings that repository into the hub client's cache (`snapshot_download`, so
`HF_ENDPOINT`, `HF_HUB_OFFLINE`, `HF_TOKEN` and the cache settings apply as for every other weight)
and returns its snapshot folder once it is checked: every file the card lists is there whole, the
card, the config and the checkpoint name the same method and model, and the weights and the config
are the bytes the card recorded. The checkpoint itself is then read by `run_model.load_run` exactly
as a local one (safetensors: no pickled code runs). A run already in the cache is used with no
request; a cached copy that is incomplete or fails a check is downloaded again. Every failure is one
`HubError` naming the repository and what to do; nothing half-downloaded is loaded. This module
never sets offline mode.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from videotext.cache import cache_folder
from videotext.errors import VideoTextError
from videotext.hub import HubError, endpoint, offline_requested, reachable, unreachable_message

PREFIX = "hf-hub:"
CARD = "README.md"
CONFIG = "config.yaml"
EXTRACTION = "extraction.json"
CHECKPOINT = "checkpoints/best"  # the one checkpoint a shared run holds
WEIGHTS = f"{CHECKPOINT}/model.safetensors"
META = f"{CHECKPOINT}/meta.json"
EXPORT = f"{CHECKPOINT}/query_encoder"
FORMAT = "videotext-run"
REQUIRED = (CONFIG, WEIGHTS, META)
DOWNLOADED = [CARD, CONFIG, EXTRACTION, f"{CHECKPOINT}/*", f"{EXPORT}/*"]  # what a run needs of its repository
_SPEC = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+?)(?:@(?P<revision>[^\s@]+))?")


@dataclass(frozen=True)
class HubRun:
    """A run from the hub, checked, in the hub client's cache."""

    spec: str  # as given: hf-hub:ORG/NAME[@REVISION]
    repo_id: str
    revision: str  # as asked for ("main" when none)
    commit: str  # the commit the snapshot is of
    folder: Path  # the snapshot folder: a run folder (config.yaml, checkpoints/best/)
    weights_sha256: str

    @property
    def pinned(self) -> str:
        """The name of exactly these files: `hf-hub:ORG/NAME@COMMIT` (what an index records)."""
        return f"{PREFIX}{self.repo_id}@{self.commit}"

    @property
    def weights_stamp(self) -> str:
        """What identifies the weights (`RunModel.weights_stamp`, an export's `source`)."""
        return weights_stamp(self.weights_sha256)


class IncompleteRun(LookupError):
    """A snapshot that lacks a file or fails a check (a cached copy is downloaded again)."""


def is_hub_run(spec: Any) -> bool:
    """Whether `spec` names a run on the hub (`hf-hub:ORG/NAME[@REVISION]`) rather than a folder."""
    return isinstance(spec, (str, os.PathLike)) and os.fspath(spec).startswith(PREFIX)


def parse_spec(spec: str | os.PathLike) -> tuple[str, str | None]:
    """(ORG/NAME, REVISION or None) of `hf-hub:ORG/NAME[@REVISION]`; a malformed name is one error."""
    text = os.fspath(spec)
    match = _SPEC.fullmatch(text[len(PREFIX):]) if text.startswith(PREFIX) else None
    if match is None:
        raise VideoTextError(f"{text}: expected a run on the hub as hf-hub:ORG/NAME or hf-hub:ORG/NAME@REVISION")
    return match["repo"], match["revision"]


def weights_stamp(sha256: str) -> str:
    return f"sha256:{sha256}"


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_card(path: str | os.PathLike) -> tuple[dict[str, Any], str]:
    """(front matter, body) of the model card file `path` (`parse_card`)."""
    return parse_card(Path(path).read_text(encoding="utf-8"))


def parse_card(text: str) -> tuple[dict[str, Any], str]:
    """(front matter, body) of a model card: YAML between two `---` lines, then Markdown."""
    if not text.startswith("---\n"):
        return {}, text
    head, sep, body = text[4:].partition("\n---\n")
    if not sep:
        return {}, text
    try:
        front = yaml.safe_load(head) or {}
    except yaml.YAMLError:
        return {}, text
    return (front if isinstance(front, dict) else {}), body


def resolve_run(spec: str | os.PathLike) -> HubRun:
    """The run `spec` (`hf-hub:ORG/NAME[@REVISION]`) as a checked folder in the hub cache.

    The cache first, with no request; then, unless `HF_HUB_OFFLINE=1` is set, a download through
    `huggingface_hub` (resumable: a file cut short is continued by the next call)."""
    text = os.fspath(spec)
    repo_id, revision = parse_spec(text)
    why = "it is not in the cache"
    try:
        return _checked(text, repo_id, revision, _snapshot(repo_id, revision, local_only=True))
    except IncompleteRun as exc:
        why = str(exc)
    except Exception as exc:  # noqa: BLE001 - not cached, each way the client says it
        if not _is(exc, "LocalEntryNotFoundError", "FileNotFoundError", "OfflineModeIsEnabled"):
            raise
    if offline_requested():
        raise HubError(f"run '{text}': HF_HUB_OFFLINE=1 is set and {why}; cache folder {cache_folder('hub')}. "
                       "Unset HF_HUB_OFFLINE to download it, or give a run folder instead of the name")
    if not reachable():
        raise HubError(unreachable_message(f"run '{text}'").replace("a local file or folder", "a run folder"))
    try:
        folder = _snapshot(repo_id, revision, local_only=False)
    except Exception as exc:  # noqa: BLE001 - sorted below into one line each
        raise HubError(_download_failure(text, repo_id, revision, exc)) from None
    try:
        return _checked(text, repo_id, revision, folder)
    except IncompleteRun as exc:
        raise HubError(f"run '{text}': {exc}; nothing was loaded. The repository {repo_id} at {endpoint()} is not a "
                       f"whole run as `videotext push` uploads it: push the run again "
                       f"(`videotext push RUN {repo_id} --force`), or ask its owner to") from None


def _snapshot(repo_id: str, revision: str | None, local_only: bool) -> Path:
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id, revision=revision, allow_patterns=DOWNLOADED, local_files_only=local_only))


def _checked(spec: str, repo_id: str, revision: str | None, folder: Path) -> HubRun:
    """`folder` as a `HubRun`, once every check passes; else `IncompleteRun` saying which failed."""
    card = folder / CARD
    if not card.is_file():
        raise IncompleteRun(f"it has no model card ({CARD})")
    front, _ = read_card(card)
    record = front.get("videotext")
    if not isinstance(record, dict) or record.get("format") != FORMAT or not isinstance(record.get("files"), dict):
        raise IncompleteRun(f"its model card ({CARD}) has no `videotext:` record of a {FORMAT}")
    for name in REQUIRED:
        if name not in record["files"]:
            raise IncompleteRun(f"its model card lists no {name}")
    for name, size in record["files"].items():
        path = folder / name
        if not path.is_file():
            raise IncompleteRun(f"{name} is missing")
        if path.stat().st_size != size:
            raise IncompleteRun(f"{name} has {path.stat().st_size} bytes, the model card says {size}")
    try:
        config = yaml.safe_load((folder / CONFIG).read_text(encoding="utf-8"))
        meta = json.loads((folder / META).read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise IncompleteRun(f"its config or checkpoint record cannot be read ({type(exc).__name__})") from None
    if not isinstance(config, dict) or not isinstance(meta, dict):
        raise IncompleteRun("its config or checkpoint record is not a mapping")
    methods = {"the model card": record.get("method"), CONFIG: config.get("method"), META: meta.get("method")}
    if len(set(methods.values())) != 1:
        raise IncompleteRun("the model card does not match the weights: method " +
                            ", ".join(f"{value!r} in {where}" for where, value in methods.items()))
    if config.get("model") != meta.get("model"):
        raise IncompleteRun(f"the config does not match the weights: its `model` section differs from the one "
                            f"{META} records")
    if sha256_file(folder / CONFIG) != record.get("config_sha256"):
        raise IncompleteRun(f"the model card does not match the config: {CONFIG} is not the file it describes")
    weights = sha256_file(folder / WEIGHTS)
    if weights != record.get("weights_sha256"):
        raise IncompleteRun(f"the model card does not match the weights: {WEIGHTS} has sha256 {weights[:16]}…, "
                            f"the card says {str(record.get('weights_sha256'))[:16]}…")
    return HubRun(spec, repo_id, revision or "main", folder.name, folder, weights)


def _is(exc: BaseException | None, *names: str) -> bool:
    """Whether `exc` or an error it wraps is of one of the classes `names`."""
    for _ in range(8):
        if exc is None:
            return False
        if any(cls.__name__ in names for cls in type(exc).__mro__):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _download_failure(spec: str, repo_id: str, revision: str | None, exc: BaseException) -> str:
    """One line for a download that failed: which repository, what happened, what to do."""
    from huggingface_hub import get_token

    where = f"the hub at {endpoint()}"
    if _is(exc, "RevisionNotFoundError"):
        return (f"run '{spec}': {repo_id} has no revision {revision!r} on {where}; name a branch, tag or commit it "
                f"has (`videotext push --revision` makes branches), or leave out @{revision} for main")
    if _is(exc, "GatedRepoError"):
        return (f"run '{spec}': {repo_id} on {where} is gated; accept its conditions on its page, then log in "
                "(`hf auth login`) or set HF_TOKEN")
    if _is(exc, "RepositoryNotFoundError"):
        if get_token() is None:
            return (f"run '{spec}': {repo_id} was not found on {where} (or it is private and no token was sent); "
                    "check the name, and for a private repository log in (`hf auth login`) or set HF_TOKEN")
        return (f"run '{spec}': {repo_id} was not found on {where}, or the token in use (HF_TOKEN or `hf auth "
                "login`) has no access to it; check the name and the token's permissions")
    if _is(exc, "JSONDecodeError", "FileMetadataError") or "html" in str(exc).lower():
        return (f"run '{spec}': {where} answered {repo_id} with something that is not the hub's (an HTML page: a "
                "sign-in, a proxy or a captive portal?); nothing was cached. Set HF_ENDPOINT to the hub or a "
                "mirror, or download the repository by hand and give its folder")
    if _is(exc, "RemoteProtocolError", "IncompleteRead", "ChunkedEncodingError") or \
            "consistency check failed" in str(exc).lower():
        return (f"run '{spec}': the download of {repo_id} from {where} was cut short; nothing incomplete is loaded: "
                f"run the command again to resume it (cache folder {cache_folder('hub')})")
    if _is(exc, "LocalEntryNotFoundError", "ConnectError", "TimeoutException", "ConnectionError", "HfHubHTTPError",
           "OSError"):
        first = " ".join(str(exc).split())[:200]
        return unreachable_message(f"run '{spec}'", exc).replace("a local file or folder", "a run folder") + \
            (f" ({first})" if first else "")
    return f"run '{spec}': {repo_id} could not be downloaded from {where} ({type(exc).__name__}: {exc})"
