"""A trained run loaded for encoding and searching: its method, the weights of one checkpoint, the
precision it runs at, and the feature settings it was trained with.

`RunModel` embeds text and videos (the dtype boundary of the public API: anything in, float32 out),
extracts the features new videos need, and is the query side of an index when its folder holds no
exported encoder (`search`: a method whose score is not one dot product re-scores a shortlist,
`search.shortlist`). Building and opening an index *folder* is `videotext.apps.index_folder`'s job;
`videotext.load_model` (`videotext.inference`) returns this class with those two delegated.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from videotext import distributed as dist
from videotext.cache import cache_folder
from videotext.config import ConfigError, load_config
from videotext.data.experts import expert_class, extract_features, options_from_config
from videotext.data.experts.settings import ExtractionSettings
from videotext.data.features import FeatureStore
from videotext.data.loaders import VideoFeatures
from videotext.data.schema import Video, VideoTextDataset
from videotext.errors import VideoTextError
from videotext.encode import encode_texts, encode_videos
from videotext.hub_runs import EXTRACTION, HubRun, is_hub_run, resolve_run
from videotext.models.base import Method
from videotext.models.registry import build_method
from videotext.runtime import (autocast, network_precision, resolve_device, retain_freed_memory, set_threads,
                               weights_loaded_after)
from videotext.search.examples import check_example, example_dataset, parse_example
from videotext.search.query_encoder import QUERY_FOLDER, export_is_current
from videotext.search.shortlist import ranked
from videotext.search.windows import WindowFeatures
from videotext.train.checkpoint import load_meta, load_weights

log = logging.getLogger(__name__)

# --- the dtype boundary of the public API ------------------------------------------------
# What goes in (frames, features, vectors) is cast to float32 here, whatever its float dtype;
# the method runs at the run's precision (`LoadedModel._run`); what comes out is float32.


def _float_input(value: Any, what: str, shape: str, integers: bool = True) -> torch.Tensor:
    """A user's array (torch, numpy or nested lists) as a float32 CPU tensor with as many
    dimensions as `shape` names; float64, bf16 and fp16 are cast (integers too when
    `integers`). Anything else raises one VideoTextError naming `what` and `shape`."""
    expected = f"{what}: expected a float array of shape {shape}"
    if isinstance(value, torch.Tensor):
        tensor, dtype = value.detach(), str(value.dtype).removeprefix("torch.")
        numeric = tensor.is_floating_point() or (integers and not tensor.is_complex() and tensor.dtype != torch.bool)
    else:
        try:
            array = np.asarray(value)
        except (ValueError, TypeError):  # ragged nested lists
            raise VideoTextError(f"{expected}, got {type(value).__name__} of uneven lengths") from None
        dtype = str(array.dtype)
        numeric = array.dtype.kind == "f" or (integers and array.dtype.kind in "iu")
        if not numeric:
            raise VideoTextError(f"{expected}, got {type(value).__name__} of dtype {dtype}")
        tensor = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))
    if not numeric:
        raise VideoTextError(f"{expected}, got {type(value).__name__} of dtype {dtype}")
    if tensor.dim() != shape.count(",") + 1:
        raise VideoTextError(f"{expected}, got shape {list(tensor.shape)}")
    return tensor.to("cpu", torch.float32)


def _float32_cpu(value: Any) -> Any:
    """An embedding (tensor or dict of tensors) as float32 on the CPU; other values unchanged."""
    if isinstance(value, dict):
        return {k: _float32_cpu(v) for k, v in value.items()}
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.to("cpu", torch.float32)
    return value


def _texts(texts: Any) -> list[str]:
    """One string or a sequence of strings as a list; anything else is a VideoTextError."""
    if isinstance(texts, str):
        return [texts]
    if isinstance(texts, (torch.Tensor, np.ndarray, bytes)) or not hasattr(texts, "__iter__"):
        raise VideoTextError(f"texts: expected a string or a list of strings, got {type(texts).__name__}")
    texts = list(texts)
    if not texts:
        raise VideoTextError("texts: expected a string or a list of strings, got an empty list")
    for position, text in enumerate(texts):
        if not isinstance(text, str):
            raise VideoTextError(f"texts: expected a string or a list of strings, got {type(text).__name__} "
                                 f"at position {position}")
    return texts


class _ArrayStore:
    """A FeatureStore look-alike over in-memory features {expert: [B, T, D]}: video `str(i)` is row i,
    every step real, no timestamps (NaN: methods that embed time treat them as unknown)."""

    def __init__(self, arrays: dict[str, np.ndarray], dims: dict[str, int]):
        self.arrays, self.dims = arrays, dims

    def dim(self, expert: str) -> int:
        return self.dims[expert]

    def has_expert(self, expert: str) -> bool:
        return expert in self.arrays

    def has(self, expert: str, key: str) -> bool:
        return expert in self.arrays

    def is_missing(self, expert: str, key: str) -> bool:
        return False

    def get(self, expert: str, key: str) -> tuple[np.ndarray, np.ndarray]:
        values = self.arrays[expert][int(key)]  # [T, D]
        return values, np.full(len(values), np.nan)


class RunModel:
    """A trained method with the data settings it was trained with."""

    def __init__(self, run_dir: Path, method: Method, config: Any, device: torch.device,
                 precision: str | None = None):
        self.run_dir, self.method, self.config, self.device = run_dir, method, config, device
        self.precision = precision or config.inference.precision  # auto | fp32 | bf16
        # torch.bfloat16, or None for fp32: `auto` decided for this method by its measured bf16 cosine
        self.dtype = network_precision(config.method, self.precision, device)
        self.expert_dims: dict[str, int] = {}  # feature width per expert, from the checkpoint
        self.checkpoint: Path | None = None  # the checkpoint folder the weights came from
        self.hub: HubRun | None = None  # a run loaded by name (`hf-hub:ORG/NAME`): its checked snapshot

    def autocast(self):
        """The run's inference precision (`--precision`) as a context: bf16 autocast or nothing."""
        return autocast(self.dtype, self.device)

    def _run(self, function: Any, *args: Any, at_precision: bool = True, **kwargs: Any) -> Any:
        """The dtype boundary every public `encode_*` / `search` goes through: `function` runs
        without gradients at the run's precision (`at_precision`: bf16 autocast under bf16, where
        `cast_for_inference` also stored some networks' weights in bf16; those cast their float32
        inputs themselves), and its tensors come back float32 on the CPU, so bf16 stays inside."""
        with torch.inference_mode(), (self.autocast() if at_precision else contextlib.nullcontext()):
            out = function(*args, **kwargs)
        return _float32_cpu(out)

    @property
    def experts(self) -> list[str]:
        return list(self.config.data.experts)

    @property
    def max_steps(self) -> int:
        """The most steps per expert the method reads of a video or clip (`data.max_steps_per_expert`)."""
        return int(self.config.data.max_steps_per_expert)

    def encode_text(self, texts: str | Sequence[str]) -> torch.Tensor:
        """Query vectors [N, D] (float32, CPU) for a dot-product index (the method's `query_vectors`)."""
        text = self._run(encode_texts, self.method, _texts(texts), device=self.device)
        return self._run(self.method.query_vectors, text, at_precision=False)

    def query_vectors(self, texts: Sequence[str]) -> np.ndarray:
        """`encode_text` as a float32 numpy array [N, D]: a query side's vectors (a search for moments)."""
        return self.encode_text(list(texts)).numpy()

    def encode_video(self, video: Any) -> torch.Tensor:
        """Index vectors [B, D] (float32, CPU) of videos given as arrays (torch, numpy or lists;
        float32, or float64 / bf16 / fp16, cast), at the run's precision:

        - methods that read pixels (`video_inputs = "frames"`, e.g. Frozen): frames
          [B, T, 3, H, W], normalised as the method's frame transform does;
        - feature methods: {expert: features [B, T, D]} of the run's `experts`, every step
          real; an expert left out counts as absent for every video (as a silent video's audio).
        """
        if self.method.video_inputs == "frames":
            frames = _float_input(video, "frames", "[B, T, 3, H, W]", integers=False)
            size = getattr(self.method, "img_size", None)
            if frames.shape[2] != 3 or (size and tuple(frames.shape[3:]) != (size, size)) or not len(frames):
                sides = f"{size}, {size}" if size else "H, W"
                raise VideoTextError(f"frames: expected shape [B, T, 3, {sides}] with B >= 1, "
                                     f"got {list(frames.shape)}")
            try:
                embedding = self._run(self.method.encode_video, {"frames": frames.to(self.device)})
            except ValueError as exc:  # the network's own check of its input, e.g. more frames than trained on
                raise VideoTextError(f"frames: {exc}") from exc
        else:
            dataset, reader = self._feature_videos(video)
            embedding = self._run(encode_videos, self.method, dataset, reader, device=self.device)
        return self._run(self.method.index_vectors, embedding, at_precision=False)

    def _feature_videos(self, features: Any) -> tuple[VideoTextDataset, VideoFeatures]:
        """{expert: [B, T, D]} as a dataset of B videos and its feature reader."""
        expected = f"features: expected {{expert: [B, T, D] array}} for the run's experts {self.experts}"
        if not isinstance(features, dict) or not features:
            raise VideoTextError(f"{expected}, got {type(features).__name__}")
        unknown = sorted(map(str, set(features) - set(self.experts)))
        if unknown:
            raise VideoTextError(f"{expected}, got unknown {unknown}")
        arrays, dims = {}, dict(self.expert_dims)
        for expert, value in features.items():
            array = _float_input(value, f"features[{expert!r}]", "[B, T, D]").numpy()
            if dims.get(expert, array.shape[2]) != array.shape[2]:
                raise VideoTextError(f"features[{expert!r}]: expected D = {dims[expert]}, "
                                     f"got shape {list(array.shape)}")
            arrays[expert], dims[expert] = array, array.shape[2]
        counts = {e: a.shape[0] for e, a in arrays.items()}
        if len(set(counts.values())) > 1 or not any(counts.values()):
            raise VideoTextError(f"features: every expert needs the same number of videos B >= 1, got {counts}")
        unsized = [e for e in self.experts if e not in dims]
        if unsized:
            raise VideoTextError(f"{expected}, got none of {unsized} (whose width the checkpoint does not record)")
        videos = [Video(id=str(i)) for i in range(next(iter(counts.values())))]
        reader = VideoFeatures(_ArrayStore(arrays, dims), self.experts, self.max_steps)
        return VideoTextDataset("features", videos), reader

    def similarity(self, text: Any, video: Any) -> torch.Tensor:
        """Scores [N, M] (float32) of query vectors [N, D] (`encode_text`) against index vectors
        [M, D] (`encode_video(s)`): their dot product, the index's score (for methods that
        re-score, `search`'s shortlist score). Any float dtype in, float32 out."""
        text = _float_input(text, "text vectors", "[N, D]")
        video = _float_input(video, "video vectors", "[M, D]")
        if text.shape[1] != video.shape[1]:
            raise VideoTextError(f"video vectors: expected width D = {text.shape[1]} (the text vectors'), "
                                 f"got shape {list(video.shape)}")
        return text @ video.T

    def features_for(self, dataset: VideoTextDataset, features_dir: str | Path,
                     progress: bool = True, whole_videos: bool = False) -> VideoFeatures:
        """Feature reader for `dataset`, extracting missing experts into `features_dir` first
        (`whole_videos`: only the steps this run reads of each video, see `extraction_settings`)."""
        features_dir = Path(features_dir)
        store = FeatureStore(features_dir) if features_dir.exists() else None
        missing = store is None or any(not all(store.has(e, v.key) for v in dataset) for e in self.experts)
        if dist.broadcast_object(missing):  # under torchrun every rank joins the sharded extraction, or none
            settings = ExtractionSettings.from_config(self.config.inference, progress=progress,
                                                      precision=self.precision,
                                                      **self.extraction_settings(whole_videos, store))
            extract_features(dataset, self.experts, features_dir, settings)
            store = FeatureStore(features_dir)
        if store is None:  # rank 0 found every feature (broadcast above): this rank reads the same folder
            store = FeatureStore(features_dir)
        absent = [e for e in self.experts if not store.has_expert(e)]
        if absent:
            raise VideoTextError(f"{features_dir}: no video gave {absent} features "
                                 f"(see {features_dir / 'failures.jsonl'})")
        return VideoFeatures(store, self.experts, self.max_steps)

    def extraction_settings(self, whole_videos: bool = False, target: FeatureStore | None = None) -> dict[str, Any]:
        """`extract_features` options that reproduce the training features for new videos: the
        training store's record, over the method's own `expert_options` (a zero-shot run has no store).

        `whole_videos` (an index of whole videos, not windows): where the method reads at most
        `data.max_steps_per_expert` subsampled steps (`Method.reads_subsampled_steps`), its frame
        networks extract only those steps (`max_steps`): the same video embeddings from, e.g., 12
        frames of a 10-minute video instead of 600 (CLIP4Clip §4.1 samples 12 frames per video).
        An expert the `target` store already holds keeps the cap (or none) it was made with."""
        options = {e: dict(o) for e, o in self.method.expert_options().items() if e in self.experts}
        for e, record in self.training_extraction().items():
            options[e] = {**options.get(e, {}), **options_from_config(e, record)}
        for e in self.experts:
            if "max_steps" not in inspect.signature(expert_class(e)).parameters:
                continue
            if target is not None and target.has_expert(e):
                cap = target.info(e)["config"].get("max_steps")
            else:
                cap = self.max_steps if whole_videos and self.method.reads_subsampled_steps else None
            options[e] = {**options.get(e, {}), "max_steps": int(cap) if cap else None}
        return {"options": options} if options else {}

    def training_extraction(self) -> dict[str, dict[str, Any]]:
        """How each of the run's experts was extracted for training ({expert: the store's record}): the
        training feature store's records, or those a run shared by name carries (`extraction.json`,
        `videotext.hub_runs`); {} for a run with neither (zero-shot)."""
        carried = self.run_dir / EXTRACTION
        if carried.is_file():
            experts = json.loads(carried.read_text(encoding="utf-8")).get("experts", {})
            return {e: dict(record) for e, record in experts.items() if e in self.experts}
        data = self.config.data
        if not (data.features or data.manifest):
            return {}
        training_store = Path(data.features or Path(data.manifest).parent / "features")
        if not training_store.exists():
            return {}
        store = FeatureStore(training_store)
        return {e: store.info(e)["config"] for e in self.experts if store.has_expert(e)}

    def encode_videos(self, dataset: VideoTextDataset, features: VideoFeatures) -> torch.Tensor:
        """Index vectors [N, D] (float32, CPU) of every video (the method's `index_vectors`)."""
        embedding = self._run(encode_videos, self.method, dataset, features, device=self.device)
        return self._run(self.method.index_vectors, embedding, at_precision=False)

    @property
    def rescores(self) -> bool:
        """True when the method's score is not the index's dot product (it overrides
        `similarity` or offers `rerank`), so search re-scores a shortlist."""
        cls = type(self.method)
        return hasattr(self.method, "rerank") or cls.similarity is not Method.similarity

    @property
    def method_name(self) -> str:
        """The method's registered name (the `model` an index built with it records)."""
        return self.config.method

    def video_embedding(self, dataset: VideoTextDataset, features: VideoFeatures) -> Any:
        """The method's embedding of every video (tensor or dict of tensors, N first), at the
        run's precision: what an index stores (`index_vectors`, `index_parts`)."""
        with self.autocast():
            return encode_videos(self.method, dataset, features, device=self.device)

    def index_vectors(self, embedding: Any) -> np.ndarray:
        """The index vectors [N, D] (float32) of a method embedding."""
        return self.method.index_vectors(embedding).float().numpy()

    def index_parts(self, embedding: Any) -> dict[str, np.ndarray] | None:
        """What re-scoring reads of each video (`rescores`): the embedding's parts by name, else None."""
        if not self.rescores:
            return None
        parts = embedding if isinstance(embedding, dict) else {"video": embedding}
        return {name: value.numpy() for name, value in parts.items()}

    def add_to_index(self, index: Any, embedding: Any, entries: Sequence[Any]) -> None:
        """Add a method embedding (tensor or dict of tensors, N first) to `index`: its
        `index_vectors`, plus the parts re-scoring needs when `rescores`."""
        index.add(self.index_vectors(embedding), entries, parts=self.index_parts(embedding))

    def rescore(self, text: Any, candidates: dict[str, np.ndarray]) -> torch.Tensor:
        """The method's own scores of one query against stored candidate parts → [C]."""
        video: Any = {k: torch.from_numpy(np.ascontiguousarray(v)).to(self.device) for k, v in candidates.items()}
        if set(video) == {"video"}:
            video = video["video"]
        text = {k: v.to(self.device) for k, v in text.items()} if isinstance(text, dict) else text.to(self.device)
        if hasattr(self.method, "rerank"):  # a cross-encoder: a network, run at the inference precision
            return self._run(self.method.rerank, text, video)[0]
        return self._run(self.method.similarity, text, video, at_precision=False)[0]  # stored embeddings: fp32

    @property
    def reference(self) -> str:
        """What names this run for a later load (the run an index records): its folder, or for a run
        loaded by name `hf-hub:ORG/NAME@COMMIT`, exactly these files again from the hub cache."""
        return self.hub.pinned if self.hub is not None else str(Path(self.run_dir).resolve())

    @property
    def export_cache(self) -> Path | None:
        """Where the query side exported from these weights is kept: beside the checkpoint; for a run
        loaded by name, the export it carries when it has a current one (read only: the hub cache is the
        hub client's), else the videotext cache."""
        if self.checkpoint is None:
            return None
        if self.hub is None:
            return self.checkpoint / QUERY_FOLDER
        carried = self.checkpoint / QUERY_FOLDER
        if export_is_current(carried, self.weights_stamp()):
            return carried
        return cache_folder("exported") / f"run-{self.hub.weights_sha256[:16]}"

    def weights_stamp(self) -> str:
        """What identifies the weights loaded: the checkpoint folder and its files' sizes and times (for a
        run loaded by name, the sha256 its model card records and the resolver checked)."""
        if self.hub is not None:
            return self.hub.weights_stamp
        return checkpoint_stamp(self.checkpoint)

    def fp32_cpu_method(self) -> Method:
        """The method with the run's fp32 weights on the CPU (what an export traces): this one, or a
        fresh load where `cast_for_inference` stored some weights in bf16 or the run is on a GPU."""
        cast = any(p.dtype != torch.float32 for p in self.method.parameters())
        if not cast and self.device.type == "cpu":
            return self.method
        return load_run(self.run_dir, self.checkpoint.name if self.checkpoint else "best", "cpu", "fp32",
                        threads=torch.get_num_threads()).method

    def join_ranks(self) -> None:
        """Join torchrun's group (this rank's GPU is cuda:LOCAL_RANK)."""
        rank_device = dist.init_distributed(str(self.device))
        if rank_device is not None and rank_device != self.device:
            self.device = rank_device
            self.method.to(rank_device)

    def search(self, query: str | Sequence[str], index: Any, k: int = 10, where: str | None = None,
               shortlist: int | None = None):
        """Top-k hits of `index` (a store: `search.index.Index` or `MilvusIndex`) for one query (a list
        of lists for several), by what is shown: the query side of an index whose folder holds no
        exported encoder. When the method re-scores and the index holds its parts, a shortlist is
        ordered by the method's own score (`search.shortlist.ranked`); `where` keeps the entries whose
        metadata pass that filter (`videotext.search.filters`)."""
        single = isinstance(query, str)
        text = self._run(encode_texts, self.method, _texts(query), device=self.device)
        vectors = self._run(self.method.query_vectors, text, at_precision=False).numpy()
        rescore = None
        if self.rescores and index.part_names:
            def rescore(i: int, candidates: Sequence[Any]) -> list[float]:
                one = {key: v[i : i + 1] for key, v in text.items()} if isinstance(text, dict) else text[i : i + 1]
                return self.rescore(one, index.parts_for([h.id for h in candidates])).tolist()

        hits = ranked(index, vectors, k, where, rescore, shortlist)
        return hits[0] if single else hits

    def encode_example(self, example: Any) -> torch.Tensor:
        """The index vector [1, D] of a query example: an image, a video, or `PATH@START-END` (a time
        range of a video), extracted and encoded as `index build` does (a range as its window clip).
        A file that is missing, not an image or video, or undecodable is a VideoTextError naming it."""
        example = parse_example(example)
        dataset, window = example_dataset(example, check_example(example))
        with tempfile.TemporaryDirectory(prefix="videotext-example-") as features_dir:
            try:
                reader = self.features_for(dataset, features_dir, progress=False, whole_videos=window is None)
            except VideoTextError:  # the failure record is in the temporary folder: name the file instead
                raise VideoTextError(f"{example.path}: no frame could be decoded for the query") from None
            if window is not None:
                video = next(iter(dataset))
                clip = dataclasses.replace(video, id="clip", feature_key="clip", duration=window[1] - window[0])
                reader = WindowFeatures(reader, {"clip": (video.key, *window)})
                dataset = VideoTextDataset("example", [clip])
            return self.encode_videos(dataset, reader)


