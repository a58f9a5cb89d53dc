"""Run configuration: dataclasses, YAML loading, `--set a.b=c` overrides.

A run config names a method (`method: dual`) and holds that method's own config
dataclass under `model:`; everything else (data, optimiser, schedule, training loop)
is shared by every method. Unknown keys are errors that name the key and the file, so a
typo never silently falls back to a default.

The paper presets ship inside the package (`videotext/configs/<method>/<dataset>.yaml`)
and are addressed by name, `mmt/msrvtt_1ka`, as open_clip and HF address theirs; a file
path given by the user always wins over a packaged name.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from videotext import digests
from videotext.errors import VideoTextError
from videotext.io import atomic_open


class ConfigError(VideoTextError, ValueError):
    """A config file, key or value is wrong."""


PACKAGED = Path(__file__).resolve().parent / "configs"  # the presets shipped in the wheel


def packaged_configs() -> dict[str, str]:
    """Packaged config name (`method/dataset`) -> its one-line description (the file's
    first comment line), sorted by name."""
    out = {}
    for path in sorted(PACKAGED.glob("*/*.yaml")):
        lines = path.read_text(encoding="utf-8").splitlines()
        comment = next((line.strip() for line in lines if line.strip().startswith("#")), "#")
        out[path.relative_to(PACKAGED).with_suffix("").as_posix()] = comment.lstrip("#").strip()
    return out


def find_config(name_or_path: str | Path) -> Path:
    """The config file meant by `name_or_path`: an existing file as given, else the packaged
    config of that name (`mmt/msrvtt_1ka`, with or without `.yaml`; a leading `configs/`,
    the repository folder they lived in before, is accepted too)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    name = path.as_posix()
    name = name[len("configs/"):] if name.startswith("configs/") else name
    packaged = PACKAGED / (name if name.endswith(".yaml") else name + ".yaml")
    if not path.is_absolute() and packaged.resolve().is_relative_to(PACKAGED) and packaged.is_file():
        return packaged
    raise ConfigError(f"{name_or_path}: config file not found, and no packaged config has that name "
                      "(`videotext configs` lists them)")


@dataclass
class NarrationConfig:
    """How timed narration becomes training text when `data.text: narration` (videotext.data.narration)."""

    concat: int = 1  # consecutive narration lines joined into one clip (Frozen §4.4)
    remove_stop_words: bool = False  # MMT Table 1: helps zero-shot, hurts fine-tuning
    window_words: int = 0  # > 0: a random window of this many words per step (MMT §4.2: 100)
    window_seconds: float = 100.0  # seconds of video closest in time to the window (MMT §4.2: 100)


@dataclass
class MixtureSource:
    """One dataset of a training mixture (`data.mixture`, videotext.data.mixtures)."""

    manifest: str = ""  # relative to the config file
    features: str = ""  # "" = <manifest folder>/features
    split: str = "train"
    weight: float = 1.0  # share of the epoch's batches in `weighted` mode
    batch_size: int = 0  # 0 = train.batch_size
    text: str = "captions"  # captions | paragraph | narration (with data.narration)


