"""A benchmark run and its page, as `videotext benchmark run` and `report` do them: the default folders
named after the benchmark, the training of every unfinished (row, seed) with the page rewritten after
each, and the command that rewrites the page from the records."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

from videotext.benchmark.definition import load_benchmark
from videotext.benchmark.runner import run_benchmark
from videotext.benchmark.table import write_page


def default_folders(bench_name: str, out: Optional[Path] = None, results: Optional[Path] = None) -> tuple[Path, Path]:
    """The runs folder and the records folder, their defaults named after the benchmark."""
    return Path(out or Path("runs/benchmark") / bench_name), Path(results or Path("results/benchmark") / bench_name)


def report_command(name: str, bench_name: str, out: Path, results: Path, page: Path) -> str:
    """The `videotext benchmark report` line that rewrites `page`, naming only non-default folders."""
    default_out, default_results = default_folders(bench_name)
    return (f"videotext benchmark report {name}" + (f" --out {out}" if out != default_out else "")
            + (f" --results {results}" if results != default_results else "") + f" -o {page}")


def run(name: str, out: Optional[Path] = None, results: Optional[Path] = None, data_root: Path = Path("data"),
        rows: Optional[Sequence[str]] = None, seeds: Optional[Sequence[int]] = None, epochs: Optional[int] = None,
        overrides: Sequence[str] = (), page: Optional[Path] = None, progress: bool = False) -> dict[str, Any]:
    """Train, select on validation and test every (row, seed) of the benchmark `name` not finished yet,
    rewriting the page after each run; returns the runner's summary with the folders and the page."""
    bench = load_benchmark(name, list(overrides))
    out, results = default_folders(bench.name, out, results)
    if seeds is not None:
        bench.seeds = list(seeds)
    page = page or out / "benchmark.md"
    command = report_command(name, bench.name, out, results, page)
    result = run_benchmark(bench, out, data_root, rows=list(rows) if rows else None, seeds=seeds, epochs=epochs,
                           progress=progress, results=results, after_each=lambda: write_page(bench, out, page, command,
                                                                                            results))
    write_page(bench, out, page, command, results)
    return {**result, "results": results, "page": page}


def report(name: str, out: Optional[Path] = None, results: Optional[Path] = None,
           page: Path = Path("docs/benchmark.md"), overrides: Sequence[str] = ()) -> Path:
    """Write the benchmark page from the records of finished runs (unfinished ones are marked not run)."""
    bench = load_benchmark(name, list(overrides))
    out, results = default_folders(bench.name, out, results)
    return write_page(bench, out, page, report_command(name, bench.name, out, results, page), results)
