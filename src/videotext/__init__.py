"""videotext: joint video-text embeddings and text-to-video search.

    import videotext
    model = videotext.load_model("runs/demo")
    index = model.build_index("my_videos/", "my_videos.index")
    model.search("a red circle moves to the left", index, k=5)
"""
from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["load_model", "Index", "VideoTextDataset", "retrieval_metrics", "__version__"]


def __getattr__(name: str) -> Any:
    # lazy: `import videotext` stays instant; torch loads only when a model is asked for
    if name == "load_model":
        from videotext.inference import load_model

        return load_model
    if name == "Index":
        from videotext.search.index import Index

        return Index
    if name == "VideoTextDataset":
        from videotext.data.schema import VideoTextDataset

        return VideoTextDataset
    if name == "retrieval_metrics":
        from videotext.eval.retrieval import retrieval_metrics

        return retrieval_metrics
    raise AttributeError(f"module 'videotext' has no attribute {name!r}")