@dataclass
class DataConfig:
    """Where the videos, text and features are, and which splits to use."""

    manifest: str = ""  # a videotext manifest (see videotext.data.schema); relative to the config file
    features: str = ""  # a FeatureStore folder; "" = <manifest folder>/features
    experts: list[str] = field(default_factory=lambda: ["appearance", "motion", "audio"])
    train_split: str = "train"
    val_split: str = "val"  # model selection happens here, never on test
    test_split: str = "test"
    max_steps_per_expert: int = 30  # features kept per expert (MMT §4.2: 30)
    text: str = "captions"  # captions | paragraph: segment sentences joined per video (ActivityNet paragraphs) | narration: timed speech clips (HowTo100M)
    narration: NarrationConfig = field(default_factory=NarrationConfig)
    mixture: list[MixtureSource] = field(default_factory=list)  # extra training datasets (besides data.manifest's train split)
    mixture_mode: str = "alternate"  # alternate: round-robin batches | weighted: batches drawn by `weight`
    mixture_main_weight: float = 1.0  # weight of data.manifest's own train split in `weighted` mode
    num_workers: int = 0  # loader worker processes (with data.shards: readers per rank; 0 = read in the trainer)
    feature_cache_mb: float = 2048.0  # features kept in memory after the first read (per process); 0 = off
    # Training batches streamed from WebDataset shards of expert features (`videotext dataset shard
    # --content features`; videotext.data.streaming): a brace pattern of paths or URLs, e.g.
    # https://host/data/shard-{000000..000099}.tar. Validation and test still read data.manifest.
    shards: str = ""
    samples_per_epoch: int = 0  # samples per epoch from the shards (0 = the shard index's train count)
    shuffle_buffer: int = 1000  # samples each reader mixes across its shards
    shard_retries: int = 3  # reads of a failing shard before it is skipped (backoff 1, 2, 4 … s)
    shard_timeout: float = 60.0  # seconds a shard read may stall before it counts as failed


@dataclass
class OptimConfig:
    name: str = "adamw"  # adamw | adam | radam
    lr: float = 1e-3
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    # lr multipliers by parameter-name prefix, e.g. {text_encoder: 0.1}: a pre-trained text
    # encoder fine-tuned next to layers trained from scratch (CLIP4Clip's coef_lr); the
    # longest matching prefix wins, other parameters use `lr`
    lr_scale: dict[str, float] = field(default_factory=dict)


@dataclass
class ScheduleConfig:
    """Learning-rate schedule: linear warm-up, then a decay rule."""

    warmup_steps: int = 0
    decay: str = "constant"  # constant | linear | cosine | step | exponential | plateau
    step_size: int = 1000  # steps between multiplications for `step`
    gamma: float = 0.95  # factor for `step` (per step_size) and `exponential` (per step)
    min_lr_ratio: float = 0.0  # lr floor for linear / cosine / plateau, as a fraction of lr
    plateau_patience: int = 2  # evaluations without improvement before reducing (COOT §4)
    plateau_factor: float = 0.1
    plateau_cooldown: int = 0


@dataclass
class TrainConfig:
    epochs: int = 10
    batch_size: int = 64
    accumulate: int = 1  # gradient accumulation steps
    # rows per tower pass of a contrastive step (Gradient Cache, Gao et al. 2021 §3): the loss sees the
    # whole batch, memory holds one chunk's activations; 0 = the whole batch at once (videotext.train.grad_cache)
    chunk: int = 0
    grad_clip: float = 0.0  # max global grad norm; 0 = off
    amp: str = "auto"  # auto | off | bf16 | fp16; auto = bf16 on CUDA devices that support it, off on CPU
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    threads: int = 0  # CPU threads for torch; 0 = torch's default (on a shared CPU, 1 avoids OpenMP contention)
    seed: int = 0
    eval_every: int = 1  # epochs between validation evaluations
    select_metric: str = "t2v.geometric_mean"  # validation metric that picks the best checkpoint
    log_every: int = 10  # steps between log lines in metrics.jsonl
    deterministic: bool = True
    checkpoint_every: int = 0  # steps between mid-epoch checkpoints; 0 = only at epoch ends
    early_stop_patience: int = 0  # stop after this many validations without improvement; 0 = never (COOT §4: 15)
    early_stop_min_delta: float = 0.0  # an improvement must beat the reference by more than this (videotext.train.stopping)
    early_stop_metric: str = ""  # validation metric early stopping reads; "" = select_metric
    group_batches: bool = False  # batch videos sharing meta["group"] together (hard negatives, e.g. the synthetic order twins)
    # torchrun / DDP (videotext.distributed); ignored in a single process
    global_negatives: bool = True  # losses see every rank's embeddings (open_clip gather_with_grad); false = local only
    find_unused_parameters: bool = True  # DDP option: needed when some trainable weights get no gradient in a step
    dist_timeout_minutes: float = 60.0  # collective timeout (rank 0 validates while the others wait)
    # pre-training → fine-tuning (videotext.train.init_from)
    init_from: str = ""  # a run directory whose weights start this run (model only; fresh optimizer and schedule)
    init_checkpoint: str = "best"  # which checkpoint of init_from: best | last
    init_into: str = ""  # a submodule (e.g. moment_detr's `guide`) that takes init_from's weights; "" = the whole model
    freeze: list[str] = field(default_factory=list)  # parameter-name prefixes kept fixed (e.g. Support-set's frozen Ψ′)


