"""The owner of an index folder: the one place that writes it and the one place that opens it.

An index folder holds what a search reads:
- the vectors and their entries (`index.json` + `index.faiss` + `entries.parquet`, or the name of a
  Milvus collection), and the parts a re-scoring method reads (`search.index`, `search.milvus`);
- the run's query side exported to ONNX with its tokenizer (`query_encoder/`), so a text query
  needs neither torch nor transformers (`search.query_encoder`);
- what is said and what is written on screen, as timed lines with their sentence vectors
  (`speech.*`, `written.*`) and the sentence encoder exported beside them (`sentence_encoder/`);
- the moment track (`moments/`): one vector per step of every video, which a search for moments
  scores a query against (`search.moment_track`, `search.moment_search`);
- the published version (`published.json`), written last, which a running `serve` swaps in.

`build_index` takes the folder's writer lock once and runs the steps in that order: vectors
(`search.build`) and the moment track (`search.moment_build`) → query encoder → channels
(`search.spoken_build`) → publish; it returns a `BuildReport` that a caller prints. `open_index`
returns a `SearchableIndex` over one version of the folder: its text queries go through the exported
query side first, the run's model only where the folder has none (or a run or a precision is asked
for); its example queries load the model when first asked; with `moments=True` a search answers spans
of videos (start, end, score) instead of its entries. `videotext index build`, `search`, `search
--like`, `serve`, `LoadedModel.build_index` and `LoadedModel.search` all come here.

Opening must stay light (a cold `videotext search` beats `import torch`), so the building steps and
the model are imported inside the functions that need them.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from videotext.data.ocr.engines import DEFAULT_ENGINE
from videotext.errors import VideoTextError
from videotext.io import writer_lock
from videotext.search.channels import load_lines, parse_by, search_by
from videotext.search.entries import Hit, IndexStore
from videotext.search.fusion import DEFAULT_FUSION, check_fusion
from videotext.search.index import open_store
from videotext.search.live import published_version, publish
from videotext.search.milvus import DEFAULT_COLLECTION
from videotext.eval.span_finder import SpanSettings, SpansGiven, span_settings
from videotext.search.moment_search import find_moments, query_vector
from videotext.search.moment_track import MomentTrack, check_context_steps, open_track
from videotext.search.query_encoder import META_FILE, QUERY_FOLDER, exported_searcher, export_is_current
from videotext.search.runs import run_behind
from videotext.search.shortlist import like_entry

if TYPE_CHECKING:
    from videotext.search.check import IndexReport

log = logging.getLogger(__name__)


# ---- build ------------------------------------------------------------------------------------
@dataclass
class BuildReport:
    """What `build_index` did, for a caller to print (`lines`)."""

    folder: Path | None  # None: an index kept in memory
    index: IndexStore | None  # None on a torchrun rank > 0 whose store only rank 0 opens
    unit: str = "videos"  # "clips" for a window index
    query_encoder: str = ""  # what the export did
    speech: dict[str, Any] | None = None  # the transcription summary (`--speech`)
    written: dict[str, Any] | None = None  # the on-screen reading summary (`--text`)
    version: str | None = None  # the published version
    update: Any = None  # the `IndexPlan` of an update (`search.build`)
    moments: dict[str, Any] | None = None  # the moment track's summary (`search.moment_build`)

    def lines(self) -> list[str]:
        """The report as the command line prints it."""
        if self.index is None:  # a torchrun rank other than 0 on a one-writer store: rank 0 reports
            return []
        out = [f"indexed {len(self.index)} {self.unit} → {self.folder if self.folder is not None else 'memory'}"]
        if self.moments is not None:
            track = self.moments
            left = (f"; {track['left_out']} videos left out: their features hold only the steps the method "
                    f"reads, as a whole-video build without --moments extracts them") if track["left_out"] else ""
            out.append(f"moment track: {track['steps']} steps of {track['videos']} videos ({track['encoded']} "
                       f"encoded, {track['kept']} kept{left})")
        if self.query_encoder:
            out.append(f"query encoder: {self.query_encoder}")
        if self.speech is not None:
            said = self.speech
            out.append(f"speech: {said['error']}; indexed by what is shown only" if "error" in said else
                       f"speech: {said['lines']} lines ({said['kept']} videos kept, {said['subtitle']} by subtitles, "
                       f"{said['asr']} recognized, {said['none']} without speech, {said['failed']} failed; "
                       f"{said['failures']})")
        if self.written is not None:
            seen = self.written
            out.append(f"on-screen text: {seen['error']}; indexed without it" if "error" in seen else
                       f"on-screen text: {seen['lines']} lines ({seen['kept']} videos kept, {seen['text']} with "
                       f"text, {seen['none']} without, {seen['failed']} failed; {seen['read']} of "
                       f"{seen['samples']} sampled frames read, {seen['unreadable']} unreadable; "
                       f"{seen['failures']})")
        if self.version is not None:
            out.append(f"published version {self.version}")
        if self.update is not None:
            plan = self.update
            out.append(f"update: {len(plan.add) - len(plan.changed)} videos added, {len(plan.changed)} changed in "
                       f"place (encoded again), {len(plan.gone)} deleted, {len(plan.keep)} entries kept as they were")
        return out


def build_index(model: Any, source: Any = None, out: str | os.PathLike | None = None, *,
                features: str | os.PathLike | None = None, update: bool = False, window: float | None = None,
                stride: float | None = None, store: str = "faiss", collection: str = DEFAULT_COLLECTION,
                speech: bool = False, asr_engine: str = "whisper", asr_model: str | None = None,
                text: bool = False, ocr_engine: str = DEFAULT_ENGINE, lock_timeout: float = 600.0,
                progress: bool = True, precision: str | None = None, threads: int | None = None,
                moments: bool = False, moment_context: int | None = None) -> BuildReport:
    """Build (or with `update`, bring up to date) the index folder `out` from the videos of `source`
    (a folder, a manifest or a `VideoTextDataset`; with `update`, by default what the index was built
    from) with `model` (a loaded run, or a run folder loaded here at `precision` / `threads`).

    The vectors (`search.build.build_index`: `update` adds new videos, encodes changed ones again and
    drops deleted ones; `window` / `stride` index sliding-window clips; `store` "faiss", "milvus:PATH.db"
    or a Milvus server URI with `collection`) and the moment track (one vector per step of each video,
    from the features at hand: a window build extracts every step; a whole-video build only with
    `moments`, else those the method reads, so the track then leaves out videos with more steps than
    that; each step's vector encodes `moment_context` steps centred on it, default 1, on an update the
    track's own), then the query encoder, then what is said (`speech`: subtitles, else `asr_engine` /
    `asr_model`) and what is written (`text`: `ocr_engine`), then the
    published version, all under one writer lock (a second writer waits `lock_timeout` seconds, then
    stops with one line naming the holder). Features go to `features` (default `OUT.features`). Without
    `out` the index stays in memory (vectors only). Under torchrun every rank encodes its share and
    rank 0 writes."""
    import videotext.distributed as dist  # torch: never on the opening path

    if moment_context is not None:
        check_context_steps(moment_context)  # before any work
    if source is None:  # an update of what the index was built from
        source = _recorded_source(out) if update and out is not None else None
        if source is None:
            raise VideoTextError(f"{out}: give the videos to index (SOURCE): "
                                 + ("the index records no source" if update else "only --update takes them from the index"))
    writes = out is not None and dist.env_rank() == 0
    with writer_lock(out, "index build", lock_timeout) if writes and out is not None else contextlib.nullcontext():
        if isinstance(model, (str, os.PathLike)):
            model = load_run(model, precision=precision, threads=threads)
        if dist.env_world_size() > 1:
            model.join_ranks()
        return _build(model, source, out, writes, features, update, window, stride, store, collection, speech,
                      asr_engine, asr_model, text, ocr_engine, progress, moments, moment_context)


def _build(model: Any, source: Any, out: str | os.PathLike | None, writes: bool, features: Any, update: bool,
           window: float | None, stride: float | None, store: str, collection: str, speech: bool, asr_engine: str,
           asr_model: str | None, text: bool, ocr_engine: str, progress: bool, moments: bool,
           moment_context: int | None = None) -> BuildReport:
    """The steps of a build, in the folder's order, under the lock `build_index` holds."""
    import videotext.search.build as vectors  # torch: off the opening path
    import videotext.search.moment_build as track  # torch (the run's encoder): off the opening path
    import videotext.search.spoken_build as channels  # torch (the sentence encoder): off the opening path

    index, plan = vectors.build_index(model, source, out, features, progress, update, window, stride, store,
                                      collection, every_step=moments)
    report = BuildReport(Path(out) if out is not None else None, index, "clips" if window else "videos",
                         update=plan.plan if update else None)
    if not writes or index is None or out is None:
        return report
    features_dir = Path(features) if features is not None else vectors.features_folder(out, model.run_dir)
    report.moments = track.build_moment_track(model, index, vectors.read_source(source), out, features_dir,
                                              progress=progress, context_steps=moment_context)
    report.query_encoder = export_query_side(model, out)
    if speech:
        report.speech = channels.build_spoken_index(index, out, features_dir, asr_engine, asr_model, progress=progress)
    if text:
        report.written = channels.build_written_index(index, out, features_dir, ocr_engine, progress=progress)
    report.version = publish(Path(out))  # the last write: a running `serve` swaps this version in
    return report


