"""Read an official checkpoint file without running anything pickled in it.

The official Frozen and MMT trainers save `{'arch', 'epoch', 'state_dict', ..., 'config':
self.config}`, where `config` is a pickled `parse_config.ConfigParser`, a class of the
official repository. `torch.load(weights_only=True)` refuses such a file, and
`weights_only=False` would import that class and run whatever a file names.
`read_checkpoint` unpickles with `RestrictedUnpickler` instead:

- the globals that `torch.load(weights_only=True)` allows (torch's own allow-list:
  tensor rebuild functions, storages, dtypes, `torch.Size`, `OrderedDict`, `set`, ...) load
  as usual, so tensors and plain containers come back as they were saved;
- any other global (`parse_config.ConfigParser`, `pathlib.PosixPath`, `argparse.Namespace`,
  `os.system`, ...) is never imported: it becomes a `Pickled` placeholder class. Calling it
  (pickle's REDUCE / NEWOBJ) makes an inert `Pickled` object that keeps its arguments
  (`_pickled_args`), its pickled attributes (BUILD: `obj.<name>`) and any list/dict items
  (`_pickled_items`); it has no other behaviour, so no code of the file runs.
The ConfigParser's `_config` (the training JSON config, plain dicts) is then readable
(`trainer_config`). torch.save writes pickle protocol 2, so `copyreg` helpers (protocols
0/1) are placeholders too: such objects lose their attributes, tensors do not.

Errors, each one line: file not found, empty, truncated (a zip without its directory, or
a pickle that ends early), not a PyTorch checkpoint, a TorchScript archive, and (with
`require_method`) a checkpoint of another method, named so the user can run the right converter.
"""
from __future__ import annotations

import functools
import importlib
import pickle
import types
import zipfile
from pathlib import Path
from typing import Any, Mapping

import torch

from videotext.convert import available
from videotext.errors import VideoTextError


class Pickled:
    """Inert stand-in for an object whose class was not loaded (see the module docstring)."""

    pickled_class = "?"  # "module.name" of the class it stands for

    def __new__(cls, *args: Any, **kwargs: Any) -> "Pickled":
        obj = object.__new__(cls)
        obj.__dict__["_pickled_args"] = args
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # REDUCE calls cls(*args): keep, run nothing
        pass

    def __setstate__(self, state: Any) -> None:  # BUILD: keep plain attributes, nothing else
        if isinstance(state, tuple) and len(state) == 2:  # (dict state, slot state)
            for part in state:
                self.__setstate__(part)
        elif isinstance(state, dict):
            self.__dict__.update({k: v for k, v in state.items() if isinstance(k, str)})
        elif state is not None:
            self.__dict__["_pickled_state"] = state

    def append(self, item: Any) -> None:  # APPEND(S) into a pickled list subclass
        self.__dict__.setdefault("_pickled_items", []).append(item)

    def extend(self, items: Any) -> None:
        for item in items:
            self.append(item)

    def __setitem__(self, key: Any, value: Any) -> None:  # SETITEM(S) into a pickled dict subclass
        self.append((key, value))

    def __repr__(self) -> str:
        names = sorted(k for k in self.__dict__ if not k.startswith("_pickled"))
        return f"<pickled {self.pickled_class} (not loaded); attributes {names}>"


@functools.lru_cache(maxsize=1)
def _allowed() -> dict[str, Any]:
    """"module.name" → object for every global `torch.load(weights_only=True)` accepts."""
    return dict(importlib.import_module("torch._weights_only_unpickler")._get_allowed_globals())


