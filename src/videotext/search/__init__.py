"""Text-to-video search: the index stores (FAISS, Milvus), their entries and clip-level helpers.

Importing the package loads neither torch nor transformers (a query through an index's exported
encoder needs neither). An index *folder* (vectors, entries, text channels, exported query encoder,
published version) is built and opened by `videotext.build_index` and `videotext.open_index`
(`videotext.apps.index_folder`); `open_store` here opens only its vector store."""
from typing import Any

from videotext.search.entries import Entry, Hit, merge_hits
from videotext.search.index import Index, open_store

__all__ = ["Entry", "Hit", "Index", "merge_hits", "open_store", "sliding_windows"]


def __getattr__(name: str) -> Any:
    if name == "sliding_windows":
        from videotext.search.windows import sliding_windows  # torch: not loaded by `import videotext.search`

        return sliding_windows
    if name == "open_index":  # ImportError, not AttributeError: `from … import` then shows this line
        raise ImportError("videotext.search.open_index is now videotext.search.open_store (the vector store "
                          "alone); videotext.open_index opens a whole index folder")
    raise AttributeError(f"module 'videotext.search' has no attribute {name!r}")