def _recorded_source(folder: str | os.PathLike) -> Any:
    """What the index folder was built from (`search.build.recorded_source`), None when it says nothing."""
    import videotext.search.build as vectors  # torch: off the opening path

    try:
        meta = json.loads((Path(folder) / "index.json").read_text(encoding="utf-8")).get("meta") or {}
    except (OSError, ValueError, AttributeError):
        return None
    recorded = vectors.recorded_source(meta)
    return recorded[1] if recorded is not None else None


def load_run(run: str | os.PathLike, **settings: Any) -> Any:
    """The run folder `run` loaded for encoding (`videotext.run_model.load_run`: `precision`, `threads`)."""
    import videotext.run_model as run_model  # torch and the methods: only when a build or a query needs them

    return run_model.load_run(run, **settings)


def export_query_side(model: Any, folder: str | os.PathLike | None) -> str:
    """The run's query side as ONNX with its tokenizer in `folder/query_encoder`, so a text search needs
    neither torch nor transformers; kept when it is already there for these weights, made once per
    run beside its weights (`checkpoints/<name>/query_encoder`) and linked into every index built from
    it (without `folder`, only made there: `videotext convert` prepares a run so). Returns what was done.
    A method that needs torch to search (a cross-encoder, a sentence hierarchy) exports nothing, and an
    older export in the folder is removed (never another run's)."""
    import videotext.search.query_export as query_export  # torch: off the opening path

    target = Path(folder) / QUERY_FOLDER if folder is not None else None
    if model.method is None:  # a model that only plans (an update that removes): nothing to trace
        return ""
    why = query_export.why_not_exportable(model.method, model.rescores)
    if why is not None:
        if target is not None:
            shutil.rmtree(target, ignore_errors=True)
        return f"not exported ({model.method_name}: {why}); a search loads the model"
    cache = model.checkpoint / QUERY_FOLDER if model.checkpoint is not None else None  # beside the weights
    done = (f"exported to {target} (a text search needs neither torch nor transformers)" if target is not None
            else f"exported to {cache} (every index built from this run links it)")
    stamp = model.weights_stamp()
    where = target if target is not None else cache
    if where is not None and export_is_current(where, stamp):
        return done
    try:
        query_export.export_query_encoder(model.fp32_cpu_method(), folder, rescores=model.rescores, source=stamp,
                                          cache=model.export_cache)  # beside the weights
        return done
    except (RuntimeError, OSError, ValueError, ImportError) as exc:  # the index works without it
        if target is not None:
            shutil.rmtree(target, ignore_errors=True)
        log.warning("query encoder not exported (%s): searches of %s load the model", exc, folder or cache)
        return f"not exported ({exc}); a search loads the model"


