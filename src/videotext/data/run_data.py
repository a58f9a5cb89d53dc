"""The data of a run: its dataset (with the configured text unit) and its feature reader.

Built from a run's config alone, so training, evaluation, indexing and the analysis tools
read exactly the captions and features the run was trained on.
"""
from __future__ import annotations

from pathlib import Path

from videotext.config import RunConfig
from videotext.data.features import FeatureStore
from videotext.data.loaders import VideoFeatures
from videotext.data.narration import SpanStore, text_dataset
from videotext.data.schema import VideoTextDataset
from videotext.errors import VideoTextError


class RunData:
    """The dataset, feature store and feature reader of a run (shared by train / eval / index)."""

    def __init__(self, config: RunConfig):
        data = config.data
        if not data.manifest:
            raise VideoTextError("data.manifest: no manifest given (set data.manifest in the config)")
        self.dataset = text_dataset(VideoTextDataset.load(data.manifest), data.text, data.narration)  # captions | paragraph | narration
        self.store, self.read_features = None, None
        if not data.experts:  # methods on pixels (Frozen in Time) read no feature store
            return
        features = data.features or str(Path(data.manifest).parent / "features")
        self.store = SpanStore(FeatureStore(features))  # keys may name a time span (narration clips)
        missing = [e for e in data.experts if e not in self.store.experts]
        if missing:
            raise VideoTextError(
                f"{features}: no features for expert(s) {missing} (have {self.store.experts}); "
                f"run `videotext extract {data.manifest} -o {features} --experts {','.join(data.experts)}`"
            )
        self.read_features = VideoFeatures(self.store, data.experts, data.max_steps_per_expert,
                                           cache_mb=data.feature_cache_mb)

    def split(self, name: str) -> VideoTextDataset:
        return self.dataset.split(name)
