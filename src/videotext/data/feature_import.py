"""Importing features made elsewhere into a FeatureStore: COOT, MMT, any folder of arrays.

`import_features` reads a foreign layout (COOT's HDF5 video and text features, MMT's
per-video HDF5 files and pickled challenge features, folders of `.npy` / `.npz` arrays)
entry by entry and writes each through the store's crash-safe `FeatureWriter`, so an
interrupted import resumes and a broken entry is recorded, not fatal. The store itself
(layout, reading, writing) lives in `videotext.data.features`.
"""
from __future__ import annotations

import json
import os
import pickle
import time
from pathlib import Path
from typing import Any, Iterator

import h5py
import numpy as np

from videotext.data.features import FeatureStore, FeatureWriter, open_h5, decode_key
from videotext.errors import DataFormatError
from videotext.io import FailureLog


def import_features(
    src: str | os.PathLike,
    out_store: FeatureStore | str | os.PathLike,
    expert: str,
    *,
    step: float = 1.0,
    array: str | None = None,
    strip_prefix: str = "",
    dtype: str = "float16",
    config: dict[str, Any] | None = None,
    overwrite: bool = False,
    failures: FailureLog | str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Copy existing per-video features into a FeatureStore as expert `expert`.

    `src` may be
    - a folder of `.npy` files, one [T, D] array per video (key = relative path, no suffix);
    - a folder of `.npz` files, one per video: the array named `array`, else `features`,
      else the only array (ActivityNet's `v_<id>.npz` uses `array="frame_scores"`); an
      optional `timestamps` array is used as is;
    - one `.npz` file holding one array per video key;
    - one `.h5` file with a dataset per video key (COOT's video features `<name>.h5`), or a
      group per key with `features` (+ `timestamps`), as this store writes; COOT's text
      features `<name>.h5` ([tokens, D] per paragraph, last two BERT layers) come with
      `<name>_sentence_splits.json` (tokens per sentence): the timestamps then hold each
      token's sentence index (the layout `videotext.data.hierarchy.StoredParagraphFeatures` reads);
    - a folder of per-video `.h5` files (MMT's ECCV layout) with `array` naming the
      dataset (e.g. `features.s3d`); `features_t.<expert>` [T, 2] gives start times;
    - one `.pkl`/`.pickle`, or a `.npy` holding a dict, mapping key → [T, D] (MMT's
      challenge features; a float NaN entry marks a missing expert).
    Without stored times, timestamps are `arange(T) * step`. Arrays of shape [D] are
    one step; more than 2 dims are squeezed. Broken entries are skipped and recorded
    in `failures` (default `<store>/failures.jsonl`, once per entry: a re-run's error
    replaces the earlier one). Keys already in the store are
    skipped (an interrupted import resumes). Pickles run code when loaded: import only
    files you trust.
    """
    store = out_store if isinstance(out_store, FeatureStore) else FeatureStore(out_store)
    log = failures if isinstance(failures, FailureLog) else FailureLog(failures or store.root / "failures.jsonl")
    src = Path(src)
    if not src.exists():
        raise DataFormatError(src, None, "feature source not found")
    started = time.time()
    writer: FeatureWriter | None = None
    done: set[str] = set()
    counts = {"imported": 0, "missing": 0, "skipped": 0, "failed": 0}
    for key, loaded in _iter_source(src, array, expert):
        key = key[len(strip_prefix):] if strip_prefix and key.startswith(strip_prefix) else key
        if key in done:
            counts["skipped"] += 1
            continue
        try:
            features, timestamps, missing = _as_entry(loaded, step)
            if writer is None:
                dim = features.shape[1]
                cfg = {"imported_from": str(src.resolve()), "step": step, **(config or {})}
                writer = store.writer(expert, dim, cfg, dtype=dtype, overwrite=overwrite, flush_every=512)
                done = writer.done_keys()
                if key in done:
                    counts["skipped"] += 1
                    continue
            if missing:
                features = np.zeros((0, writer.dim), np.float32)
                timestamps = np.zeros(0)
            writer.add(key, features, timestamps, step=step, missing=missing)
            log.resolve(key, expert)
            counts["missing" if missing else "imported"] += 1
        except (DataFormatError, ValueError, OSError, KeyError, TypeError) as exc:
            log.record(key, exc, stage="import", expert=expert, source=str(src))
            counts["failed"] += 1
    if writer is not None:
        writer.commit()
    log.compact()  # each broken entry once: latest error wins
    return {**counts, "seconds": time.time() - started, "store": str(store.root), "failures": str(log.path)}


class _Broken:
    """Stands in for an entry that could not be read, carrying the error."""

    def __init__(self, error: BaseException):
        self.error = error


def _iter_source(src: Path, array: str | None, expert: str) -> Iterator[tuple[str, Any]]:
    if src.is_dir():
        files = sorted(p for p in src.rglob("*") if p.is_file() and not p.name.startswith("."))
        suffixes = {p.suffix.lower() for p in files}
        for path in files:
            suffix = path.suffix.lower()
            key = path.relative_to(src).with_suffix("").as_posix()
            if suffix == ".npy":
                yield key, _guard(lambda p=path: np.load(p, allow_pickle=False))
            elif suffix == ".npz":
                yield key, _guard(lambda p=path: _npz_entry(p, array))
            elif suffix in (".h5", ".hdf5"):
                yield key, _guard(lambda p=path: _mmt_h5_entry(p, array, expert))
        if not suffixes & {".npy", ".npz", ".h5", ".hdf5"}:
            raise DataFormatError(src, None, "no .npy, .npz or .h5 feature files in this folder")
        return
    suffix = src.suffix.lower()
    if suffix == ".npz":
        with np.load(src, allow_pickle=False) as data:
            for key in data.files:
                yield key, _guard(lambda k=key: data[k])
    elif suffix in (".h5", ".hdf5"):
        splits = _coot_sentence_splits(src)
        with open_h5(src) as handle:
            for name in handle.keys():
                if splits is not None:  # COOT text features: [tokens, D] + sentence lengths
                    yield decode_key(name), _guard(lambda n=name: _coot_text_item(handle, n, splits))
                else:
                    yield decode_key(name), _guard(lambda n=name: _h5_item(handle[n]))
    elif suffix in (".pkl", ".pickle", ".npy"):
        mapping = _load_mapping(src)
        for key, value in mapping.items():
            yield str(key), value
    else:
        raise DataFormatError(src, None, "expected a folder, .npz, .h5, .pkl or .npy (dict) file")


def _guard(load) -> Any:
    try:
        return load()
    except Exception as exc:  # noqa: BLE001 - any unreadable file is recorded, not fatal
        return _Broken(exc)


def _npz_entry(path: Path, array: str | None) -> Any:
    with np.load(path, allow_pickle=False) as data:
        names = data.files
        name = array or ("features" if "features" in names else (names[0] if len(names) == 1 else None))
        if name is None or name not in names:
            raise DataFormatError(path, array, f"cannot tell which array holds the features: {names}")
        features = data[name]
        if "timestamps" in names:
            return features, data["timestamps"]
        return features


def _mmt_h5_entry(path: Path, array: str | None, expert: str) -> Any:
    with open_h5(path) as handle:
        name = array or (f"features.{expert}" if f"features.{expert}" in handle else None)
        if name is None:
            datasets = [k for k in handle.keys() if isinstance(handle[k], h5py.Dataset)]
            if len(datasets) != 1:
                raise DataFormatError(path, None, f"pass array= to pick the features among {list(handle.keys())}")
            name = datasets[0]
        if name not in handle:
            raise DataFormatError(path, name, "no such dataset")
        features = handle[name][()]
        times_name = name.replace("features.", "features_t.", 1)
        if times_name != name and times_name in handle:
            return features, np.asarray(handle[times_name][()])
        return features


def _coot_sentence_splits(src: Path) -> dict[str, list[int]] | None:
    """COOT's `<name>_sentence_splits.json` next to a text feature file `<name>.h5`, if any:
    {key: tokens per sentence}; the tokens of a paragraph are the sentences back to back."""
    path = src.with_name(f"{src.stem}_sentence_splits.json")
    if not path.is_file():
        return None
    try:
        splits = json.loads(path.read_text(encoding="utf8"))
    except (OSError, ValueError) as exc:
        raise DataFormatError(path, None, f"cannot read sentence splits ({exc})") from None
    if not isinstance(splits, dict):
        raise DataFormatError(path, None, "expected a JSON object of key → list of sentence lengths")
    return splits


def _coot_text_item(handle: h5py.File, name: str, splits: dict[str, list[int]]) -> Any:
    """(token features [T, D], sentence index of each token [T]): the store's timestamps
    of a paragraph expert are sentence indices, so the split survives the import."""
    features = np.asarray(handle[name][()])
    key = decode_key(name)
    lengths = splits.get(key, splits.get(name))
    if lengths is None:
        raise KeyError(f"{key!r} has no entry in the sentence splits file")
    if sum(lengths) != len(features) or min(lengths, default=0) < 1:
        raise ValueError(f"{key!r}: sentence lengths {lengths} do not add up to its {len(features)} tokens")
    return features, np.repeat(np.arange(len(lengths), dtype=np.float64), lengths)


def _h5_item(item: h5py.Dataset | h5py.Group) -> Any:
    if isinstance(item, h5py.Dataset):
        return item[()]
    if "features" not in item:
        raise DataFormatError(item.file.filename, item.name, "group without a 'features' dataset")
    features = item["features"][()]
    if "timestamps" in item:
        return features, item["timestamps"][()]
    return features


def _load_mapping(path: Path) -> dict:
    if path.suffix.lower() == ".npy":
        data = np.load(path, allow_pickle=True, encoding="latin1")
        if isinstance(data, np.ndarray) and data.dtype == object and data.size == 1:
            data = data[()]
    else:
        with open(path, "rb") as handle:
            data = pickle.load(handle, encoding="latin1")
    if not isinstance(data, dict):
        raise DataFormatError(path, None, f"expected a dict of video key → [T, D] array, got {type(data).__name__}")
    return data


def _as_entry(loaded: Any, step: float) -> tuple[np.ndarray, np.ndarray, bool]:
    """(features [T, D] float32, timestamps [T], missing) from whatever a file held."""
    if isinstance(loaded, _Broken):
        raise loaded.error
    times = None
    if isinstance(loaded, tuple):
        loaded, times = loaded
    if loaded is None or (isinstance(loaded, float) and np.isnan(loaded)):
        return np.zeros((0, 0), np.float32), np.zeros(0), True  # MMT marks a missing expert with NaN
    features = np.asarray(loaded)
    if features.dtype == object or not np.issubdtype(features.dtype, np.number):
        raise ValueError(f"expected a numeric array, got dtype {features.dtype}")
    if features.ndim > 2:
        features = features.reshape(features.shape[0], -1) if features.shape[0] > 1 else features.squeeze()
        features = np.squeeze(features) if features.ndim > 2 else features
    if features.ndim == 1:
        features = features[None, :]
    if features.ndim != 2 or features.shape[1] == 0:
        raise ValueError(f"expected a [T, D] array, got shape {list(np.shape(loaded))}")
    if features.shape[0] == 0:
        return features.astype(np.float32), np.zeros(0), True
    if np.isnan(features).all():
        return np.zeros((0, features.shape[1]), np.float32), np.zeros(0), True
    if times is None:
        stamps = np.arange(features.shape[0]) * float(step)
    else:
        stamps = np.asarray(times, dtype=np.float64)
        stamps = stamps[:, 0] if stamps.ndim == 2 else stamps.reshape(-1)  # MMT's [T, 2] start/end
        if stamps.shape[0] != features.shape[0]:
            raise ValueError(f"{features.shape[0]} feature rows but {stamps.shape[0]} timestamps")
    return features.astype(np.float32), stamps, False