def check_index(folder: str | os.PathLike, source: str | os.PathLike | None = None,
                progress: bool = False) -> IndexReport:
    """The folder against its source, changing nothing (`search.check`): damaged files, the run behind
    it, its query encoder, and what an update would add, encode again and drop."""
    from videotext.search.check import check_index as check  # the update planner loads torch: off the opening path

    return check(folder, source, progress=progress)


def check_search(by: str = "all", fusion: str = DEFAULT_FUSION, moments: bool = False,
                 spans: SpansGiven = None) -> SpanSettings:
    """One clear error for a `by`, `fusion` or span setting that a search does not take, before anything
    is opened; returns the span finder's settings of a search for moments (`eval.span_finder.span_settings`)."""
    parse_by(by)
    check_fusion(fusion)
    if spans is not None and not moments:
        raise VideoTextError("span settings are for a search for moments (--moments, moments=true)")
    return span_settings(spans)


# ---- open -------------------------------------------------------------------------------------
@dataclass
class SearchableIndex:
    """One version of an index folder, opened for search (`open_index`).

    `search` ranks by what is shown (the query side), said and written (the folder's lines), fused;
    `like` finds the entries most like an example file or an indexed entry. The run's model is loaded
    only when a query needs it (`model`)."""

    folder: Path
    index: IndexStore
    lines: dict[str, Any]  # the text channels the folder holds: {"said": SpokenIndex, "written": …}
    version: str
    run: Path | None = None  # the run that encodes queries (`--run`), else the one that built the index
    precision: str | None = None
    threads: int | None = None
    searcher: Any = None  # the query side: exported encoder, a loaded model, or one given by the caller
    key: tuple = ()  # what decides the query side (`_query_key`): versions with equal keys share it
    _model: Any = field(default=None, repr=False)
    _track: Any = field(default=False, repr=False)  # the moment track once opened (None: the folder has none)

    def __len__(self) -> int:
        return len(self.index)

    @property
    def model(self) -> Any:
        """The run's model (`RunModel`), loaded on first use: for example queries, and for text queries
        where the folder holds no exported query side."""
        if self._model is None:
            if self.searcher is not None and hasattr(self.searcher, "encode_example"):
                self._model = self.searcher  # a model the caller handed in
            else:
                self._model = load_run(run_behind(self.index, self.run, self.folder), precision=self.precision,
                                       threads=self.threads)
        return self._model

    @property
    def query_side(self) -> Any:
        """What encodes a text query against the vectors: the exported encoder first, else the model."""
        if self.searcher is None:
            self.searcher = self.model
        return self.searcher

    @property
    def track(self) -> MomentTrack | None:
        """The folder's moment track (`search.moment_track`), opened on first use; None when it keeps none."""
        if self._track is False:
            self._track = open_track(self.folder)
        return self._track

    def warm(self) -> "SearchableIndex":
        """Load now what a first text query would load (the query side, the lines' sentence encoder, the
        moment track)."""
        for lines in self.lines.values():
            lines.query_vector("warm")
        self.query_side  # noqa: B018 - loads it
        self.track  # noqa: B018 - opens it (this version's files)
        return self

    def search(self, query: str, k: int = 10, by: str = "all", where: str | None = None,
               fusion: str = DEFAULT_FUSION, moments: bool = False, spans: SpansGiven = None) -> list[Hit]:
        """Top-k hits for a text query by what is shown, said and written (`by`: shown, said, written,
        both, all or a comma list; `search.channels`), fused by `fusion` (standard or rrf); `where` keeps
        the entries whose metadata pass that filter (`search.filters`). With `moments`, the k best spans
        of videos by what is shown instead (`moments`, its span finder's settings `spans`)."""
        settings = check_search(by, fusion, moments, spans)
        channels = _channels(by, self.lines)
        if moments:
            if "shown" not in channels:
                raise VideoTextError(f"--moments finds spans by what is shown; --by {by!r} leaves it out")
            return self.moments(query, k, where, settings)
        searcher = self.searcher
        if searcher is None and "shown" in channels:  # text channels alone load no model
            searcher = self.query_side
        return search_by(searcher, self.index, self.lines, query, k=k, by=by, where=where, fusion=fusion)

    def moments(self, query: str, k: int = 10, where: str | None = None, spans: SpansGiven = None) -> list[Hit]:
        """The k best moments of the indexed videos for a text query: spans with their start, end and
        score (`search.moment_search`), scored against the folder's moment track by the query side.
        `spans`: the span finder's settings over its defaults (`eval.span_finder.span_settings`: a
        `SpanSettings`, {name: value} or NAME=VALUE strings), e.g. {"max_steps": 6} chosen on a val split."""
        settings = span_settings(spans)  # a bad setting is told before the track is read (as is: a SpanSettings)
        track = self.track
        if track is None:
            raise VideoTextError("this index keeps no moment track; build it with `videotext index build --moments` "
                                 "(every step of whole videos) or `--window SECONDS`")  # no path: the HTTP API says it
        return find_moments(self.index, track, query_vector(self.query_side, query), k, where, settings=settings)

    def like(self, example: Any = None, k: int = 10, where: str | None = None, id: str | None = None) -> list[Hit]:
        """The k entries most like an example (an image, a video, or `PATH@START-END`, extracted and
        encoded as the build does) or like the indexed entry `id` (itself left out), by the dot product
        of index vectors: for methods that re-score text queries (MMT, ToCo) their index vectors' cosine."""
        if (example is None) == (id is None):
            raise VideoTextError("query by example: give an example file or an indexed id, not both")
        if id is not None:
            return like_entry(self.index, id, k, where)
        return self.index.search(np.asarray(self.model.encode_example(example), np.float32), k, where=where)[0]


