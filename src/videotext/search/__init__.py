"""Text-to-video search: the FAISS vector index and clip-level helpers."""
from videotext.search.index import Entry, Hit, Index, merge_hits, sliding_windows

__all__ = ["Entry", "Hit", "Index", "merge_hits", "sliding_windows"]