def checkpoint_stamp(folder: Path | None) -> str:
    """What identifies a local checkpoint's weights: its folder and its files' sizes and times."""
    files = sorted(folder.iterdir()) if folder is not None and folder.is_dir() else []
    return json.dumps([str(folder), [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.is_file()]])


def load_run(run_dir: str | os.PathLike, checkpoint: str = "best", device: str = "auto", precision: str | None = None,
             threads: int | None = None, cls: type[RunModel] = RunModel) -> RunModel:
    """Load a run's method with the weights of `checkpoints/<checkpoint>` (best = validation-selected).

    `run_dir` is a run folder, or a run shared on the hub, `hf-hub:ORG/NAME[@REVISION]`: downloaded
    once into the hub cache and checked (`videotext.hub_runs.resolve_run`), then loaded as a folder.
    `precision` (auto | fp32 | bf16) and `threads` (0 = physical cores) default to the
    run config's `inference` section (videotext.runtime)."""
    hub = None
    if is_hub_run(run_dir):
        hub = resolve_run(run_dir)
        if checkpoint != "best":
            raise VideoTextError(f"{run_dir}: a run shared on the hub holds its best checkpoint only, not "
                                 f"{checkpoint!r}")
        run_dir = hub.folder
    run_dir = Path(run_dir)
    config_path = run_dir / "config.yaml"
    if not config_path.is_file():
        raise VideoTextError(f"{run_dir}: not a run directory (no config.yaml)")
    try:
        config = load_config(config_path)
    except ConfigError as exc:  # a run's own config, written by `train`: damaged, not mistyped
        raise ConfigError(f"{exc}; restore {config_path} from a copy, or let `videotext train CONFIG --resume "
                          f"-o {run_dir}` write it again (the checkpoints are kept)") from None
    set_threads(config.inference.threads if threads is None else threads)
    retain_freed_memory()
    folder = run_dir / "checkpoints" / checkpoint
    dims = load_meta(folder).get("expert_dims")
    with weights_loaded_after():  # the checkpoint holds every weight: drawing them first is wasted
        method = build_method(config.method, config.model, expert_dims=dims)
    load_weights(folder, method)
    torch_device = resolve_device(device)
    method.to(torch_device).eval()
    model = cls(run_dir, method, config, torch_device, precision)
    model.expert_dims = {e: int(d) for e, d in (dims or {}).items()}
    model.checkpoint = folder
    model.hub = hub
    if model.dtype is not None:  # a loaded run only encodes: bf16 weights where the method gains from them
        method.cast_for_inference(model.dtype)
    return model
