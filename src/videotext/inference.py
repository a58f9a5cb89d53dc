"""The inference API: load a trained run, embed text and videos, build and search an index folder.

    model = videotext.load_model("runs/demo")
    index = model.build_index("my_videos/", "my_videos.index")     # extracts features as needed
    model.search("a red circle moves to the left", index, k=5)      # → [Hit(id, path, score, …)]

`LoadedModel` is a `RunModel` (`videotext.run_model`: encode text and videos, extract features)
whose `build_index` and `search` of a folder are those of the folder's owner
(`videotext.apps.index_folder`), the functions `videotext index build` and `videotext search` run.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from videotext.apps.index_folder import SearchableIndex, build_index, open_index
from videotext.run_model import RunModel, load_run
from videotext.search.milvus import DEFAULT_COLLECTION


class LoadedModel(RunModel):
    """A trained method with the data settings it was trained with, and the index folder's build and
    search (`videotext.apps.index_folder`)."""

    last_build: Any = None  # the `BuildReport` of the last `build_index`

    def build_index(self, source: Any, out: str | os.PathLike | None = None,
                    features_dir: str | os.PathLike | None = None, progress: bool = True, update: bool = False,
                    window: float | None = None, stride: float | None = None, store: str = "faiss",
                    collection: str = DEFAULT_COLLECTION, lock_timeout: float = 600.0, **channels: Any) -> Any:
        """Embed every video of a manifest / folder / dataset into the index folder `out` (in memory
        without one) and return the index store; `videotext.build_index` with this model, whose
        `BuildReport` is kept as `last_build`. `channels`: its `speech`, `asr_engine`, `asr_model`,
        `text`, `ocr_engine`, `moments` and `moment_context` options."""
        self.last_build = build_index(self, source, out, features=features_dir, update=update, window=window,
                                      stride=stride, store=store, collection=collection, lock_timeout=lock_timeout,
                                      progress=progress, **channels)
        return self.last_build.index

    def search(self, query: str | Sequence[str], index: Any, k: int = 10, where: str | None = None,
               shortlist: int | None = None) -> Any:
        """Top-k hits by what is shown for one query (a list of lists for several), in an index store or
        an index folder (opened with `videotext.open_index`, this model as its query side)."""
        if isinstance(index, (str, os.PathLike)):
            opened = open_index(Path(index), searcher=self)
            if isinstance(query, str):
                return opened.search(query, k=k, by="shown", where=where)
            index = opened.index
        return super().search(query, index, k=k, where=where, shortlist=shortlist)

    def search_like(self, example: Any = None, index: Any = None, k: int = 10, like_id: str | None = None,
                    where: str | None = None) -> list:
        """The k entries of an index folder (or store) most like an example file or the indexed entry
        `like_id`: `SearchableIndex.like` with this model."""
        if isinstance(index, (str, os.PathLike)):
            opened = open_index(Path(index), searcher=self)
        else:
            opened = _in_memory(index, self)
        return opened.like(example, k=k, where=where, id=like_id)


def _in_memory(index: Any, model: LoadedModel) -> Any:
    """A store held in memory, searchable like an opened folder with `model` as its query side."""
    return SearchableIndex(Path("."), index, {}, "memory", searcher=model)


def load_model(run_dir: str | os.PathLike, checkpoint: str = "best", device: str = "auto",
               precision: str | None = None, threads: int | None = None) -> LoadedModel:
    """Load a run's method with the weights of `checkpoints/<checkpoint>` (best = validation-selected).

    `run_dir` is a run folder, or a run shared on the hub, `hf-hub:ORG/NAME[@REVISION]` (downloaded
    once into the hub cache and checked: `videotext.hub_runs`). `precision` (auto | fp32 | bf16) and
    `threads` (0 = physical cores) default to the run config's `inference` section (videotext.runtime)."""
    model = load_run(run_dir, checkpoint, device, precision, threads, cls=LoadedModel)
    assert isinstance(model, LoadedModel)  # load_run builds `cls`
    return model
