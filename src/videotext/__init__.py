"""videotext: joint video-text embeddings and text-to-video search.

    import videotext
    model = videotext.load_model("runs/demo")  # or a run shared on the hub: "hf-hub:ORG/NAME"
    report = videotext.build_index(model, "my_videos/", "my_videos.index", speech=True, text=True)
    index = videotext.open_index("my_videos.index")
    index.search("a red circle moves to the left", k=5, by="all")
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["load_model", "build_index", "open_index", "check_index", "push_to_hub", "Index", "VideoTextDataset",
           "retrieval_metrics", "__version__"]
# each public name's module, imported at first use: `import videotext` stays instant, and opening an index
# loads no torch
_HOMES = {"load_model": "videotext.inference", "build_index": "videotext.apps.index_folder",
          "open_index": "videotext.apps.index_folder", "check_index": "videotext.apps.index_folder",
          "push_to_hub": "videotext.apps.push", "Index": "videotext.search.index",
          "VideoTextDataset": "videotext.data.schema", "retrieval_metrics": "videotext.eval.retrieval"}

if TYPE_CHECKING:  # what type checkers and editors see of the names loaded at first use
    from videotext.apps.index_folder import build_index, check_index, open_index
    from videotext.apps.push import push_to_hub
    from videotext.data.schema import VideoTextDataset
    from videotext.eval.retrieval import retrieval_metrics
    from videotext.inference import load_model
    from videotext.search.index import Index


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'videotext' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