@dataclass
class InferenceConfig:
    """Encoding outside training: `eval`, `index build`, `search`, `serve` (videotext.runtime)."""

    precision: str = "auto"  # auto | fp32 | bf16; auto = bf16 where the CPU (AVX512-BF16/AMX) or GPU runs it natively
    threads: int = 0  # torch CPU threads; 0 = the physical cores
    # `index build` extracts a video longer than this many seconds chunk by chunk (bounded memory,
    # a killed build resumes at the first unfinished chunk); null: whole videos at once
    chunk_seconds: float | None = 300.0


@dataclass
class RunConfig:
    method: str = "dual"
    model: dict[str, Any] = field(default_factory=dict)  # the method's own config, see videotext.models
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    inference: InferenceConfig = field(default_factory=InferenceConfig)
    out_dir: str = "runs/default"
    name: str = ""

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)


# --- generic dataclass <-> dict ---------------------------------------------------------
def to_plain(obj: Any) -> Any:
    """Dataclasses, tuples and paths → plain YAML-able values."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def from_dict(cls: type, data: Any, where: str = "config") -> Any:
    """Build dataclass `cls` from nested dicts, checking every key and type."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(names)}")
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _coerce(hints[name], value, f"{where}.{name}")
    return cls(**kwargs)


def _coerce(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return from_dict(hint, value, where)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{where}: bad value {value!r}")
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise ConfigError(f"{where}: expected {len(args)} values, got {value!r}")
            return tuple(_coerce(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
        item = args[0] if args else Any
        out = [_coerce(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(out) if origin is tuple else out
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if hint is int:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        try:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected an integer, got {value!r}") from None
    if hint is float:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected a number, got {value!r}") from None
    if hint is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return str(value)
    return value


# --- overrides and files ------------------------------------------------------------------
def parse_value(raw: str) -> Any:
    """A typed value from command-line text (`--set` and `--option` alike): true / false as
    booleans, integers, floats (``1e-3`` too), ``null`` as None, ``[...]`` / ``{...}`` as YAML
    lists and mappings, anything else as the string itself. YAML 1.1's other booleans (on, off,
    yes, no) stay strings: `--set train.amp=off` means the string "off"."""
    text = raw.strip()
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "~"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    if text[:1] in ("[", "{"):
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError:
            return raw
    return raw


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `a.b.c=value` strings to a nested dict (values typed by `parse_value`)."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected key=value, e.g. train.epochs=5")
        value = parse_value(raw)
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--set {item!r}: {part!r} is not a section")
            node = child
        node[parts[-1]] = value
    return data


def load_config(path: str | Path | None = None, overrides: list[str] | None = None, base: dict | None = None) -> RunConfig:
    """Read a YAML run config (a file, or a packaged config by name: `find_config`), apply
    overrides, validate.

    Relative data paths written in the file resolve against the file's folder, except in
    packaged configs, whose folder is inside the installed package: theirs, like relative
    paths given in `--set` overrides, resolve against the current directory, as a user
    typing them expects.
    """
    data: dict[str, Any] = dict(base or {})
    if path is not None:
        data = deep_merge(data, read_config_file(find_config(path)))
    data = _resolve_paths(apply_overrides(data, list(overrides or [])), Path.cwd())
    return from_dict(RunConfig, drop_retired_keys(data, str(path) if path else "config"), str(path) if path else "config")


# Keys older configs and runs may hold that nothing reads any more: dropped with a warning, so
# those runs still load, instead of an "unknown key" error.
RETIRED_KEYS = {
    "data.max_text_tokens": "the caption length is each method's model.max_text_tokens",
}


def drop_retired_keys(data: dict[str, Any], where: str) -> dict[str, Any]:
    """`data` without the RETIRED_KEYS it holds, each dropped with one warning naming it."""
    import warnings

    for dotted, reason in RETIRED_KEYS.items():
        *parents, leaf = dotted.split(".")
        section: Any = data
        for name in parents:
            section = section.get(name) if isinstance(section, dict) else None
        if isinstance(section, dict) and leaf in section:
            del section[leaf]
            warnings.warn(f"{where}: {dotted} is no longer read ({reason}); ignored", stacklevel=3)
    return data


def read_config_file(path: Path, _chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """One YAML config as a raw dict, with its relative data paths made absolute. A file may
    start from another with `base: other.yaml` (relative to its own folder): its keys are
    merged over the base's, so an ablation row is a few lines over the preset it varies."""
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        loaded = yaml.safe_load(digests.read_verified(path).decode("utf-8")) or {}  # a run's own: checked
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a UTF-8 text file ({exc.reason} at byte {exc.start})") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    here = path.resolve()
    if here in _chain:
        raise ConfigError(f"{path}: `base` chain loops back to itself")
    parent = loaded.pop("base", None)
    data = _resolve_paths(loaded, Path.cwd() if here.is_relative_to(PACKAGED) else here.parent)
    if parent is None:
        return data
    if not isinstance(parent, str) or not parent:
        raise ConfigError(f"{path}: base: expected a config file name, got {parent!r}")
    return deep_merge(read_config_file(here.parent / parent, (*_chain, here)), data)


MODEL_SCHEMES = ("timm:", "openclip:", "hf-hub:")  # `*_checkpoint` values that name a model, not a file


def _resolve_paths(data: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """Make the relative file paths of a raw config dict absolute against `base_dir`:
    data.manifest / data.features, each data.mixture source's, and model.*_manifest /
    model.*_checkpoint (e.g. model.image_manifest, model.vit_checkpoint)."""
    def absolute(value: Any) -> Any:
        if isinstance(value, str) and value.startswith(MODEL_SCHEMES):
            return value  # a model by name (timm:NAME, openclip:ARCH@…), not a file
        if isinstance(value, str) and value and not Path(value).is_absolute():
            return str((base_dir / value).resolve())
        return value

    data = dict(data)
    section = data.get("data")
    if isinstance(section, dict):
        section = dict(section)
        for name in ("manifest", "features"):
            if name in section:
                section[name] = absolute(section[name])
        if isinstance(section.get("mixture"), list):
            section["mixture"] = [
                {k: (absolute(v) if k in ("manifest", "features") else v) for k, v in source.items()}
                if isinstance(source, dict) else source for source in section["mixture"]]
        data["data"] = section
    model = data.get("model")
    if isinstance(model, dict):
        data["model"] = {k: (absolute(v) if k.endswith(("_manifest", "_checkpoint")) else v) for k, v in model.items()}
    return data


def deep_merge(base: dict, update: dict) -> dict:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def save_config(config: RunConfig, path: str | Path) -> None:
    """Write a run's resolved config atomically, its digest recorded beside it (`videotext.digests`)."""
    run_dir = Path(path).parent
    way_back = (f"restore it from a copy, or let `videotext train CONFIG --resume -o {run_dir}` write it again "
                f"(the checkpoints are kept)")
    with atomic_open(path, "w", way_back, encoding="utf-8") as handle:
        yaml.safe_dump(config.to_dict(), handle, sort_keys=False)
