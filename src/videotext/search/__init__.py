"""Text-to-video search: the index stores (FAISS, Milvus), their entries and clip-level helpers."""
from videotext.search.entries import Entry, Hit, merge_hits
from videotext.search.index import Index, open_index
from videotext.search.windows import sliding_windows

__all__ = ["Entry", "Hit", "Index", "merge_hits", "open_index", "sliding_windows"]
