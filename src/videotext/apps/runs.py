"""A run's life from the command line and from Python: train it (once, or once per seed), evaluate a
split of it (or of another dataset, zero-shot), localize its steps. One function each, so
`videotext train`, `eval` and `localize` only parse and print.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from videotext.config import load_config
from videotext.data.run_data import RunData
from videotext.errors import VideoTextError
from videotext.hub_runs import is_hub_run
from videotext.eval.localization import localize
from videotext.eval.run_eval import evaluate_run
from videotext.eval.run_report import write_run_report
from videotext.io import write_json
from videotext.run_model import load_run
from videotext.train.init_from import zero_shot_config
from videotext.train.seeds import train_seeds
from videotext.train.trainer import Trainer


@dataclasses.dataclass
class TrainOutcome:
    """What `train_run` did: one run's test result and report page, or the seeds' summary."""

    run_dir: Path
    result: dict[str, Any] | None = None  # one run: its test metrics
    report: Path | None = None  # one run: its report page
    summary: dict[str, Any] | None = None  # several seeds: mean ± std per direction and metric


def train_run(config: str, overrides: Sequence[str] = (), out: str | Path | None = None,
              seeds: Sequence[int | str] = (), resume: bool = False, progress: bool = True, report: bool = True,
              on_seed: Optional[Callable[[int, dict[str, Any]], None]] = None,
              init_from: str | Path | None = None) -> TrainOutcome:
    """Train `config` (a YAML file or a packaged name, with `overrides`) into `out` (default: the
    config's `out_dir`), selecting on validation and testing once at the end; with `seeds`, once per
    seed into `out/seed_S` and summarised as mean ± std (`on_seed` sees each seed's result). One run
    writes its report page after the test evaluation unless `report` is False. `init_from` (a run
    folder, made absolute, or `hf-hub:ORG/NAME`, as given) is `train.init_from`."""
    if init_from is not None:
        start = init_from if is_hub_run(init_from) else Path(init_from).resolve()
        overrides = [*overrides, f"train.init_from={start}"]
    cfg = load_config(config, list(overrides))
    run_dir = Path(out or cfg.out_dir)
    if seeds:
        return TrainOutcome(run_dir, summary=train_seeds(config, list(overrides), list(seeds), run_dir, resume=resume,
                                                         progress=progress, on_result=on_seed))
    trainer = Trainer(cfg, run_dir, resume=resume, progress=progress)
    result = trainer.fit()
    page = None
    if report and "split" in result:
        page = write_run_report(run_dir, trainer.method, trainer.data.split(result["split"]), trainer.data.read_features,
                                split=result["split"], metrics=result, device=trainer.device)
    return TrainOutcome(run_dir, result=result, report=page)


def evaluate(run_dir: str | Path, split: str = "test", checkpoint: str = "best", report: bool = True,
             data_config: str | None = None, precision: str | None = None, threads: int | None = None,
             rescore: Sequence[str] = (), out: str | Path | None = None,
             decode: str | None = None) -> tuple[dict[str, Any], Optional[Path]]:
    """Evaluate a trained run on one split (`eval.run_eval.evaluate_run`): its own data, or zero-shot the
    data section of `data_config` (another dataset; no report then). Returns the metrics and the report.
    `decode` reads a moment run's spans another way than it was trained with (`model.decode`: spans |
    saliency); its metrics go to eval_SPLIT_CHECKPOINT_DECODE.json, beside the run's own.

    The metrics go into `out`, by default the run folder; a run shared on the hub (`hf-hub:ORG/NAME`,
    read from the hub cache, which is the hub client's) writes into `runs/ORG--NAME` instead, and carries
    no data of its own: it is evaluated on the data of `data_config`."""
    model = load_run(run_dir, checkpoint, precision=precision, threads=threads)
    if model.hub is not None and data_config is None:
        raise VideoTextError(f"{run_dir}: a run shared on the hub carries no data of its own; evaluate it on "
                             "yours with --data CONFIG (a config whose data section names your manifest)")
    if data_config is not None:
        model.config, report = zero_shot_config(model, data_config, checkpoint), False
        checkpoint = f"{checkpoint}_on_{Path(data_config).stem}"
    if decode is not None:
        if getattr(model.method, "task", "retrieval") != "moments" or not hasattr(model.method.config, "decode"):
            raise VideoTextError(f"{run_dir}: --decode reads a moment run's spans; this run's method "
                                 f"({model.config.method}) ranks videos")
        model.method.config = dataclasses.replace(model.method.config, decode=decode)  # read when predicting
        checkpoint = f"{checkpoint}_{decode}"
    return evaluate_run(model, split, checkpoint, report=report, rescore=rescore, out=out or output_folder(model))


def output_folder(model: Any) -> Path:
    """Where a command writes what it makes of a loaded run: the run folder; for a run shared on the hub
    (read from the hub client's cache, never written), `runs/ORG--NAME`."""
    return Path("runs") / model.hub.repo_id.replace("/", "--") if model.hub is not None else Path(model.run_dir)


def localize_run(run_dir: str | Path, split: str = "test", checkpoint: str = "best", decoding: str = "ordered",
                 normalize: str = "log_softmax", window: float = 1.0, manifest: str | Path | None = None,
                 features: str | Path | None = None) -> dict[str, Any]:
    """Action-step localization of a run on `split` (CrossTask's protocol, ToCo §5.2), on its own data or
    on `manifest` (zero-shot, with its feature store `features`); the result is written beside the run
    as `localization_….json` and returned."""
    model = load_run(run_dir, checkpoint)
    config = model.config
    if manifest is not None:
        data_config = dataclasses.replace(config.data, manifest=str(manifest), features=str(features or ""))
        config = dataclasses.replace(config, data=data_config)
    data = RunData(config)
    if split not in data.dataset.splits:
        raise VideoTextError(f"{config.data.manifest}: no split {split!r} (have {sorted(data.dataset.splits)})")
    result, _ = localize(model.method, data.split(split), data.store, model.config.data.experts,
                         model.config.data.max_steps_per_expert, window=window, decoding=decoding,
                         normalize=normalize, device=model.device)
    name = f"localization_{split}_{checkpoint}" if manifest is None else \
        f"localization_{Path(manifest).stem}_{split}_{checkpoint}"
    write_json(output_folder(model) / f"{name}.json", result)
    return result
