"""Run a benchmark: each (row, seed) trained, selected on validation, tested once, costed.

Layout: ``OUT/<row>/seed_<n>/`` is an ordinary `videotext train` run directory (config,
checkpoints, metrics.jsonl, test_metrics.json, ``benchmark.lock`` while a process works on
it); ``RESULTS/<row>/seed_<n>.json`` is the run's record, written last (atomically): its test
metrics, those of its extra evaluations (a re-scored one under "rescored" too: its method,
settings, labels and the information it used), its validation curve, parameters, training
CPU-seconds and inference time. RESULTS defaults to OUT; kept apart, the records (a few KB
each) can be committed and the page regenerated without the checkpoints. A run with a record
of its row's epoch budget is finished and reused; one with a checkpoint resumes from it (to a
larger budget too, where the lr schedule does not depend on the budget); a run another live process is
working on (the lock names its pid) is left to it, so two processes can share the list.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from videotext.benchmark.definition import BenchmarkDef, DataDef, RowDef
from videotext.config import ConfigError, load_config, parse_value
from videotext.digests import read_verified
from videotext.errors import DataFormatError, VideoTextError
from videotext.data.experts import extract_features
from videotext.data.loaders import epoch_length
from videotext.data.schema import VideoTextDataset
from videotext.data.synthetic import synthesize
from videotext.data.synthetic.sharing import batch_event_sharing
from videotext.encode import encode_texts, encode_videos
from videotext.eval.evaluate import Encoded, caption_texts, metric_directions, querybank_similarity, score
from videotext.eval.protocols import evaluate_split
from videotext.eval.rescore import rescore as rescore_matrix
from videotext.eval.relevance import dataset_caption_relevance
from videotext.io import append_json_line, process_alive, write_json
from videotext.train.schedules import depends_on_budget
from videotext.train.trainer import Trainer, metric_value, read_metrics_log

log = logging.getLogger(__name__)

LOCK = "benchmark.lock"


def run_dir(out: Path, row: RowDef, seed: int) -> Path:
    return Path(out) / row.name / f"seed_{seed}"


def record_path(results: Path, row: RowDef, seed: int) -> Path:
    """Where the finished run's record lives: RESULTS/<row>/seed_<n>.json."""
    return Path(results) / row.name / f"seed_{seed}.json"


def plan(bench: BenchmarkDef, rows: list[str] | None = None, seeds: list[int] | None = None) -> list[tuple[RowDef, int]]:
    """The (row, seed) runs in the order they are worth having: phase by phase, and inside a
    phase every row's first seed before any row's second."""
    chosen = [bench.row(name) for name in rows] if rows else list(bench.rows)
    seed_list = seeds if seeds is not None else bench.seeds
    index = {row.name: i for i, row in enumerate(bench.rows)}
    runs = [(row, seed) for row in chosen for seed in seed_list]
    return sorted(runs, key=lambda rs: (rs[0].phase, seed_list.index(rs[1]), index[rs[0].name]))


# --- locks: one process per run or data folder -------------------------------------------------
@contextlib.contextmanager
def claim(lock: Path) -> Iterator[bool]:
    """Hold `lock` (a file naming this pid) while the block runs; yields False, holding
    nothing, when another live process holds it. A lock left by a dead process is taken over."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                holder = int(lock.read_text().strip() or 0)
            except (OSError, ValueError):
                holder = 0
            if holder and holder != os.getpid() and process_alive(holder):
                yield False
                return
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as handle:
            handle.write(str(os.getpid()))
        try:
            yield True
        finally:
            lock.unlink(missing_ok=True)
        return
    yield False


# --- data ------------------------------------------------------------------------------------
class DataBusy(Exception):
    """Another process is making this data set or one of its experts' features."""