def _channels(by: str, lines: dict[str, Any]) -> list[str]:
    """The channels `by` names that this folder can answer (`both`/`all` take the ones it has)."""
    names = parse_by(by)
    return [c for c in names if c == "shown" or c in lines] if by.strip() in ("both", "all") else names


def open_index(folder: str | os.PathLike, run: str | os.PathLike | None = None, precision: str | None = None,
               threads: int | None = None, searcher: Any = None, previous: SearchableIndex | None = None,
               version: str | None = None) -> SearchableIndex:
    """The index folder `folder` opened for search, at its published `version` (read if not given).

    Text queries go through the query side exported into the folder (no torch), unless `run` or
    `precision` asks for a model, or the folder has none; then the model of `run`, else of the run that
    built the index, loads at the first query (`threads`, `precision`: its inference settings). A
    `searcher` given by the caller (anything with `search(query, index, k, where)`) answers instead.
    `previous`, an earlier version of the same folder (a served index swapping versions), lends its
    query side and model when the run behind both is the same."""
    folder = Path(folder)
    index = open_store(folder)
    opened = SearchableIndex(folder, index, load_lines(folder), version or published_version(folder) or "unpublished",
                             Path(run) if run is not None else None, precision, threads, searcher)
    opened.key = _query_key(opened)
    if searcher is None and previous is not None and previous.key == opened.key:
        opened.searcher, opened._model = previous.searcher, previous._model
    elif searcher is None and run is None and precision is None:
        opened.searcher = exported_searcher(folder)  # None: the model answers, loaded at the first query
    return opened


def _query_key(opened: SearchableIndex) -> tuple:
    """What decides a folder's query side: the method and run behind the index, the run and precision
    asked for, and the weights its exported encoder was made from (`encoder.json`'s source)."""
    try:
        export = json.loads((opened.folder / QUERY_FOLDER / META_FILE).read_text(encoding="utf-8")).get("source")
    except (OSError, ValueError, AttributeError):
        export = None
    return (opened.index.model, opened.index.meta.get("run_dir"), opened.run, opened.precision, export)
