"""Methods by name: configs and checkpoints name a method, `build_method` builds it.

A method file registers its class with `@register`. The built-in ones are found by name: the
first lookup (`method_class`, `build_method`, `list_methods`) imports every module of this
package folder, so a new method file registers itself and needs no edit elsewhere.
"""
from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path
from typing import Any


from videotext.config import ConfigError, from_dict
from videotext.distributed import LossGather
from videotext.runtime import weights_loaded_after  # noqa: F401 - methods are built under it (`load_run`)
from videotext.models.base import Method

METHODS: dict[str, type[Method]] = {}

_PACKAGE = __name__.rpartition(".")[0]
_NOT_METHODS = ("base", "registry")
_loaded = False


def load_builtin_methods() -> None:
    """Import every module of the package folder (each registers its methods), once."""
    global _loaded
    if _loaded:
        return
    for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if not module.name.startswith("_") and module.name not in _NOT_METHODS:
            importlib.import_module(f"{_PACKAGE}.{module.name}")
    _loaded = True


def register(cls: type[Method]) -> type[Method]:
    """Class decorator: make a method available by its `name` in configs and checkpoints.

    A second class under a name already taken is refused (configs and checkpoints name methods,
    so a silent overwrite would load another model); registering the same class again (a module
    imported twice) is harmless."""
    if not getattr(cls, "name", None):
        raise TypeError(f"{cls.__name__} needs a `name`")
    taken = METHODS.get(cls.name)
    if taken is not None and f"{taken.__module__}.{taken.__qualname__}" != f"{cls.__module__}.{cls.__qualname__}":
        raise ValueError(f"method name {cls.name!r} is already registered by {taken.__module__}.{taken.__qualname__}; "
                         f"{cls.__module__}.{cls.__qualname__} needs another name")
    METHODS[cls.name] = cls
    return cls


def list_methods() -> dict[str, str]:
    """Registered method name -> one line saying what it is (its class docstring, else the first
    line of its module's docstring without the leading "`name`:"), sorted by name."""
    load_builtin_methods()

    def summary(cls: type) -> str:
        doc = cls.__dict__.get("__doc__") or sys.modules[cls.__module__].__doc__ or ""
        first = (doc.strip().splitlines() or [""])[0]
        return first.split(": ", 1)[1] if first.startswith(f"`{cls.name}`: ") else first

    return {name: summary(METHODS[name]) for name in sorted(METHODS)}


def method_class(name: str) -> type[Method]:
    load_builtin_methods()
    if name not in METHODS:
        raise ConfigError(f"method: unknown method {name!r}; available: {sorted(METHODS)}")
    return METHODS[name]


def build_method(name: str, config: dict[str, Any] | Any | None = None, gather: LossGather | None = None,
                 **context: Any) -> Method:
    """Instantiate a registered method from its name and a config dict (or dataclass).

    `gather` is what its losses see of other ranks (`train.global_negatives`; the trainer hands
    it in); default: the global batch under torchrun, as `LossGather()`."""
    cls = method_class(name)
    if config is None or isinstance(config, dict):
        config = from_dict(cls.Config, config or {}, f"model ({name})")
    method = cls(config, **context)
    if gather is not None:
        method.gather = gather
    return method