class RestrictedUnpickler(pickle.Unpickler):
    """Loads only torch's weights-only globals; every other global becomes a `Pickled` class."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._placeholders: dict[str, type] = {}

    def find_class(self, module: str, name: str) -> Any:
        qualified = f"{module}.{name}"
        allowed = _allowed().get(qualified)
        if allowed is not None:
            return allowed
        if qualified not in self._placeholders:
            self._placeholders[qualified] = type(str(name), (Pickled,), {"pickled_class": qualified})
        return self._placeholders[qualified]


RESTRICTED_PICKLE = types.ModuleType("videotext_restricted_pickle")  # torch.load(pickle_module=...)
RESTRICTED_PICKLE.Unpickler = RestrictedUnpickler
RESTRICTED_PICKLE.load = lambda file, **kwargs: RestrictedUnpickler(file, **kwargs).load()


def _truncated(path: Path) -> VideoTextError:
    return VideoTextError(f"{path}: the file is truncated (it ends before the checkpoint does): "
                          "download or copy it again")


def _not_checkpoint(path: Path, why: str) -> VideoTextError:
    return VideoTextError(f"{path}: not a PyTorch checkpoint ({why})")


def read_checkpoint(path: Path) -> Any:
    """The object `torch.save` wrote to `path`, read with `RestrictedUnpickler` on CPU."""
    path = Path(path)
    if not path.is_file():
        raise VideoTextError(f"{path}: checkpoint not found")
    with open(path, "rb") as handle:
        head = handle.read(4)
    if not head:
        raise VideoTextError(f"{path}: the file is empty (0 bytes)")
    if head == b"PK\x03\x04":  # torch ≥ 1.6: a zip whose directory is at the end
        if not zipfile.is_zipfile(path):
            raise _truncated(path)
        with zipfile.ZipFile(path) as archive:
            names = [n.rsplit("/", 1)[-1] for n in archive.namelist()]
        if "constants.pkl" in names:
            raise _not_checkpoint(path, "a TorchScript archive from torch.jit.save, not a training checkpoint")
        if "data.pkl" not in names:
            raise _not_checkpoint(path, "a zip file without data.pkl")
    elif head[:1] != b"\x80":  # older torch files are pickles (protocol ≥ 2 starts with 0x80)
        raise _not_checkpoint(path, f"starts with bytes {head!r}, neither a zip nor a pickle")
    try:
        return torch.load(path, map_location="cpu", pickle_module=RESTRICTED_PICKLE, weights_only=False)
    except EOFError:
        raise _truncated(path) from None
    except Exception as exc:  # noqa: BLE001 - torch and pickle raise many types for damaged files
        text = str(exc)
        if any(s in text for s in ("truncated", "Ran out of input", "EOF")):
            raise _truncated(path) from None
        raise _not_checkpoint(path, f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}") from None


def plain(value: Any) -> Any:
    """Containers (OrderedDict, tuples) as plain dicts/lists, recursively; other values as they are."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def trainer_config(data: Any) -> dict[str, Any]:
    """The official training config in a checkpoint: a plain dict `config`, or the `_config`
    that `parse_config.ConfigParser` keeps (the JSON it was started with); {} when absent."""
    config = data.get("config") if isinstance(data, Mapping) else None
    if isinstance(config, Pickled):
        config = getattr(config, "_config", None)
    return plain(config) if isinstance(config, Mapping) else {}


def config_value(config: Mapping[str, Any], *keys: str) -> Any:
    """config[k1][k2]... or None when a level is missing (pickled configs vary by version)."""
    for key in keys:
        if not isinstance(config, Mapping) or key not in config:
            return None
        config = config[key]
    return config


def state_dict(data: Any, path: Path, prefix: str = "") -> dict[str, torch.Tensor]:
    """The checkpoint's `state_dict` (or the file itself when it is one), `prefix` removed."""
    state = data.get("state_dict", data) if isinstance(data, Mapping) else None
    if not isinstance(state, Mapping) or not state:
        raise VideoTextError(f"{path}: no 'state_dict' in the file")
    bad = next((k for k, v in state.items() if not isinstance(v, torch.Tensor)), None)
    if bad is not None:
        raise VideoTextError(f"{path}: state_dict[{bad!r}] is a {type(state[bad]).__name__}, not a tensor")
    return {(k[len(prefix):] if prefix and k.startswith(prefix) else k): v for k, v in state.items()}


def require_method(path: Path, data: Any, method: str) -> None:
    """Fail with one line unless `data` is a checkpoint of `method` (each converter's `recognises`)."""
    if importlib.import_module(f"videotext.convert.{method}").recognises(data):
        return
    others = [m for m in available()
              if m != method and importlib.import_module(f"videotext.convert.{m}").recognises(data)]
    if others:
        raise VideoTextError(f"{path}: this is a {others[0]} checkpoint, not a {method} one: "
                             f"run `videotext convert {others[0]} {path} ...`")
    keys = list(data)[:6] if isinstance(data, Mapping) else type(data).__name__
    raise VideoTextError(f"{path}: a PyTorch file, but not a {method} checkpoint (top-level keys: {keys})")


def state_keys(data: Any) -> list[str]:
    """Keys of the checkpoint's state dict (for `recognises`); [] when there is none."""
    state = data.get("state_dict", data) if isinstance(data, Mapping) else None
    return [str(k) for k in state] if isinstance(state, Mapping) else []
