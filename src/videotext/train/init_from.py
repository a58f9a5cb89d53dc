"""Start a run from another run's weights (pre-training → fine-tuning), and freeze parts.

`train.init_from: RUN_DIR` (CLI `videotext train CONFIG --init-from RUN_DIR`; a run shared on the hub
as `hf-hub:ORG/NAME[@REVISION]`) loads the
weights of RUN_DIR's `checkpoints/<train.init_checkpoint>` into the new method — the
model only: the optimizer, schedule, step counters and RNG start fresh. Nothing is
loaded silently: every tensor of the new model is either *loaded* (same name, same
shape), or *new* (absent from the checkpoint, or there with another shape — then listed
under *skipped* with both shapes); checkpoint tensors the model has no place for are
*skipped* as absent. The report goes to `run_dir/init_report.json` and one printed line.
`train.init_into: NAME` loads them into the submodule NAME instead of the whole model: a trained
run held inside another method (moment_detr's `guide`), usually with `train.freeze: [NAME]`.

`train.freeze: [prefixes]` keeps every parameter whose name starts with one of the
prefixes fixed (requires_grad False, so `param_groups` leaves it out of the optimizer),
e.g. Support-set's frozen Ψ′ or a pre-trained video encoder while the text side adapts.
A prefix that matches no parameter is an error (a typo never freezes nothing).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch

from videotext.config import ConfigError, load_config
from videotext.data.features import FeatureStore
from videotext.errors import VideoTextError
from videotext.hub_runs import CHECKPOINT, is_hub_run, resolve_run
from videotext.io import write_json
from videotext.train.checkpoint import load_meta, read_weights

REPORT = "init_report.json"


def checkpoint_folder(source: str | Path, checkpoint: str = "best", seed: int | None = None) -> Path:
    """The checkpoint folder of a run directory (or a checkpoint folder given directly), or of a run
    shared on the hub (`hf-hub:ORG/NAME[@REVISION]`, its best checkpoint: `videotext.hub_runs`).

    A multi-seed run (`videotext train --seeds`, one `seed_<s>/` per seed) gives the run of
    the same `seed`, so pre-train and fine-tune seeds pair up."""
    if is_hub_run(source):
        if checkpoint != "best":
            raise VideoTextError(f"train.init_from: {source} is a run shared on the hub, which holds its best "
                                 f"checkpoint only; set train.init_checkpoint=best")
        return resolve_run(source).folder / CHECKPOINT
    source = Path(source)
    if (source / "model.safetensors").is_file():
        return source
    if seed is not None and not (source / "checkpoints").is_dir() and (source / f"seed_{seed}").is_dir():
        source = source / f"seed_{seed}"
    folder = source / "checkpoints" / checkpoint
    if not (folder / "model.safetensors").is_file():
        raise VideoTextError(f"train.init_from: {source} has no checkpoint {checkpoint!r} "
                             f"({folder / 'model.safetensors'} not found); give a run directory made by "
                             f"`videotext train`")
    return folder


def load_matching(method: torch.nn.Module, folder: str | Path, into: str = "") -> dict[str, Any]:
    """Copy every tensor of `folder`'s weights whose name and shape match into `method`, or into its
    submodule `into` (checkpoint name `n` goes to `into.n`: a trained run held inside another method).

    Returns {"loaded": [names], "new": [names], "skipped_shape": [{name, checkpoint, model}],
    "skipped_absent": [names in the checkpoint, not in the model]}, names as the model has them.
    """
    prefix = into.rstrip(".") + "." if into else ""
    if prefix and not any(name.startswith(prefix) for name in method.state_dict()):
        tops = sorted({n.split(".")[0] for n in method.state_dict()})
        raise ConfigError(f"train.init_into: {into!r} is no submodule of this method (top-level modules: {tops})")
    tensors = {prefix + name: value for name, value in read_weights(folder).items()}
    state = method.state_dict()
    loaded, shape, new = [], [], []
    for name, current in state.items():
        if name not in tensors:
            new.append(name)
        elif tuple(tensors[name].shape) != tuple(current.shape):
            shape.append({"name": name, "checkpoint": list(tensors[name].shape), "model": list(current.shape)})
            new.append(name)
        else:
            loaded.append(name)
    merged = dict(state)
    merged.update({name: tensors[name].to(state[name].dtype) for name in loaded})
    method.load_state_dict(merged, strict=True)  # every key given: the new ones keep their initial values
    absent = sorted(name[len(prefix):] for name in set(tensors) - set(state))
    missing = [name for name in new if name.startswith(prefix)] if prefix else []
    if missing:  # a run held inside another method is used whole, or not at all
        raise ConfigError(f"train.init_into: {folder} does not fit {into!r}: {len(missing)} of its tensors have no "
                          f"match of the same name and shape there (first: {missing[0]}); give a run of the model "
                          f"{into!r} is configured as")
    return {"loaded": loaded, "new": new, "skipped_shape": shape, "skipped_absent": absent}


def freeze(method: torch.nn.Module, prefixes: Sequence[str]) -> list[str]:
    """Set requires_grad False on parameters named with one of `prefixes`; returns their names."""
    names = [name for name, _ in method.named_parameters()]
    frozen: list[str] = []
    for prefix in prefixes:
        hits = [n for n in names if n == prefix or n.startswith(prefix.rstrip(".") + ".")]
        if not hits:
            tops = sorted({n.split(".")[0] for n in names})
            raise ConfigError(f"train.freeze: {prefix!r} matches no parameter of this method "
                              f"(top-level modules: {tops})")
        frozen.extend(n for n in hits if n not in frozen)
    for name, param in method.named_parameters():
        if name in frozen:
            param.requires_grad_(False)
    return frozen


def apply_init(method: torch.nn.Module, train_config: Any, run_dir: str | Path | None = None,
               rank: int = 0, method_name: str | None = None) -> dict[str, Any] | None:
    """`train.init_from` + `train.freeze` on a freshly built method (the trainer calls this
    right after `build_method`); writes run_dir/init_report.json and prints one line on rank 0."""
    source, prefixes = train_config.init_from, list(train_config.freeze)
    if not source and not prefixes:
        return None
    report: dict[str, Any] = {}
    if source:
        folder = checkpoint_folder(source, train_config.init_checkpoint, train_config.seed)
        shown = source if is_hub_run(source) else str(Path(source).resolve())
        report = {"init_from": shown, "checkpoint": str(folder.resolve()),
                  "source_method": _source_method(folder), "method": method_name,
                  **load_matching(method, folder, train_config.init_into)}
    report["frozen"] = freeze(method, prefixes) if prefixes else []
    report["counts"] = {key: len(report[key]) for key in ("loaded", "new", "skipped_shape", "skipped_absent",
                                                           "frozen") if key in report}
    if rank == 0:
        if run_dir is not None:
            Path(run_dir).mkdir(parents=True, exist_ok=True)
            write_json(Path(run_dir) / REPORT, report)
        print(summary_line(report), flush=True)
    return report


def summary_line(report: dict[str, Any]) -> str:
    counts = report["counts"]
    parts = []
    if "loaded" in counts:
        parts.append(f"init-from {report['init_from']}: loaded {counts['loaded']} tensors, skipped "
                     f"{counts['skipped_shape']} (shape mismatch) + {counts['skipped_absent']} (absent from this "
                     f"model), {counts['new']} newly initialised")
    if counts["frozen"]:
        parts.append(f"frozen {counts['frozen']} parameters")
    return "; ".join(parts) + f" (see {REPORT})"


def _source_method(folder: Path) -> str | None:
    try:
        return load_meta(folder).get("method")
    except VideoTextError:
        return None


def zero_shot_config(model: Any, data_config: str | Path, checkpoint: str = "best") -> Any:
    """The run config of `model` (a `LoadedModel`) with the data section of another config,
    for zero-shot evaluation on that dataset (`videotext eval RUN --data OTHER_CONFIG`).

    The run's experts and input limits are kept (the model was built for them); the other
    dataset's feature store must hold those experts at the same dimensions, else a
    VideoTextError names what differs.
    """
    import copy

    other = load_config(data_config)
    config = copy.deepcopy(model.config)
    data = copy.deepcopy(other.data)
    run = model.config.data
    data.experts, data.max_steps_per_expert = list(run.experts), run.max_steps_per_expert
    data.mixture = []
    if run.experts:
        dims = load_meta(Path(model.run_dir) / "checkpoints" / checkpoint).get("expert_dims") or {}
        folder = data.features or str(Path(data.manifest).parent / "features")
        store = FeatureStore(folder)
        have = {e: int(store.dim(e)) for e in store.experts}
        wrong = {e: (dims.get(e), have.get(e)) for e in run.experts if have.get(e) != dims.get(e)}
        if wrong:
            detail = ", ".join(f"{e}: model {m}-d, data {'missing' if d is None else f'{d}-d'}" for e, (m, d) in wrong.items())
            raise VideoTextError(f"{data_config}: its features ({folder}) do not fit run {model.run_dir}, "
                                 f"whose method uses experts {run.experts} ({detail}); extract those experts "
                                 f"with the same extractors first")
    config.data = data
    return config
