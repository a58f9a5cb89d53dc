"""Text-to-video search: the index stores (FAISS, Milvus), their entries and clip-level helpers.

Importing the package loads neither torch nor transformers (a query through an index's exported
encoder needs neither); `sliding_windows`, which works on feature tensors, loads when first used."""
from typing import Any

from videotext.search.entries import Entry, Hit, merge_hits
from videotext.search.index import Index, open_index

__all__ = ["Entry", "Hit", "Index", "merge_hits", "open_index", "sliding_windows"]


def __getattr__(name: str) -> Any:
    if name == "sliding_windows":
        from videotext.search.windows import sliding_windows

        return sliding_windows
    raise AttributeError(f"module 'videotext.search' has no attribute {name!r}")
