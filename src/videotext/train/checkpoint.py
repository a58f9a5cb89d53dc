"""The one checkpoint format: a folder with safetensors weights and a training-state file.

    checkpoints/<name>/model.safetensors   weights (model only; loadable without torch.load)
    checkpoints/<name>/state.pt            optimizer, scheduler, RNG states, counters
    checkpoints/<name>/meta.json           method name, step, epoch, metrics (human-readable)

A checkpoint folder is written beside its final place (its files synced to disk) and renamed into
it, so a crash leaves the previous checkpoint intact and never a half-written one: a kill between
setting the old folder aside and renaming the new one in is undone at the next read
(`recover_checkpoint`). A file that is there but cannot be read is a `DataFormatError` naming it
and the way back; each file's digest is recorded beside it as it is written and checked as it is
read (`videotext.digests`), so damage that still parses is caught too.
"""
from __future__ import annotations

import io
import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from videotext import digests
from videotext.errors import DataFormatError, VideoTextError

WEIGHTS = "model.safetensors"
STATE = "state.pt"
META = "meta.json"


def model_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """State dict as contiguous CPU tensors, shared storage cloned (safetensors refuses aliases)."""
    out, seen = {}, set()
    for key, value in model.state_dict().items():
        tensor = value.detach().cpu()
        ptr = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        out[key] = tensor.clone().contiguous() if ptr in seen or not tensor.is_contiguous() else tensor
        seen.add(ptr)
    return out


def save_checkpoint(folder: str | Path, model: torch.nn.Module, meta: dict[str, Any],
                    state: dict[str, Any] | None = None) -> Path:
    """Write weights (+ training state) into `folder` atomically."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    recover_checkpoint(folder)
    for stale in folder.parent.glob(f".{folder.name}.*"):  # left by a writer killed mid-save
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        save_file(model_tensors(model), str(tmp / WEIGHTS), metadata={"format": "videotext"})
        if state is not None:
            torch.save(state, tmp / STATE)
        (tmp / META).write_text(json.dumps(meta, indent=1, default=str), encoding="utf-8")
        for path in list(tmp.iterdir()):
            digests.record(path, way_back(folder))
        for path in tmp.iterdir():
            _fsync(path)
        old = folder.with_name(f".{folder.name}.old")
        if folder.exists():
            folder.rename(old)
        tmp.rename(folder)
        _fsync(folder.parent)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _fsync(path: Path) -> None:
    """Flush a file's (or a folder's entries') content to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def recover_checkpoint(folder: str | Path) -> Path:
    """Undo a save killed between setting the old folder aside (`.NAME.old`) and renaming the new
    one in: the old folder, whole, goes back in place."""
    folder = Path(folder)
    old = folder.with_name(f".{folder.name}.old")
    if not folder.exists() and (old / WEIGHTS).is_file():
        old.rename(folder)
    return folder


def way_back(folder: Path) -> str:
    """What a user does about a damaged file of the checkpoint `folder`."""
    other = "last" if folder.name == "best" else "best"
    return (f"restore {folder} from a copy, use the other checkpoint (`--checkpoint {other}`), or train the run "
            f"again (`videotext train CONFIG -o {folder.parent.parent}`)")


def damaged(path: Path, exc: BaseException) -> DataFormatError:
    """A checkpoint file that is there but cannot be read: the error names it and the way back."""
    return DataFormatError(path, None, f"damaged checkpoint file, cannot be read ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}); {way_back(path.parent)}")


def load_weights(folder: str | Path, model: torch.nn.Module, strict: bool = True) -> dict[str, list[str]]:
    """Load `model.safetensors` into `model`; returns the missing / unexpected keys."""
    result = model.load_state_dict(read_weights(folder), strict=strict)
    return {"missing": list(result.missing_keys), "unexpected": list(result.unexpected_keys)}


def read_weights(folder: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint's `model.safetensors`."""
    path = recover_checkpoint(folder) / WEIGHTS
    if not path.is_file():
        raise VideoTextError(f"{path}: checkpoint weights not found")
    digests.verify_file(path, way_back(path.parent))  # the whole file, once per process: it is mapped, not read
    try:
        return load_file(str(path))
    except Exception as exc:  # safetensors' header and size checks: truncated, zeroed or garbage
        raise damaged(path, exc) from None


def load_state(folder: str | Path) -> dict[str, Any]:
    path = recover_checkpoint(folder) / STATE
    if not path.is_file():
        raise VideoTextError(f"{path}: training state not found (cannot resume from this checkpoint)")
    data = digests.read_verified(path, way_back(path.parent))
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)  # our own file
    except Exception as exc:  # a zip archive cut short, zeroed or replaced: torch raises several types
        raise damaged(path, exc) from None


def load_meta(folder: str | Path) -> dict[str, Any]:
    path = recover_checkpoint(folder) / META
    if not path.is_file():
        raise VideoTextError(f"{path}: checkpoint metadata not found")
    data = digests.read_verified(path, way_back(path.parent))
    try:
        meta = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise damaged(path, exc) from None
    if not isinstance(meta, dict):
        raise damaged(path, ValueError("not a JSON object"))
    return meta


def rng_state() -> dict[str, Any]:
    """Every random generator a training step can touch."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
