"""Methods, registered by name (`videotext.models.registry`). Importing the package imports
every module in it, so a new method file registers itself with `@register` and needs no edit
elsewhere."""
from videotext.models.base import Embedding, Method
from videotext.models.registry import METHODS, build_method, load_builtin_methods, method_class, register

load_builtin_methods()

__all__ = ["METHODS", "Embedding", "Method", "build_method", "method_class", "register"]