def prepare_data(data: DataDef, experts: list[str], data_root: Path, progress: bool) -> tuple[Path, Path]:
    """The row's synthetic set and its features (made if missing; both steps resume), under
    per-folder and per-expert locks; raises DataBusy when another process holds one.
    An existing set made with other settings is an error, never overwritten."""
    folder = Path(data_root) / data.folder_name()
    locks = [folder.with_name(folder.name + ".lock")] + [folder.with_name(f"{folder.name}.{e}.lock") for e in sorted(experts)]
    with contextlib.ExitStack() as stack:
        if not all(stack.enter_context(claim(lock)) for lock in locks):
            raise DataBusy(str(folder))
        return _prepare(folder, data, experts, progress)


def _prepare(folder: Path, data: DataDef, experts: list[str], progress: bool) -> tuple[Path, Path]:
    manifest = folder / "manifest.json"
    if manifest.exists():
        meta = json.loads(manifest.read_text(encoding="utf-8")).get("meta", {})
        expected = {"num_videos": data.videos, "seed": data.seed,
                    "split_fractions": [float(f) for f in data.splits], "shared_events": float(data.shared_events)}
        found = {"num_videos": meta.get("num_videos"), "seed": meta.get("seed"),
                 "split_fractions": meta.get("split_fractions"), "shared_events": float(meta.get("shared_events", 0.0))}
        if found != expected:
            raise ConfigError(f"{manifest}: made with {found}, the benchmark needs {expected}; "
                              f"move it away or pass another --data-root")
    else:
        synthesize(folder, num_videos=data.videos, seed=data.seed, workers=2, progress=progress,
                   split_fractions=data.splits, shared_events=data.shared_events)
    if experts:
        extract_features(manifest, experts, folder / "features", progress=progress, **data.extraction)
    return manifest, folder / "features"


def data_summary(dataset: VideoTextDataset, train_split: str, batch_sizes: list[int]) -> dict[str, Any]:
    """Split sizes and how often a training video shares an event with another of its batch."""
    train = list(dataset.split(train_split))
    return {"splits": {name: len(ids) for name, ids in dataset.splits.items()},
            "batch_event_sharing": {str(b): round(batch_event_sharing(train, b), 1) for b in batch_sizes}}


# --- measuring one trained method ---------------------------------------------------------------
def clear_caption_caches(method: torch.nn.Module) -> None:
    """Empty the per-caption caches of frozen text encoders, so a timed query pays its text model."""
    for module in method.modules():
        for name, value in vars(module).items():
            if name.endswith("_cache") and isinstance(value, dict):
                value.clear()


@contextlib.contextmanager
def model_settings(method: Any, overrides: list[str]) -> Iterator[None]:
    """Change `model.KEY=VALUE` settings of a built method for the block (e.g. ToCo's rerank_top_k)."""
    config, saved = method.config, {}
    for item in overrides:
        key, _, raw = item.partition("=")
        name = key.removeprefix("model.")
        if not hasattr(config, name):
            raise ConfigError(f"evaluation setting {item!r}: the {method.name} model has no {name!r}")
        saved[name] = getattr(config, name)
        setattr(config, name, parse_value(raw))
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(config, name, value)


