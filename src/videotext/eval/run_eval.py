"""Evaluate a trained run on one split (`videotext eval RUN`): the method's protocols, both directions.

    run_dir/eval_{split}_{checkpoint}.json   the metrics (`evaluate_split`)
    run_dir/report/index.html                the run report of that split (optional)

`rescore` adds inference-time re-scored figures (`videotext.eval.rescore`: "dsl", "qbnorm")
under "rescored" in the same file; the plain figures are unchanged. QB-Norm's querybank is
every caption of the run's training split (`data.train_split`), encoded by the same model.

The model is a loaded run (`videotext.inference.load_model`), used duck-typed: its `method`,
`config`, `device`, `run_dir` and `autocast()`. Zero-shot evaluation on another dataset is the
same with `model.config` given that dataset's data section first (`train.init_from.zero_shot_config`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

from videotext.data.run_data import RunData
from videotext.errors import VideoTextError
from videotext.eval.evaluate import caption_texts
from videotext.eval.protocols import evaluate_split
from videotext.eval.rescore import parse_rescore
from videotext.eval.run_report import write_run_report
from videotext.io import write_json


def querybank_captions(data: RunData, train_split: str) -> list[str]:
    """QB-Norm's querybank: every caption of the run's training split."""
    if train_split not in data.dataset.splits:
        raise VideoTextError(f"--rescore qbnorm: the querybank is the training captions, and the data set has no "
                             f"{train_split!r} split (have {sorted(data.dataset.splits)})")
    return caption_texts(data.split(train_split))


def evaluate_run(model: Any, split: str = "test", checkpoint: str = "best", report: bool = True,
                 rescore: Sequence[str] = (), out: str | Path | None = None) -> tuple[dict[str, Any], Optional[Path]]:
    """Evaluate `model` on `split` of the data of `model.config` at the model's inference precision.

    Writes `eval_{split}_{checkpoint}.json` into `out` (default `model.run_dir`; `checkpoint` names
    the file: the weights are those already loaded) and, with `report`, the run report of the split.
    Returns the metrics and the report page (None without `report`). A split the dataset lacks is a
    VideoTextError. `rescore` ("dsl", "qbnorm", or comma-separated) adds the re-scored figures under
    "rescored".
    """
    run_dir = Path(out if out is not None else model.run_dir)
    rescore = parse_rescore(rescore)
    data = RunData(model.config)
    if split not in data.dataset.splits:
        raise VideoTextError(f"{model.config.data.manifest}: no split {split!r} (have {sorted(data.dataset.splits)})")
    dataset = data.split(split)
    querybank = querybank_captions(data, model.config.data.train_split) if "qbnorm" in rescore else None
    with model.autocast():
        result = evaluate_split(model.method, dataset, data.read_features, device=model.device,
                                rescore=rescore, querybank=querybank)
    write_json(run_dir / f"eval_{split}_{checkpoint}.json", result)
    if not report:
        return result, None

    with model.autocast():
        page = write_run_report(run_dir, model.method, dataset, data.read_features, split=split,
                                metrics=result, device=model.device)
    return result, page
