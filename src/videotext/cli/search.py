"""`videotext index build|check|duplicates`, `search` and `serve`: the index folder, through its owner
(`videotext.apps.index_folder`)."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from videotext.cli.common import (app, asr_engine_option, asr_model_option, index_app, precision_option, print_hits, print_report,
                                  threads_option, user_errors)
from videotext.errors import VideoTextError


@index_app.command("build")
@user_errors
def index_build(
    run_dir: Path = typer.Argument(..., help="A trained run directory, or a run on the hub: hf-hub:ORG/NAME[@REVISION]."),
    source: Optional[Path] = typer.Argument(None, help="A folder of videos or a manifest.json (with --update, "
                                                       "default: what the index was built from)."),
    out: Path = typer.Option(..., "--out", "-o", help="Index folder to write."),
    features: Optional[Path] = typer.Option(None, help="Feature store to use/extract into (default: OUT.features)."),
    update: bool = typer.Option(False, "--update", help="Update an existing index: add new videos, re-index changed ones, drop deleted ones."),
    window: Optional[float] = typer.Option(None, help="Index sliding-window clips of this many seconds instead of whole videos."),
    stride: Optional[float] = typer.Option(None, help="Seconds between window starts (default: half the window)."),
    store: str = typer.Option("faiss", help="Where the vectors live: faiss (in the index folder), milvus:PATH.db "
                                            "(Milvus Lite) or http://HOST:19530 (a Milvus server)."),
    collection: str = typer.Option("videotext", help="Milvus collection (with a Milvus store)."),
    precision: Optional[str] = precision_option(None),
    threads: Optional[int] = threads_option(None),
    speech: bool = typer.Option(False, "--speech/--no-speech", help="Also index what is said: subtitles, else speech "
                                                                    "recognition (docs/speech.md)."),
    asr_engine: str = asr_engine_option(),
    asr_model: Optional[str] = asr_model_option(),
    text: bool = typer.Option(False, "--text/--no-text", help="Also index what is written on screen: frames about "
                                                              "once a second, read where the picture changed "
                                                              "(docs/text.md)."),
    ocr_engine: str = typer.Option("rapidocr", "--ocr-engine", help="OCR engine for --text: rapidocr or tesseract."),
    lock_timeout: float = typer.Option(600.0, "--lock-timeout", min=0.0,
                                       help="Seconds to wait for another build or update of the same index to "
                                            "finish (one writer at a time)."),
    moments: bool = typer.Option(False, "--moments", help="Extract every step of whole videos, so `search "
                                                          "--moments` finds spans in them (a --window build "
                                                          "always can; docs/search.md)."),
    moment_context: Optional[int] = typer.Option(None, "--moment-context", help="Steps of the clip that gives "
                                                 "each step its vector for --moments (odd; default 1, an update "
                                                 "keeps the index's; docs/search.md)."),
) -> None:
    """Embed every video of a folder or manifest (extracting features as needed) into an index."""
    from videotext.apps.index_folder import build_index

    report = build_index(run_dir, source, out, features=features, update=update, window=window, stride=stride,
                         store=store, collection=collection, speech=speech, asr_engine=asr_engine, asr_model=asr_model,
                         text=text, ocr_engine=ocr_engine, lock_timeout=lock_timeout, precision=precision,
                         threads=threads, moments=moments, moment_context=moment_context)
    for line in report.lines():
        typer.echo(line)


@index_app.command("check")
@user_errors
def index_check(
    index: Path = typer.Argument(..., help="An index folder made by `videotext index build`."),
    source: Optional[Path] = typer.Argument(None, help="The folder or manifest to compare with (default: the "
                                                       "folder the index was built from)."),
) -> None:
    """Check an index against its source without changing anything: damaged files (each against the
    digest recorded when it was written), the run behind it, and what `index build --update` would
    add, encode again and drop. Exit 0: up to date; 1: an update would change it, or a problem was
    found; 2: a file is damaged or the folder cannot be read."""
    from videotext.apps.index_folder import check_index

    report = check_index(index, source, progress=True)
    print_report(report.lines(), report.damaged)
    if not report.current:
        raise typer.Exit(1)


@index_app.command("duplicates")
@user_errors
def index_duplicates(
    index: Path = typer.Argument(..., help="An index folder made by `videotext index build`."),
    threshold: Optional[float] = typer.Option(None, "--threshold", help="Lowest score that links two entries "
                                              "(default: the conse run's measured one, docs/search.md)."),
    neighbours: int = typer.Option(20, "--neighbours", min=1, max=1000, help="Nearest entries searched per entry (k)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Report path: OUT.json and OUT.csv "
                                                                 "(default: INDEX/duplicates.json and .csv)."),
) -> None:
    """Groups of near-duplicates (re-encodes, resizes, crops, trims, speed changes, mirror images) in an index."""
    from videotext.search.duplicates import index_duplicates as find

    groups, threshold, entries, (json_path, csv_path) = find(index, threshold, neighbours, out)
    typer.echo(f"{len(groups)} groups of near-duplicates ({sum(len(g.members) for g in groups)} of {entries} "
               f"entries) at threshold {threshold:g} → {json_path}, {csv_path}")
    for number, group in enumerate(groups[:20], 1):
        scores = [s for _, _, s in group.links]
        typer.echo(f"{number:3d}  {len(group.members)} entries, scores {min(scores):.3f}-{max(scores):.3f}: "
                   f"{', '.join(group.members[:8])}{' …' if len(group.members) > 8 else ''}")


@app.command()
@user_errors
def search(
    index: Path = typer.Argument(..., help="An index folder made by `videotext index build`."),
    query: Optional[str] = typer.Argument(None, help="Natural-language query (or --like / --like-id)."),
    k: int = typer.Option(10, "-k", min=1, max=1000, help="Number of results."),
    run_dir: Optional[Path] = typer.Option(None, "--run", help="Run whose model encodes the query (default: the index's): a folder or hf-hub:ORG/NAME[@REVISION]."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    like: Optional[str] = typer.Option(None, "--like", help="Query by example: an image, a video, or a time range "
                                                            "of one as PATH@START-END (seconds)."),
    like_id: Optional[str] = typer.Option(None, "--like-id", help="Query by example: an entry of the index (left out)."),
    where: Optional[str] = typer.Option(None, "--where", help="Keep entries whose metadata pass this filter, e.g. "
                                                              "'start >= 30 and path startswith \"talks/\"' (docs/search.md)."),
    precision: Optional[str] = precision_option(None),
    threads: Optional[int] = threads_option(None),
    by: str = typer.Option("all", "--by", help="Match what is shown, said (transcripts: an index built with --speech), "
                                               "written (on screen: --text), both (shown and said), all (every one "
                                               "the index has) or a comma list, fused by --fusion (docs/search.md)."),
    fusion: str = typer.Option("standard", "--fusion", help="How rankings are fused: standard (each one's scores "
                                                            "standardised over the candidates, summed) or rrf "
                                                            "(reciprocal rank fusion)."),
    moments: bool = typer.Option(False, "--moments", help="Answer the best spans of videos (start, end, score) "
                                                          "instead of indexed videos or windows."),
    span: Optional[List[str]] = typer.Option(None, "--span", help="With --moments: a span finder setting "
                                             "NAME=VALUE over its defaults (repeatable), e.g. max_steps=6 "
                                             "(docs/search.md lists them)."),
) -> None:
    """Search an index with text; prints ranked videos with scores (and the matched spoken line)."""
    from videotext.apps.index_folder import check_search, open_index

    if sum(x is not None for x in (query, like, like_id)) != 1:
        raise VideoTextError("search: give one of a text QUERY, --like PATH or --like-id ID")
    if moments and query is None:
        raise VideoTextError("search: --moments takes a text QUERY")
    check_search(by, fusion, moments, span or None)  # before anything is opened
    opened = open_index(index, run_dir, precision, threads)
    if query is not None:
        print_hits(opened.search(query, k=k, by=by, where=where, fusion=fusion, moments=moments, spans=span or None), as_json)
    else:
        print_hits(opened.like(like, k=k, where=where, id=like_id), as_json)


@app.command()
@user_errors
def serve(
    index: Path = typer.Argument(..., help="An index folder made by `videotext index build`."),
    host: str = typer.Option("127.0.0.1", help="Address to bind (loopback by default; any other needs --token)."),
    port: int = typer.Option(8000, min=1, max=65535, help="TCP port."),
    run_dir: Optional[Path] = typer.Option(None, "--run", help="Run whose model encodes queries (default: the index's): a folder or hf-hub:ORG/NAME[@REVISION]."),
    precision: Optional[str] = precision_option(None),
    threads: Optional[int] = threads_option(None),
    token: Optional[str] = typer.Option(None, envvar="VIDEOTEXT_TOKEN", show_default=False,
                                        help="Access token every request must send as 'Authorization: Bearer TOKEN'; "
                                             "required off loopback (env VIDEOTEXT_TOKEN)."),
    reload_seconds: float = typer.Option(1.0, "--reload-seconds", min=0.0,
                                         help="Seconds between looks for a newly published version of the index "
                                              "(`index build --update` publishes one); it is swapped in between "
                                              "requests. 0: serve the first version only."),
) -> None:
    """Serve the search API and web page for an index (http://HOST:PORT/)."""
    from videotext.apps.serve import create_app, require_token_for, serve as run_server

    require_token_for(host, token)  # before loading anything
    app = create_app(index, run_dir, precision=precision, threads=threads, token=token, reload_seconds=reload_seconds)
    typer.echo(f"serving {len(app.state.index)} entries of {index} (version {app.state.live.snapshot.version}) on "
               f"http://{host}:{port}/  (schema: /openapi.json)")
    run_server(app, host=host, port=port)