def time_inference(method: Any, dataset: VideoTextDataset, read_features: Any, device: Any,
                   rescore: str = "", querybank: list[str] | None = None) -> dict[str, float]:
    """CPU milliseconds per text query (encode the caption, score it against every video of
    `dataset`) and per video (encode it from its stored features or frames), this process.

    With `rescore` (a `videotext.eval.rescore` name), a query also pays its share of re-scoring
    the whole test matrix ("rescore_cpu_ms", included in "query_cpu_ms"); QB-Norm's querybank
    (`querybank`: its captions) is encoded and scored once per gallery, untimed, as the videos' are not."""
    was_training = method.training
    method.eval()
    try:
        clear_caption_caches(method)
        video_ids = [v.id for v in dataset]
        _, refs = dataset_caption_relevance(dataset, video_ids)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        text = encode_texts(method, [r.text for r in refs], device=device)
        cpu1, wall1 = time.process_time(), time.perf_counter()
        video = encode_videos(method, dataset, read_features, device=device)
        cpu2, wall2 = time.process_time(), time.perf_counter()
        encoded = Encoded(text, video, refs, video_ids)
        sims = score(method, encoded)
        cpu3, wall3 = time.process_time(), time.perf_counter()
        rescore_cpu = rescore_wall = 0.0
        if rescore:
            bank_sims = querybank_similarity(method, encoded, querybank or [], device=device) if rescore == "qbnorm" else None
            cpu4, wall4 = time.process_time(), time.perf_counter()
            rescore_matrix(rescore, sims, bank_sims)
            rescore_cpu, rescore_wall = time.process_time() - cpu4, time.perf_counter() - wall4
    finally:
        method.train(was_training)
    timing = {"query_cpu_ms": 1000 * ((cpu1 - cpu0) + (cpu3 - cpu2) + rescore_cpu) / len(refs),
              "video_cpu_ms": 1000 * (cpu2 - cpu1) / len(video_ids),
              "query_wall_ms": 1000 * ((wall1 - wall0) + (wall3 - wall2) + rescore_wall) / len(refs),
              "video_wall_ms": 1000 * (wall2 - wall1) / len(video_ids),
              "queries": len(refs), "videos": len(video_ids)}
    if rescore:
        timing["rescore_cpu_ms"] = 1000 * rescore_cpu / len(refs)
    return timing


def validation_curve(run: Path, metric: str = "t2v.R1") -> list[list[float]]:
    """[epoch, val `metric`] of every validation of the run, in order (a dotted key, as
    `train.select_metric`)."""
    curve = []
    for entry in read_metrics_log(run):
        if entry.get("kind") != "val":
            continue
        try:
            curve.append([float(entry["epoch"]), metric_value(entry, metric)])
        except VideoTextError:
            continue
    return curve


TRAIN_LOG_SKIP = ("step", "epoch", "lr", "train_s", "train_cpu_s")


def train_log_summary(run: Path, steps_per_epoch: int) -> dict[str, dict[str, float]]:
    """Median of every numeric training-log value (the loss parts, a method's diagnostics such as
    Support-set's gradient norms) over the first epoch, the whole run and the last epoch, with the
    number of logged steps: {"first_epoch" | "all" | "last_epoch": {key: median}, "steps": {...}}."""
    lines = [e for e in read_metrics_log(run) if e.get("kind") == "train"]
    if not lines:
        return {}
    last_step = max(int(e["step"]) for e in lines)
    spans = {"first_epoch": lambda step: step <= steps_per_epoch,
             "all": lambda step: True,
             "last_epoch": lambda step: step > last_step - steps_per_epoch}
    out: dict[str, dict[str, float]] = {"steps": {}}
    for span, inside in spans.items():
        chosen = [e for e in lines if inside(int(e["step"]))]
        keys = sorted({k for e in chosen for k, v in e.items() if k not in TRAIN_LOG_SKIP and k != "kind"
                       and isinstance(v, (int, float)) and not isinstance(v, bool)})
        out[span] = {k: float(np.median([e[k] for e in chosen if k in e])) for k in keys}
        out["steps"][span] = len(chosen)
    return out


def rule_overrides(bench: BenchmarkDef, row_config: Any) -> list[str]:
    """The training-length rule as early stopping (`bench.training`), for a row whose lr schedule
    does not depend on its budget and whose config sets no patience of its own; none otherwise
    (a cosine or linear decay trains to its cap; COOT keeps §4's patience)."""
    if depends_on_budget(row_config.schedule) or row_config.train.early_stop_patience > 0:
        return []
    rule = bench.training
    validations = math.ceil(rule.patience_epochs / max(row_config.train.eval_every, 1))
    return [f"train.early_stop_patience={validations}", f"train.early_stop_min_delta={rule.min_delta}",
            f"train.early_stop_metric={rule.metric}"]


def _test_metrics(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metric_directions(result).items()}


RECORD_WAY_BACK = ("delete it and run `videotext benchmark run` again: that run is tested again from its "
                   "checkpoints, or trained again where they are gone")


