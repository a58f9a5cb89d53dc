"""Methods, registered by name (`dual`, and the papers' methods as they land)."""
from videotext.models.base import METHODS, Embedding, Method, build_method, method_class, register
from videotext.models import dual  # noqa: F401  (registers "dual")

__all__ = ["METHODS", "Embedding", "Method", "build_method", "method_class", "register"]
