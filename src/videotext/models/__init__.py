"""Methods, registered by name. Every module in this package is imported, so a new
method file registers itself with `@register` and needs no edit elsewhere."""
import importlib
import pkgutil

from videotext.models.base import METHODS, Embedding, Method, build_method, method_class, register

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_") and _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["METHODS", "Embedding", "Method", "build_method", "method_class", "register"]
