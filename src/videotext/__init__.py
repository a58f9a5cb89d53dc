"""videotext: joint video-text embeddings and text-to-video search.

    import videotext
    model = videotext.load_model("runs/demo")  # or a run shared on the hub: "hf-hub:ORG/NAME"
    report = videotext.build_index(model, "my_videos/", "my_videos.index", speech=True, text=True)
    index = videotext.open_index("my_videos.index")
    index.search("a red circle moves to the left", k=5, by="all")
"""
from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["load_model", "build_index", "open_index", "check_index", "push_to_hub", "Index", "VideoTextDataset",
           "retrieval_metrics", "__version__"]


def __getattr__(name: str) -> Any:
    # each imported at first use: `import videotext` stays instant, and opening an index loads no torch
    if name == "load_model":
        from videotext import inference as module
    elif name in ("build_index", "open_index", "check_index"):
        from videotext.apps import index_folder as module
    elif name == "push_to_hub":
        from videotext.apps import push as module
    elif name == "Index":
        from videotext.search import index as module
    elif name == "VideoTextDataset":
        from videotext.data import schema as module
    elif name == "retrieval_metrics":
        from videotext.eval import retrieval as module
    else:
        raise AttributeError(f"module 'videotext' has no attribute {name!r}")
    return getattr(module, name)
