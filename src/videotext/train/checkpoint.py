"""The one checkpoint format: a folder with safetensors weights and a training-state file.

    checkpoints/<name>/model.safetensors   weights (model only; loadable without torch.load)
    checkpoints/<name>/state.pt            optimizer, scheduler, RNG states, counters
    checkpoints/<name>/meta.json           method name, step, epoch, metrics (human-readable)

A checkpoint folder is written beside its final place and renamed into it, so a crash
leaves the previous checkpoint intact and never a half-written one.
"""
from __future__ import annotations

import json
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from videotext.errors import VideoTextError

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
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        save_file(model_tensors(model), str(tmp / WEIGHTS), metadata={"format": "videotext"})
        if state is not None:
            torch.save(state, tmp / STATE)
        (tmp / META).write_text(json.dumps(meta, indent=1, default=str), encoding="utf-8")
        old = folder.with_name(f".{folder.name}.old")
        if folder.exists():
            shutil.rmtree(old, ignore_errors=True)
            folder.rename(old)
        tmp.rename(folder)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def load_weights(folder: str | Path, model: torch.nn.Module, strict: bool = True) -> dict[str, list[str]]:
    """Load `model.safetensors` into `model`; returns the missing / unexpected keys."""
    path = Path(folder) / WEIGHTS
    if not path.is_file():
        raise VideoTextError(f"{path}: checkpoint weights not found")
    tensors = load_file(str(path))
    result = model.load_state_dict(tensors, strict=strict)
    return {"missing": list(result.missing_keys), "unexpected": list(result.unexpected_keys)}


def load_state(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / STATE
    if not path.is_file():
        raise VideoTextError(f"{path}: training state not found (cannot resume from this checkpoint)")
    return torch.load(path, map_location="cpu", weights_only=False)  # our own file


def load_meta(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / META
    if not path.is_file():
        raise VideoTextError(f"{path}: checkpoint metadata not found")
    return json.loads(path.read_text(encoding="utf-8"))


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
