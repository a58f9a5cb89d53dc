"""One config trained once per seed, summarised as mean ± std (`videotext train --seeds`).

    run_dir/seed_S/            the run of seed S (a `Trainer` run: checkpoints, test_metrics.json, …)
    run_dir/seeds_summary.json {"seeds": [...], DIRECTION: {METRIC: {"mean", "std", "n"}}, …}

`videotext compare` and `eval.compare.run_metrics` read the summary back (its name is
`eval.compare.SEEDS_SUMMARY`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from videotext.config import load_config
from videotext.errors import VideoTextError
from videotext.eval.compare import SEEDS_SUMMARY
from videotext.eval.retrieval import aggregate_seeds
from videotext.io import write_json
from videotext.train.trainer import Trainer


def train_seeds(config: str | Path | None, overrides: Sequence[str], seeds: Sequence[int | str], run_dir: str | Path,
                resume: bool = False, progress: bool = True,
                on_result: Optional[Callable[[int, dict[str, Any]], None]] = None) -> dict[str, Any]:
    """Train `config` (a YAML file or a packaged name, with `overrides`) once per seed into
    `run_dir/seed_S` (`train.seed=S`), then write and return the summary of their test metrics:
    `{"seeds": [the seeds as text], direction: aggregate_seeds(...) …}` in `run_dir/seeds_summary.json`.

    `resume` goes to each seed's `Trainer` as it is: a seed with checkpoints continues from its
    last one (a finished seed trains no further and is tested again); without it a seed folder
    that already has checkpoints is an error. `on_result(seed, result)` sees each seed's test
    result as soon as that seed is done.
    """
    if not seeds:
        raise VideoTextError("train --seeds: give at least one seed, e.g. --seeds 0,1,2")
    run_dir = Path(run_dir)
    results = []
    for seed in seeds:
        seeded = load_config(config, list(overrides) + [f"train.seed={int(seed)}"])
        result = Trainer(seeded, run_dir / f"seed_{int(seed)}", resume=resume, progress=progress).fit()
        if on_result is not None:
            on_result(int(seed), result)
        results.append(result)
    directions = [k for k, v in results[0].items() if isinstance(v, dict)]
    summary = {d: aggregate_seeds([r[d] for r in results if d in r]) for d in directions}
    summary = {"seeds": [str(seed) for seed in seeds], **summary}
    write_json(run_dir / SEEDS_SUMMARY, summary)
    return summary
