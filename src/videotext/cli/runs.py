"""`videotext train`, `eval`, `localize`, `compare`, `benchmark …`, `check`, `configs`, `methods` and `push`:
runs, their figures, and sharing them on the hub."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from videotext.cli.common import (MOMENT_COLUMNS, app, benchmark_app, metrics_text, precision_option, print_report, split_list, threads_option,
                                  user_errors)


@app.command()
@user_errors
def train(
    config: str = typer.Argument(..., help="A run config YAML, or a packaged config by name, e.g. mmt/msrvtt_1ka (`videotext configs`)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="Override a config key: a.b=value (repeatable)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in out_dir from its last checkpoint."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Run directory (default: out_dir of the config)."),
    seeds: Optional[str] = typer.Option(None, help="Comma-separated seeds: run once per seed and report mean ± std."),
    progress: bool = typer.Option(True, help="Show progress bars."),
    report: bool = typer.Option(True, help="Write run_dir/report/index.html after the test evaluation."),
    init_from: Optional[Path] = typer.Option(None, "--init-from", help="Start from this run's best weights (model only; = train.init_from): a run folder, or hf-hub:ORG/NAME[@REVISION]."),
) -> None:
    """Train a method; select on validation; evaluate the test split once at the end."""
    from videotext.apps.runs import train_run
    from videotext.eval.compare import SEEDS_SUMMARY
    from videotext.eval.retrieval import format_mean_std

    done = train_run(config, list(set_ or []), out, split_list(seeds) if seeds else (), resume=resume, progress=progress,
                     report=report, on_seed=lambda seed, result: typer.echo(f"seed {seed}: " + metrics_text(result)),
                     init_from=init_from)
    if done.summary is None:
        typer.echo(metrics_text(done.result))
        if done.report is not None:
            typer.echo(f"report: {done.report}")
        typer.echo(f"run: {done.run_dir}")
        return
    for direction, metrics in done.summary.items():
        if isinstance(metrics, dict) and "R1" in metrics:
            typer.echo(direction + "  " + "  ".join(f"{k} {format_mean_std(metrics[k])}" for k in ("R1", "R5", "R10", "MdR")))
        elif direction == "moments" and isinstance(metrics, dict):
            typer.echo("moments  " + "  ".join(f"{k} {format_mean_std(metrics[k])}" for k in MOMENT_COLUMNS if k in metrics))
    typer.echo(f"mean ± std over {len(done.summary['seeds'])} seeds: {done.run_dir / SEEDS_SUMMARY}")


@app.command("eval")
@user_errors
def eval_command(
    run_dir: Path = typer.Argument(..., help="A run directory made by `videotext train`, or a run on the hub: "
                                             "hf-hub:ORG/NAME[@REVISION] (with --data)."),
    split: str = typer.Option("test", help="Split to evaluate."),
    checkpoint: str = typer.Option("best", help="Checkpoint: best (selected on validation) or last."),
    report: bool = typer.Option(True, help="Write run_dir/report/index.html for this split."),
    data_config: Optional[str] = typer.Option(None, "--data", help="Zero-shot: evaluate on this config's data section (another dataset; a file or a packaged name)."),
    precision: Optional[str] = precision_option(None),
    threads: Optional[int] = threads_option(None),
    rescore: Optional[List[str]] = typer.Option(None, "--rescore", help="Also report re-scored figures, labelled, beside the plain ones: dsl (dual softmax over all test queries at once), qbnorm (QB-Norm with a querybank of the training captions). Repeatable or comma-separated."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Folder for eval_SPLIT_CHECKPOINT.json and the report (default: the run folder; for a run on the hub, runs/ORG--NAME)."),
    decode: Optional[str] = typer.Option(None, "--decode", help="A moment run's spans read another way than it was trained with: spans (its moment queries', the paper's) or saliency (the span finder over its step saliency); written to eval_SPLIT_CHECKPOINT_DECODE.json."),
) -> None:
    """Evaluate a trained run on one split (the method's protocols; both directions)."""
    from videotext.apps.runs import evaluate

    result, page = evaluate(run_dir, split, checkpoint, report, data_config, precision, threads, rescore or (), out,
                            decode)
    typer.echo(metrics_text(result))
    for entry in result.get("rescored", {}).values():  # never in place of the plain figures above
        typer.echo(metrics_text({f"{d} ({label})": entry[d] for d, label in entry["labels"].items()}))
        typer.echo(f"  ({entry['uses']})")
    if page is not None:
        typer.echo(f"report: {page}")


@app.command("localize")
@user_errors
def localize_command(
    run_dir: Path = typer.Argument(..., help="A run directory made by `videotext train` (a feature-based method)."),
    split: str = typer.Option("test", help="Split whose videos' timed steps are localized."),
    checkpoint: str = typer.Option("best", help="Checkpoint: best (selected on validation) or last."),
    decoding: str = typer.Option("ordered", help="ordered (CrossTask's DP, steps in order) or argmax (per step)."),
    normalize: str = typer.Option("log_softmax", help="log_softmax over steps per second (CrossTask) or none."),
    window: float = typer.Option(1.0, help="Seconds of features around each second scored against the steps."),
    manifest: Optional[Path] = typer.Option(None, help="Evaluate on another manifest (zero-shot, e.g. CrossTask)."),
    features: Optional[Path] = typer.Option(None, help="Feature store of --manifest (default: its folder/features)."),
) -> None:
    """Action-step localization (CrossTask protocol, ToCo §5.2): average recall vs chance."""
    from videotext.apps.runs import localize_run

    result = localize_run(run_dir, split, checkpoint, decoding, normalize, window, manifest, features)
    loc = result["localization"]
    typer.echo(f"average recall {loc['recall']:.1f}  (step recall {loc['step_recall']:.1f}; "
               f"{loc['n_steps']} steps, {loc['n_videos']} videos, {decoding} decoding)")
    typer.echo(f"chance {result['chance']['recall']:.1f}  uniform-in-order {result['uniform']['recall']:.1f}")


@app.command()
@user_errors
def compare(
    runs: List[Path] = typer.Argument(..., help="Finished run directories (test_metrics.json, seeds_summary.json or seed_N/ runs)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for comparison.json and report/index.html."),
    labels: Optional[str] = typer.Option(None, help="Comma-separated row labels (default: the run folder names)."),
    direction: str = typer.Option("t2v", help="Direction to compare (t2v, v2t, par2vid, …)."),
    metric: str = typer.Option("R1", help="Metric of the bar chart."),
    title: str = typer.Option("Run comparison", help="Report title."),
    baseline: Optional[str] = typer.Option(None, help="Row label to pair the others with, seed by seed (--seeds folders)."),
) -> None:
    """Compare finished runs: one table and one bar chart (ablations, baselines)."""
    from videotext.eval.compare import compare_runs
    from videotext.eval.retrieval import format_mean_std

    page = compare_runs(runs, out, split_list(labels) if labels else None, direction, metric, title, baseline)
    saved = json.loads((out / "comparison.json").read_text(encoding="utf-8"))
    for label, row in saved["metrics"].items():
        value = row[metric]
        typer.echo(f"{label:24s} {direction} {metric} {format_mean_std(value) if isinstance(value, dict) else f'{value:.1f}'}")
    for label, paired in saved["paired"].items():
        if paired:
            signs = ", ".join(f"{d:+.1f}" for d in paired["per_seed"].values())
            typer.echo(f"{label} − {baseline}: {format_mean_std(paired)} paired by seed ({signs})")
    typer.echo(f"report: {page}")


@benchmark_app.command("run")
@user_errors
def benchmark_run(
    name: str = typer.Argument(..., help="A packaged benchmark (synthetic) or a benchmark YAML file."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Runs folder (default runs/benchmark/NAME)."),
    results: Optional[Path] = typer.Option(None, help="Records of finished runs, small enough to commit (default results/benchmark/NAME)."),
    data_root: Path = typer.Option(Path("data"), help="Where the data sets live (the demo's: data/)."),
    rows: Optional[str] = typer.Option(None, help="Comma-separated row names (default: all, in the definition's order)."),
    seeds: Optional[str] = typer.Option(None, help="Comma-separated seeds (default: the definition's)."),
    epochs: Optional[int] = typer.Option(None, min=1, help="Every row's epoch budget (quick checks; the table shows it)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="Override a definition key, e.g. data.videos=32."),
    page: Optional[Path] = typer.Option(None, help="Markdown page rewritten after each run (default OUT/benchmark.md)."),
    progress: bool = typer.Option(False, help="Show progress bars."),
) -> None:
    """Train, select on validation and test every (row, seed) not finished yet; resumes, reuses finished runs."""
    from videotext.benchmark import jobs

    result = jobs.run(name, out, results, data_root, split_list(rows) if rows else None,
                      [int(s) for s in split_list(seeds)] if seeds else None, epochs, list(set_ or []), page, progress)
    typer.echo(f"{len(result['finished'])} runs finished, {len(result['failed'])} failed; records: {result['results']}; "
               f"table: {result['page']}")


@benchmark_app.command("report")
@user_errors
def benchmark_report(
    name: str = typer.Argument(..., help="A packaged benchmark (synthetic) or a benchmark YAML file."),
    out: Optional[Path] = typer.Option(None, "--out", help="Runs folder (default runs/benchmark/NAME)."),
    results: Optional[Path] = typer.Option(None, help="Records of finished runs (default results/benchmark/NAME)."),
    page: Path = typer.Option(Path("docs/benchmark.md"), "-o", "--page", help="Markdown page to write (a PNG plot beside it)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="Override a definition key, e.g. seeds=[0]."),
) -> None:
    """Write the benchmark page from the records of finished runs (unfinished ones are marked not run)."""
    from videotext.benchmark import jobs

    typer.echo(f"wrote {jobs.report(name, out, results, page, list(set_ or []))}")


@app.command("check")
@user_errors
def check_command(
    path: Path = typer.Argument(..., help="A run folder (or any folder videotext wrote: an index, a feature store, "
                                          "benchmark records)."),
) -> None:
    """Check every file of a run against the digest recorded when it was written, and every line of its
    logs, changing nothing. Each damaged file is one `error:` line naming it and the way back; exit 0:
    no damage, 2: damage found."""
    from videotext.apps.integrity import check_folder

    report = check_folder(path)
    print_report(report.lines(), report.problems)


@app.command("configs")
def configs_command() -> None:
    """List the packaged configs (`videotext train NAME`), each with its one-line description."""
    from videotext.config import packaged_configs

    configs = packaged_configs()
    width = max(map(len, configs), default=0)
    for name, description in configs.items():
        typer.echo(f"{name:<{width}}  {description}")


@app.command("methods")
def methods_command() -> None:
    """List the registered methods (the `method:` of a config), one line each."""
    from videotext.models.registry import list_methods

    methods = list_methods()
    width = max(map(len, methods), default=0)
    for name, description in methods.items():
        typer.echo(f"{name:<{width}}  {description}")


@app.command()
@user_errors
def push(
    run_dir: Path = typer.Argument(..., help="A trained run directory (one seed's, for a run of several seeds)."),
    repo_id: str = typer.Argument(..., help="The hub repository to upload to: ORG/NAME (created if needed)."),
    revision: Optional[str] = typer.Option(None, "--revision", help="Branch to upload to (made from main if new); "
                                           "load it as hf-hub:ORG/NAME@REVISION. Default: main."),
    private: bool = typer.Option(False, "--private", help="Create the repository as private (an existing one keeps "
                                                          "its visibility)."),
    force: bool = typer.Option(False, "--force", help="Replace a run already at that revision."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the files and print the model card; send nothing."),
) -> None:
    """Share a trained run on the Hugging Face Hub: its best checkpoint, pinned config, exported query
    encoder and a model card written from its records; load it anywhere as hf-hub:ORG/NAME."""
    from videotext.apps.push import push_to_hub

    report = push_to_hub(run_dir, repo_id, revision=revision, private=private, force=force, dry_run=dry_run)
    for line in report.lines():
        typer.echo(line)
    if dry_run:
        typer.echo("\n--- README.md (the model card) ---\n" + report.card)
