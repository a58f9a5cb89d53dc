"""`videotext push RUN ORG/NAME`: a trained run shared on the Hugging Face Hub, as timm and open_clip
share models (`push_to_hf_hub`: create the repository, stage the files, one commit, a generated card).

What goes up (the layout `videotext.hub_runs` reads back, and nothing else of the run folder):
the best checkpoint's weights and record, the pinned config with the paths of its training data
emptied, how the training features were extracted (`extraction.json`), the exported query encoder
where the run has a current one (`checkpoints/best/query_encoder`), and the model card written from
the run's records (`videotext.apps.model_card`). No logs, no reports, no training state; a value that
still names a path of this machine (a local text model, a local checkpoint) stops the push with one
line naming its key.

Upload: `HfApi.create_repo` (private with `private`), a branch for `revision` if it has none yet, then
one `create_commit` of every file with `parent_commit` set to the head that was checked: large files
go up first (LFS), and the commit that makes them the revision comes last, so a push stopped halfway
leaves the revision as it was. A revision that already holds a run is replaced only with `force`.
`dry_run` stages and lists the files and the card, and sends nothing.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from videotext.apps.model_card import RunRecords, card_text, is_local_path, read_records
from videotext.errors import VideoTextError
from videotext.hub import endpoint, reachable
from videotext.hub_runs import (CARD, CHECKPOINT, CONFIG, EXPORT, EXTRACTION, FORMAT, META, WEIGHTS, is_hub_run,
                                sha256_file, weights_stamp)
from videotext.run_model import checkpoint_stamp
from videotext.search.query_encoder import META_FILE, MODEL_FILE, TOKENIZER_FILE

_REPO = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
# Config values that name where the training data was on the pushing machine: emptied in the shared config
DATA_PATHS = ("manifest", "features", "shards")


@dataclass
class PushReport:
    """What `push_to_hub` did (or, with `dry_run`, would do)."""

    repo_id: str
    revision: str
    files: dict[str, int]  # path in the repository -> bytes
    card: str  # README.md as uploaded
    dry_run: bool = False
    commit: str | None = None  # the commit made
    url: str | None = None
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The report as the command line prints it."""
        head = "would upload" if self.dry_run else "uploaded"
        out = [f"{head} to {self.repo_id} (revision {self.revision}):"]
        out += [f"  {path}  {size} bytes" for path, size in sorted(self.files.items())]
        out += self.notes
        if self.commit:
            out.append(f"commit {self.commit}: load it with hf-hub:{self.repo_id}" +
                       ("" if self.revision == "main" else f"@{self.revision}"))
        return out


def push_to_hub(run: str | os.PathLike, repo_id: str, *, revision: str | None = None, private: bool = False,
                force: bool = False, dry_run: bool = False, token: str | None = None,
                commit_message: str | None = None) -> PushReport:
    """Upload the run folder `run` to the hub repository `repo_id` (ORG/NAME) at `revision` (a branch,
    made from main when new; default main), creating the repository (`private`) if needed.

    Refused with one line, before anything is sent: a folder that is not a trained run, a value of its
    config that names a path of this machine, and (after asking the hub) a revision that already holds
    a run, unless `force`. `dry_run` sends nothing. `token` defaults to the hub client's (HF_TOKEN, `hf
    auth login`). Returns what was uploaded."""
    if not _REPO.fullmatch(repo_id or ""):
        raise VideoTextError(f"push: {repo_id!r} is not a repository name; expected ORG/NAME")
    branch = revision or "main"
    records = read_records(run)
    with tempfile.TemporaryDirectory(prefix="videotext-push-") as tmp:
        staged, notes = stage(records, repo_id, Path(tmp))
        files = {path: (Path(tmp) / path).stat().st_size for path in staged}
        card = (Path(tmp) / CARD).read_text(encoding="utf-8")
        report = PushReport(repo_id, branch, files, card, dry_run=dry_run, notes=notes)
        if dry_run:
            return report
        info = _upload(Path(tmp), staged, repo_id, branch, private, force, token,
                       commit_message or f"videotext push: {records.method} run {Path(run).resolve().name}")
    report.commit, report.url = info.oid, info.commit_url
    return report


# ---- staging ---------------------------------------------------------------------------------------
def stage(records: RunRecords, repo_id: str, folder: Path) -> tuple[list[str], list[str]]:
    """Write every file of the shared run into `folder` (the card last: it records the others);
    returns their paths in the repository and notes for the report."""
    notes: list[str] = []
    config, meta = shared_config(records.config), dict(records.meta)
    if isinstance(meta.get("converted_from"), str) and is_local_path(meta["converted_from"]):
        meta["converted_from"] = Path(meta["converted_from"]).name
    if config.get("model") != meta.get("model") or config.get("method") != meta.get("method"):
        raise VideoTextError(f"{records.run_dir}: {CONFIG} and {CHECKPOINT}/meta.json name different models; the "
                             "run was edited after training: restore its config.yaml")
    _refuse_local_paths(config, CONFIG)
    _refuse_local_paths(meta, META)
    _refuse_local_paths(records.extraction, EXTRACTION)
    source = records.run_dir / CHECKPOINT
    sha = sha256_file(source / "model.safetensors")
    written = {CONFIG: yaml.safe_dump(config, sort_keys=False),
               META: json.dumps(meta, indent=1, default=str),
               EXTRACTION: json.dumps({"format": "videotext-extraction", "version": 1,
                                       "experts": records.extraction}, indent=1, sort_keys=True)}
    for path, text in written.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text, encoding="utf-8")
    _link(source / "model.safetensors", folder / WEIGHTS)
    paths = [CONFIG, EXTRACTION, WEIGHTS, META]
    export = source / "query_encoder"
    if _export_is_current(export, source):
        described = json.loads((export / META_FILE).read_text(encoding="utf-8"))
        described["source"] = weights_stamp(sha)  # what a run loaded by name names its weights with
        (folder / EXPORT).mkdir(parents=True)
        (folder / EXPORT / META_FILE).write_text(json.dumps(described, indent=1), encoding="utf-8")
        for name in (MODEL_FILE, TOKENIZER_FILE):
            _link(export / name, folder / EXPORT / name)
        paths += [f"{EXPORT}/{name}" for name in (META_FILE, MODEL_FILE, TOKENIZER_FILE)]
    elif export.exists():
        notes.append(f"not uploaded: {export} was exported from other weights (build an index with the run to "
                     "export it again)")
    else:
        notes.append("no exported query encoder (a method that searches through torch, or no index built with the "
                     "run yet): a search with it loads the model")
    record = {"format": FORMAT, "version": 1, "method": records.method, "weights_sha256": sha,
              "config_sha256": sha256_file(folder / CONFIG),
              "files": {path: (folder / path).stat().st_size for path in paths}}
    (folder / CARD).write_text(card_text(records, repo_id, record), encoding="utf-8")
    return [CARD, *paths], notes


