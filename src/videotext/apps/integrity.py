"""`videotext check PATH`: every file of a folder videotext wrote (a run, an index, a feature store,
benchmark records) against the digest recorded when it was written, and every line of its logs
against the line's own (`videotext.digests`). Nothing is written.

Each damaged file is one line naming it, what differs and the way back its writer recorded; files of
the kinds that carry digests but have none (written before digests) are counted, never failed.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from videotext import digests
from videotext.data.speech.transcripts import TRANSCRIPTS, way_back as transcripts_way_back
from videotext.data.ocr.reader import ONSCREEN
from videotext.errors import VideoTextError
from videotext.io import FAILURES_WAY_BACK

METRICS_WAY_BACK = ("restore it from a copy, or delete it: training and evaluation go on without it (the curves "
                    "and the report lose the steps it held)")
# the files whose damage could still parse: each is written with its digest (docs/reliability.md)
DIGESTED = ("config.yaml", "model.safetensors", "state.pt", "meta.json", "index.json", "index.faiss",
            "entries.parquet", "parts.npz", "model.onnx", "tokenizer.json", "encoder.json", "speech.jsonl",
            "speech.npy", "written.jsonl", "written.npy", "sources.json")


def log_way_back(path: Path) -> str:
    """What a user does about a damaged line of the log `path`, by the log it is."""
    if path.name in (TRANSCRIPTS, ONSCREEN):
        return transcripts_way_back(path.parent)
    if path.name == "failures.jsonl":
        return FAILURES_WAY_BACK
    if path.name == "metrics.jsonl":
        return METRICS_WAY_BACK
    return "restore it from a copy"


@dataclass
class FolderCheck:
    """What `check_folder` found."""

    folder: Path
    checked: int = 0  # files verified against their digest
    logs: int = 0  # logs whose lines were verified
    unrecorded: list[Path] = field(default_factory=list)  # files that would carry a digest and have none
    problems: list[str] = field(default_factory=list)  # one line per damaged file

    def lines(self) -> list[str]:
        """The summary a caller prints (the problems are printed apart, one line each)."""
        out = [f"{self.folder}: {self.checked} files checked against their digests, {self.logs} logs line by line: "
               + (f"{len(self.problems)} damaged" if self.problems else "no damage found")]
        if self.unrecorded:
            names = ", ".join(str(p.relative_to(self.folder)) for p in self.unrecorded[:5])
            out.append(f"{len(self.unrecorded)} files carry no digest (written before digests; they load unchecked): "
                       f"{names}{' …' if len(self.unrecorded) > 5 else ''}")
        return out


def check_folder(folder: str | os.PathLike) -> FolderCheck:
    """Check every file under `folder` that carries a digest, and every log line (see the module
    docstring). Half-written leftovers (hidden folders) are skipped."""
    folder = Path(folder)
    if not folder.is_dir():
        raise VideoTextError(f"{folder}: not a folder (give a run, an index, a feature store or a results folder)")
    report = FolderCheck(folder)
    tree = digests.check_tree(folder)
    report.checked, report.problems = len(tree.checked), list(tree.problems)
    recorded = set(tree.checked)
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            path = Path(root) / name
            if name.startswith(".") or path in recorded:
                continue
            if name.endswith(".jsonl"):
                report.logs += 1
                parsed = digests.parse_json_lines(path.read_bytes())
                if parsed.damaged:
                    number, problem = parsed.damaged[0]
                    report.problems.append(f"{path} [line {number}]: {problem}; {log_way_back(path)}")
            elif name in DIGESTED or name.endswith(".h5") or (name.startswith("seed_") and name.endswith(".json")):
                report.unrecorded.append(path)
    return report
