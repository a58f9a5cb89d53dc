"""`videotext index check INDEX [SOURCE]`: an index against its sources, changing nothing.

It first checks every file of the folder against the digest recorded when it was written
(`videotext.digests`: each damaged file is one line naming it and the way back), then reads the
folder whole (the vectors, entries and metadata are checked against each other as `open_store`
loads them), looks for the run that
built it and for its exported query encoder, and compares the entries with the source's files
(by their content fingerprints, as an update does, `plan_index`) to say what `index build
--update` would add, encode again and drop. No file is written: not the index, not the feature
store, not the marker.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from videotext.digests import check_tree
from videotext.errors import VideoTextError
from videotext.hub_runs import is_hub_run
from videotext.search.build import IndexPlan, fingerprint_videos, plan_index, read_source, recorded_source
from videotext.search.index import open_store
from videotext.search.live import published_version
from videotext.search.moment_track import open_track
from videotext.search.query_encoder import QUERY_FOLDER, exported_encoder


@dataclass
class IndexReport:
    """What `check_index` found."""

    folder: Path
    version: str | None  # the published version; None when none is marked
    entries: int
    videos: int
    model: str
    source: str | None
    plan: IndexPlan | None
    unchanged: int = 0  # videos whose entries an update keeps
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)  # one line per file that differs from its digest

    @property
    def current(self) -> bool:
        """No problem, and an update would change nothing."""
        return not self.problems and not self.damaged and self.plan is not None and not (self.plan.add or self.plan.remove)

    def lines(self) -> list[str]:
        if self.damaged:  # the damaged files are said one line each (`damaged`); nothing else was read
            return [f"{self.folder}: {len(self.damaged)} damaged files, version {self.version or 'not published'}"]
        out = [f"{self.folder}: {self.entries} entries of {self.videos} videos, model {self.model!r}, "
               f"version {self.version or 'not published'}"]
        out += [f"problem: {p}" for p in self.problems] + self.notes
        if self.plan is not None:
            plan = self.plan
            new = len(plan.add) - len(plan.changed)
            out.append(f"source {self.source}: {new} new, {len(plan.changed)} changed in place, {len(plan.gone)} "
                       f"deleted, {self.unchanged} unchanged")
            out.append("up to date" if not (plan.add or plan.remove) else
                       f"`index build --update` would add {new} videos, encode {len(plan.changed)} again and drop "
                       f"{len(plan.remove)} entries")
        return out


def check_index(folder: str | os.PathLike, source: str | os.PathLike | None = None,
                progress: bool = False) -> IndexReport:
    """Check the index folder `folder` against `source` (default: what it was built from, as it records
    it: a folder, a manifest or a manifest's split, `search.build.recorded_source`)."""
    folder = Path(folder)
    if folder.is_dir():
        damaged = check_tree(folder).problems
        if damaged:
            return IndexReport(folder, published_version(folder), 0, 0, "", None, None, damaged=damaged)
    index = open_store(folder)
    entries = index.entries()
    report = IndexReport(folder, published_version(folder), len(entries), len({e.video_id for e in entries}),
                         index.model, None, None)
    run_dir = index.meta.get("run_dir")
    if not run_dir:
        report.problems.append("the index does not name the run that built it; searching it needs --run RUN_DIR")
    elif not is_hub_run(run_dir) and not (Path(run_dir) / "checkpoints").is_dir():
        report.problems.append(f"the run that built it, {run_dir}, is gone; searching it needs --run RUN_DIR")
    if (folder / QUERY_FOLDER).exists() and exported_encoder(folder) is None:
        report.problems.append(f"{folder / QUERY_FOLDER}: a damaged query encoder export; the next build writes it anew")
    elif exported_encoder(folder) is None:
        report.notes.append("no exported query encoder: a query loads torch (methods that re-score, or an older build)")
    _check_moments(folder, entries, report)
    recorded = (str(source), source) if source is not None else recorded_source(index.meta)
    if recorded is None:
        report.notes.append("no source recorded (built from videos no file names): pass SOURCE to compare")
        return report
    label, given = recorded
    if isinstance(given, (str, os.PathLike)) and not Path(given).exists():
        report.problems.append(f"the source {label} is not there")
        return report
    dataset = read_source(given)
    prints = fingerprint_videos(dataset, entries, None, progress)
    report.source = label
    report.plan = plan_index(dataset, entries, prints, index.meta.get("pending", ()))
    kept = set(report.plan.keep)
    report.unchanged = len({e.video_id for e in entries if e.id in kept})
    if index.meta.get("pending"):
        report.problems.append(f"an update did not finish ({len(index.meta['pending'])} videos pending); "
                               "`index build --update` writes them again")
    return report


def _check_moments(folder: Path, entries: list, report: IndexReport) -> None:
    """The moment track (`search.moment_track`): readable, and which videos it holds; the entries an
    index built before every entry carried its duration lacks it for."""
    try:
        track = open_track(folder)
    except VideoTextError as exc:
        report.problems.append(f"{exc}")
    else:
        videos = {e.video_id for e in entries}
        if track is None:
            report.notes.append("no moment track: `search --moments` needs a build with --window or --moments")
        elif videos - set(track.rows):
            report.notes.append(f"{len(videos - set(track.rows))} of {len(videos)} videos are not in the moment track "
                                "(a whole-video build extracted only some of their steps: build with --moments)")
    undated = sum(e.meta.get("duration") is None for e in entries)
    if undated:
        report.notes.append(f"{undated} entries carry no duration (an older build): `index build --update` fills it")