def read_record(path: Path) -> dict[str, Any]:
    """One run's record (checked against its digest, `videotext.digests`); a damaged one is a
    DataFormatError naming it and the way back."""
    try:
        record = json.loads(read_verified(path, RECORD_WAY_BACK).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        problem = f"damaged record, not JSON ({' '.join(str(exc).split())[:100]})"
    else:
        if isinstance(record, dict) and isinstance(record.get("results"), dict):
            return record
        problem = "damaged record, not a run's record (no results)"
    raise DataFormatError(path, None, f"{problem}; {RECORD_WAY_BACK}")


def finished_record(record_file: Path, budget: int) -> dict[str, Any] | None:
    """The run's record if it finished with `budget` epochs. A record of another budget is not
    finished: the run continues from its last checkpoint to the new budget (early-stopped runs
    stay stopped) where its schedule allows it (`depends_on_budget`)."""
    if not record_file.exists():
        return None
    record = read_record(record_file)
    return record if record.get("epochs") == budget else None


# --- one run, then all -----------------------------------------------------------------------------
def run_one(bench: BenchmarkDef, row: RowDef, seed: int, out: Path, data_root: Path, progress: bool = False,
            epochs: int | None = None, results: Path | None = None) -> dict[str, Any]:
    """Train, test and cost one (row, seed); returns its record (read back if already finished)."""
    folder = run_dir(out, row, seed)
    budget = epochs or row.epochs
    record_file = record_path(out if results is None else results, row, seed)
    finished = finished_record(record_file, budget)
    if finished is not None:
        return finished
    row_config = load_config(row.config, list(row.set))
    if record_file.exists() and (folder / "checkpoints" / "last").exists() and depends_on_budget(row_config.schedule):
        raise ConfigError(
            f"{record_file}: finished with {read_record(record_file)['epochs']} epochs, "
            f"the row now asks for {budget}, and its schedule.decay={row_config.schedule.decay!r} depends on the "
            f"budget: delete {folder} and the record to train it anew")
    data = bench.row_data(row)
    experts = list(row_config.data.experts)
    manifest, features = prepare_data(data, experts, data_root, progress)
    overrides = [*rule_overrides(bench, row_config), *row.set, *bench.set, f"data.manifest={manifest.resolve()}",
                 f"train.seed={seed}", f"train.epochs={budget}", f"train.threads={bench.row_threads(row)}", f"out_dir={folder}"]
    if experts:
        overrides.append(f"data.features={features.resolve()}")
    config = load_config(row.config, overrides)
    started = time.time()
    trainer = Trainer(config, folder, resume=(folder / "checkpoints" / "last").exists(), progress=progress)
    test = trainer.fit()
    if "split" not in test:
        raise ConfigError(f"{row.config}: the data set has no {config.data.test_split!r} split to test on")
    test_set = trainer.data.split(config.data.test_split)
    method, features_reader, device = trainer.method, trainer.data.read_features, trainer.device
    results = {row.name: _test_metrics(test)}
    inference = {row.name: time_inference(method, test_set, features_reader, device)}
    rescored: dict[str, Any] = {}
    querybank = (caption_texts(trainer.data.split(config.data.train_split))
                 if any(e.rescore == "qbnorm" for e in row.evals) else None)
    for extra in row.evals:
        with model_settings(method, extra.set):
            if not extra.rescore:
                results[extra.name] = _test_metrics(evaluate_split(method, test_set, features_reader, device=device))
                inference[extra.name] = time_inference(method, test_set, features_reader, device)
                continue
            evaluated = evaluate_split(method, test_set, features_reader, device=device, rescore=[extra.rescore],
                                       querybank=querybank)["rescored"][extra.rescore]
            results[extra.name] = {d: evaluated[d] for d in evaluated["labels"]}  # the re-scored directions
            rescored[extra.name] = {"rescore": extra.rescore, **{k: evaluated[k] for k in ("labels", "uses", "settings")}}
            inference[extra.name] = time_inference(method, test_set, features_reader, device, extra.rescore, querybank)
    params = list(method.parameters())
    steps_per_epoch = -(-epoch_length(trainer.batches, 0) // config.train.accumulate)  # optimizer steps
    best_epoch = next((float(e["epoch"]) for e in read_metrics_log(folder)
                       if e.get("kind") == "val" and e.get("step") == test.get("best_step")), None)
    train = config.train
    record = {
        "benchmark": bench.name, "row": row.name, "seed": seed, "config": row.config, "set": list(row.set),
        "epochs": budget, "epochs_defined": row.epochs, "threads": bench.row_threads(row),
        "select_metric": config.train.select_metric, "best_step": test.get("best_step"), "best_epoch": best_epoch,
        "data": {"folder": data.folder_name(), "shared_events": data.shared_events,
                 **data_summary(trainer.data.dataset, config.data.train_split, bench.batch_sharing_sizes)},
        "results": results, "inference": inference, **({"rescored": rescored} if rescored else {}),
        "parameters": sum(p.numel() for p in params),
        "trainable_parameters": sum(p.numel() for p in params if p.requires_grad),
        "train_cpu_s": float(trainer.state.get("train_cpu_s", 0.0)), "train_s": float(trainer.state.get("train_s", 0.0)),
        "text_cache_cpu_s": float(trainer.state.get("text_cache_cpu_s", 0.0)),
        "val_curve": validation_curve(folder), "val_select_curve": validation_curve(folder, train.select_metric),
        "steps_per_epoch": steps_per_epoch,
        "early_stop": {"patience": train.early_stop_patience, "min_delta": train.early_stop_min_delta,
                       "metric": train.early_stop_metric or train.select_metric},
        "train_log": train_log_summary(folder, steps_per_epoch), "last_session_wall_s": time.time() - started,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json(record_file, record, way_back=RECORD_WAY_BACK)
    return record


def run_benchmark(bench: BenchmarkDef, out: Path, data_root: Path, rows: list[str] | None = None,
                  seeds: list[int] | None = None, epochs: int | None = None, progress: bool = False,
                  after_each: Callable[[], None] | None = None, wait_s: float = 30.0,
                  results: Path | None = None) -> dict[str, list[str]]:
    """Run every planned (row, seed) without a record in `results` (default `out`), in `plan`
    order; runs held by another process are retried after `wait_s` until none is left. A run
    that fails is recorded in out/failures.jsonl and the others go on. Returns
    {"finished", "failed"} run names."""
    results = out if results is None else results
    done: list[str] = []
    failed: list[str] = []
    pending = plan(bench, rows, seeds)
    while pending:
        held = []
        for row, seed in pending:
            folder = run_dir(out, row, seed)
            name = f"{row.name}/seed_{seed}"
            if finished_record(record_path(results, row, seed), epochs or row.epochs) is not None:
                done.append(name)
                continue
            with claim(folder / LOCK) as mine:
                if not mine:
                    held.append((row, seed))
                    continue
                log.info("benchmark %s: %s", bench.name, name)
                try:
                    run_one(bench, row, seed, out, data_root, progress, epochs, results)
                except DataBusy:
                    held.append((row, seed))
                    continue
                except (ConfigError, FileNotFoundError) as exc:
                    raise ConfigError(f"{name}: {exc}") from None
                except Exception as exc:  # noqa: BLE001 - a broken run is recorded, the others go on
                    _record_failure(out, name, exc)
                    failed.append(name)
                    continue
            done.append(name)
            if after_each:
                after_each()
        pending = held
        if pending:
            time.sleep(wait_s)
    return {"finished": done, "failed": failed}


def _record_failure(out: Path, name: str, exc: Exception) -> None:
    log.error("benchmark run %s failed: %s", name, exc)
    out.mkdir(parents=True, exist_ok=True)
    append_json_line(out / "failures.jsonl", {"run": name, "error": f"{type(exc).__name__}: {exc}",
                                               "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
