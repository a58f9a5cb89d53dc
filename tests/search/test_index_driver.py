"""The index-building driver (`videotext.search.build.build_index`) uses a model only through
`IndexModel` and a store only through `IndexStore`: a hand-made model with none of
`LoadedModel`'s other attributes builds and updates an index, on FAISS and on Milvus Lite."""
from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import torch

from videotext.data.features import FeatureStore
from videotext.data.loaders import VideoFeatures
from videotext.data.schema import VideoTextDataset
from videotext.search.build import build_index
from videotext.search.entries import Entry, IndexStore
from videotext.search.index import Index, open_store
from videotext.search.milvus import MilvusIndex


class MeanAppearance:
    """An `IndexModel` and nothing more: a video's vector is the mean of its appearance steps."""

    experts = ["appearance"]
    method_name = "mean-appearance"

    def __init__(self, run_dir, features):
        self.run_dir, self.features, self.encoded = run_dir, features, []

    def features_for(self, dataset, features_dir, progress=True, whole_videos=False):
        return VideoFeatures(FeatureStore(self.features), self.experts, max_steps=1000)

    def video_embedding(self, dataset, features):
        self.encoded += [v.id for v in dataset]
        return torch.stack([torch.from_numpy(features(v.key)["appearance"]).float().mean(0) for v in dataset])

    def index_vectors(self, embedding):
        return embedding.numpy()

    def index_parts(self, embedding):
        return None


def expected_vectors(features, dataset, ids):
    """What the index must hold: each video's mean appearance step, L2-normalised, by hand."""
    store = FeatureStore(features)
    means = np.stack([store.get("appearance", dataset[i].key)[0].astype(np.float64).mean(0) for i in ids])
    return means / np.linalg.norm(means, axis=1, keepdims=True)


@pytest.mark.parametrize("store", ["faiss", "milvus"])
def test_a_model_with_only_the_protocol_builds_and_updates_an_index(tiny_synth, tmp_path, store):
    dataset = VideoTextDataset.load(tiny_synth / "manifest.json")
    ids = [v.id for v in dataset]
    model = MeanAppearance(tmp_path / "run", tiny_synth / "features")
    where = "faiss" if store == "faiss" else f"milvus:{tmp_path / 'v.db'}"
    out = tmp_path / "index"
    index, build = build_index(model, dataset.subset(ids[:6]), out, features_dir=tiny_synth / "features",
                               progress=False, store=where)
    assert build.plan.add == ids[:6] and not build.concurrent and model.encoded == ids[:6]
    assert isinstance(index, IndexStore) and index.model == "mean-appearance"
    assert index.meta["run_dir"] == str((tmp_path / "run").resolve())
    np.testing.assert_allclose(index.embeddings_for(ids[:6]), expected_vectors(tiny_synth / "features", dataset,
                                                                               ids[:6]), atol=1e-6)

    model.encoded = []
    updated, build = build_index(model, dataset.subset(ids[3:9]), out, features_dir=tiny_synth / "features",
                                 progress=False, update=True, store=where)
    assert model.encoded == ids[6:9]  # only the new videos are encoded
    assert build.plan.remove == ids[:3] and sorted(build.plan.keep) == sorted(ids[3:6])
    reopened = open_store(out)
    assert sorted(reopened.ids) == sorted(ids[3:9]) and "pending" not in reopened.meta
    np.testing.assert_allclose(reopened.embeddings_for(ids[3:9]),
                               expected_vectors(tiny_synth / "features", dataset, ids[3:9]), atol=1e-6)


def test_the_stores_differ_only_behind_the_same_calls(tmp_path):
    """FAISS writes nothing before `save` and has nothing to publish; Milvus writes a new version of
    the collection, which `publish` puts behind the alias, and a Milvus index pickles as a connection."""
    vectors = np.eye(4, dtype=np.float32)[:2]
    faiss_index = Index(4, model="m")
    faiss_index.begin_writing(tmp_path / "faiss")
    faiss_index.publish()
    assert not (tmp_path / "faiss").exists() and faiss_index.describe() == {"store": "faiss", "kind": "auto"}
    assert (faiss_index.concurrent_inserts, faiss_index.multi_process) == (False, True)

    milvus = MilvusIndex(f"milvus:{tmp_path / 'm.db'}", 4, model="m", collection="c")
    milvus.add(vectors, [Entry("a"), Entry("b")])
    milvus.save(tmp_path / "milvus")
    update = Index.load(tmp_path / "milvus")
    update.begin_writing(tmp_path / "milvus")  # an update: a copy of the served version
    assert update.describe() == {"store": "milvus", "alias": "c", "collection": "c__v2"} and update.target() == "c__v1"
    assert json.loads((tmp_path / "milvus" / "index.json").read_text())["version"] == "c__v1"
    assert (milvus.concurrent_inserts, milvus.multi_process) == (False, False)  # Milvus Lite: one process
    copy = pickle.loads(pickle.dumps(update))
    assert copy is not update and copy.collection == "c__v2" and copy.writable and sorted(copy.ids) == ["a", "b"]
    np.testing.assert_allclose(copy.embeddings_for(["b"]), vectors[1:], atol=1e-6)
    copy.close()
    milvus.close()