def shared_config(config: dict[str, Any]) -> dict[str, Any]:
    """The run's config as shared: the paths of its training data emptied (the card describes the data),
    `out_dir` a relative folder, and a local `train.init_from` dropped (the weights it gave are in the
    checkpoint)."""
    shared = json.loads(json.dumps(config))  # a deep copy of plain YAML values
    data = shared.get("data") or {}
    for key in DATA_PATHS:
        if key in data:
            data[key] = ""
    for source in data.get("mixture") or []:
        if isinstance(source, dict):
            source.update({k: "" for k in ("manifest", "features") if k in source})
    train = shared.get("train") or {}
    if train.get("init_from") and not is_hub_run(train["init_from"]):
        train["init_from"] = ""
    if "out_dir" in shared:
        shared["out_dir"] = f"runs/{Path(str(shared['out_dir'])).name or 'run'}"
    return shared


def _refuse_local_paths(value: Any, where: str, key: str = "") -> None:
    """One error naming the first value under `value` that is a path of this machine."""
    if isinstance(value, dict):
        for name, item in value.items():
            _refuse_local_paths(item, where, f"{key}.{name}" if key else str(name))
    elif isinstance(value, list):
        for position, item in enumerate(value):
            _refuse_local_paths(item, where, f"{key}[{position}]")
    elif is_local_path(value):
        raise VideoTextError(f"push: {where}: {key} is a path on this machine ({value}); a shared run must name its "
                             "weights as anyone can have them (a hub id, bundled:minilm, timm:NAME, openclip:ARCH@TAG): "
                             "train it with such a name, or upload that weight first and name it")


def _export_is_current(export: Path, checkpoint: Path) -> bool:
    """Whether `export` was made from the weights now in `checkpoint` (the files an index build stamped
    it with, wherever the run folder was named from) and is whole."""
    try:
        described = json.loads((export / META_FILE).read_text(encoding="utf-8"))
        made_from = json.loads(described["source"])[1]
        whole = (export / MODEL_FILE).stat().st_size == described.get("model_bytes") and \
            (export / TOKENIZER_FILE).is_file()
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return False
    return whole and made_from == json.loads(checkpoint_stamp(checkpoint))[1]


def _link(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


# ---- upload ----------------------------------------------------------------------------------------
def _upload(folder: Path, paths: list[str], repo_id: str, branch: str, private: bool, force: bool,
            token: str | None, message: str) -> Any:
    """One commit of `paths` (staged in `folder`) onto `branch` of `repo_id`, created as needed."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi

    if not reachable():
        raise VideoTextError(f"push to {repo_id}: the hub at {endpoint()} cannot be reached; connect to the "
                             "internet, or set HF_ENDPOINT to the hub you push to")
    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        new_branch = branch not in {ref.name for ref in api.list_repo_refs(repo_id).branches}
        if new_branch:  # made from main: beside the run there, never over it
            api.create_branch(repo_id, branch=branch)
        head = api.repo_info(repo_id, revision=branch).sha
        there = set(api.list_repo_files(repo_id, revision=head))
        if CONFIG in there and not (force or new_branch):
            raise VideoTextError(f"push: {repo_id} already holds a run at revision {branch} (commit {str(head)[:12]}); "
                                 "push beside it with --revision NAME, or replace it with --force")
        stale = sorted(p for p in there if (p == EXTRACTION or p.startswith("checkpoints/")) and p not in paths)
        operations: list[Any] = [CommitOperationAdd(path_in_repo=p, path_or_fileobj=str(folder / p)) for p in paths]
        operations += [CommitOperationDelete(path_in_repo=p) for p in stale]
        return api.create_commit(repo_id, operations, commit_message=message, revision=branch, parent_commit=head)
    except VideoTextError:
        raise
    except Exception as exc:  # noqa: BLE001 - the hub client's errors, one line each
        raise VideoTextError(_push_failure(repo_id, branch, exc)) from None


def _push_failure(repo_id: str, branch: str, exc: BaseException) -> str:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    detail = " ".join(str(exc).split())[:240]
    if status in (401, 403):
        return (f"push to {repo_id}: the hub at {endpoint()} refused it ({status}: {detail}); log in with a token that "
                "may write to that organisation (`hf auth login`, or HF_TOKEN)")
    if status == 412:
        return (f"push to {repo_id}: revision {branch} changed while the push ran; nothing was committed: run it again")
    return (f"push to {repo_id} stopped before its commit ({type(exc).__name__}: {detail}); revision {branch} is as it "
            "was: run the same command again")
