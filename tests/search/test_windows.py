"""A window clip's features (`search.windows`): the steps of its video in [start, end), read alone
through `ClipStore`, whichever reader asks, MMT's (which takes the reader's store) included."""
from __future__ import annotations

import numpy as np

from videotext.data.features import FeatureStore
from videotext.data.loaders import VideoFeatures
from videotext.data.mmt_features import MMTFeatures
from videotext.search.windows import WindowFeatures


def test_a_clip_reads_its_own_steps_through_any_reader(tmp_path):
    store = FeatureStore(tmp_path)
    values = np.arange(30, dtype=np.float32).reshape(10, 3)  # step t holds [3t, 3t + 1, 3t + 2]
    with store.writer("appearance", 3, dtype="float32") as writer:
        writer.add("v", values, np.arange(10.0), step=1.0)
    windows = {"v@2-5": ("v", 2.0, 5.0), "v@9.5-12": ("v", 9.5, 12.0)}
    reader = WindowFeatures(VideoFeatures(store, ["appearance"], max_steps=30), windows)
    np.testing.assert_array_equal(reader("v@2-5")["appearance"], values[2:5])
    np.testing.assert_array_equal(reader("v@9.5-12")["appearance"], values[9:10])  # the step covering its start
    np.testing.assert_array_equal(reader("v")["appearance"], values)  # a video key is the base store's
    clip = MMTFeatures.wrap(reader)("v@2-5")  # MMT reads the reader's store: the clip, with its times
    np.testing.assert_array_equal(clip["features"]["appearance"], values[2:5])
    np.testing.assert_array_equal(clip["times"]["appearance"], [2.0, 3.0, 4.0])
    np.testing.assert_array_equal(clip["mean"]["appearance"], values[2:5].mean(0))
    assert reader.store.has("appearance", "v@2-5") and not reader.store.is_missing("appearance", "v@2-5")
    np.testing.assert_array_equal(reader.store.timestamps("appearance", "v@9.5-12"), [9.0])
    capped = WindowFeatures(VideoFeatures(store, ["appearance"], max_steps=2), windows)
    assert len(capped("v@2-5")["appearance"]) == 2  # capped like a whole video
