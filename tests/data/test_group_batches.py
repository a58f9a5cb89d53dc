"""`train.group_batches`: videos sharing meta["group"] are batched together (hard negatives)."""
from __future__ import annotations

import pytest

from videotext.config import load_config
from videotext.data.loaders import SeededBatches
from videotext.data.mixtures import training_batches
from videotext.errors import VideoTextError
from videotext.data.run_data import RunData
from tests.conftest import tiny_config_overrides
from tests.train.test_trainer import CONFIG


def test_grouped_order_is_a_permutation_with_groups_contiguous_and_seeded():
    keys = ["a", None, "b", "a", None, "b", "a", None]  # groups a = {0, 3, 6}, b = {2, 5}
    batches = SeededBatches(len(keys), batch_size=4, seed=3)
    plain = [batches.order(e) for e in range(5)]
    batches.group_by(keys)
    for epoch in range(5):
        order = batches.order(epoch)
        assert sorted(order) == list(range(8))
        for group in ({0, 3, 6}, {2, 5}):
            where = sorted(order.index(i) for i in group)
            assert where == list(range(where[0], where[0] + len(group)))  # adjacent
        first = [i for i in plain[epoch] if keys[i] is None or plain[epoch].index(i) == min(
            plain[epoch].index(j) for j in range(8) if keys[j] == keys[i])]
        assert [i for i in order if i in first] == first  # units keep the plain permutation's order
    assert batches.order(2) == batches.order(2) and batches.order(1) != batches.order(2)
    with pytest.raises(ValueError, match="3 keys for 8 items"):
        batches.group_by(["a", "b", "c"])


def test_group_batches_puts_the_synthetic_groups_in_one_batch(tiny_synth):
    config = load_config(CONFIG, tiny_config_overrides(tiny_synth) + ["train.group_batches=true"])
    data = RunData(config)
    train_set = data.split("train")
    from videotext.models import build_method

    method = build_method(config.method, config.model, expert_dims=data.read_features.dims)
    batches = training_batches(method, data, config, train_set)
    groups = [train_set[v].meta.get("group") for v in batches.video_ids]
    grouped = {g for g in groups if g is not None and groups.count(g) > 1}
    assert grouped, "the tiny fixture has distractor groups in its train split"
    order = batches.order(0)
    for g in grouped:
        where = sorted(order.index(i) for i, key in enumerate(groups) if key == g)
        assert where[-1] - where[0] == len(where) - 1


def test_group_batches_needs_one_row_per_video(tiny_synth):
    config = load_config(CONFIG, tiny_config_overrides(tiny_synth) + ["train.group_batches=true"])

    class NoVideos:
        def __len__(self):
            return 1

    class Method:
        video_inputs = "features"

        def train_batches(self, *args):
            return NoVideos()

    data = RunData(config)
    with pytest.raises(VideoTextError, match="train.group_batches"):
        training_batches(Method(), data, config, data.split("train"))
