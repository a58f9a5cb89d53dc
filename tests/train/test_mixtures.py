"""Dataset mixtures: alternating and weighted batches, pure in (seed, epoch, index), and in the trainer."""
from __future__ import annotations

from collections import Counter

import pytest

from tests.conftest import tiny_config_overrides
from videotext.config import PACKAGED, load_config
from videotext.data.mixtures import MixtureBatches
from videotext.errors import VideoTextError
from videotext.train.trainer import Trainer

CONFIG = PACKAGED / "dual" / "synthetic.yaml"


class Source:
    """A fake source: batch (epoch, index) → its name, epoch and index."""

    def __init__(self, name: str, length: int):
        self.name, self.length = name, length

    def __len__(self) -> int:
        return self.length

    def batch(self, epoch: int, index: int) -> tuple[str, int, int]:
        assert 0 <= index < self.length
        return (self.name, epoch, index)


def test_alternate_is_round_robin_then_the_longer_sources():
    mix = MixtureBatches([Source("a", 3), Source("b", 1), Source("c", 2)], "alternate")
    assert len(mix) == 6
    assert [mix.locate(i) for i in range(6)] == [(0, 0), (1, 0), (2, 0), (0, 1), (2, 1), (0, 2)]
    assert mix.batch(4, 4) == ("c", 4, 1)


def test_weighted_shares_follow_weights_and_are_pure():
    mix = MixtureBatches([Source("a", 10), Source("b", 4)], "weighted", weights=[1, 3], seed=5)
    plan = [mix.locate(i, epoch=2) for i in range(len(mix))]
    counts = Counter(which for which, _ in plan)
    assert counts == {0: 4, 1: 10}  # 14 batches split 1 : 3 → 3.5 / 10.5 → 4 / 10 (largest remainder, ties to the first)
    # source b is asked for 10 batches but has 4: its indices run 0..3 and start again
    assert [i for w, i in plan if w == 1] == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    again = MixtureBatches([Source("a", 10), Source("b", 4)], "weighted", weights=[1, 3], seed=5)
    assert [again.batch(2, i) for i in range(14)] == [mix.batch(2, i) for i in range(14)]  # pure (resume)
    other_epoch = [mix.locate(i, epoch=3) for i in range(14)]
    assert other_epoch != plan and Counter(w for w, _ in other_epoch) == counts
    with pytest.raises(VideoTextError, match="mixture_mode"):
        MixtureBatches([Source("a", 1)], "zip")
    with pytest.raises(VideoTextError, match="weights"):
        MixtureBatches([Source("a", 1)], "weighted", weights=[0])


@pytest.mark.heavy
def test_trainer_runs_a_mixture_with_per_dataset_batch_sizes(tiny_synth, tmp_path):
    config = load_config(CONFIG, tiny_config_overrides(tiny_synth) + [
        "train.epochs=1", "data.mixture_mode=alternate",
        f"data.mixture=[{{manifest: {tiny_synth / 'manifest.json'}, split: val, batch_size: 2}}]"])
    trainer = Trainer(config, tmp_path / "run", progress=False)
    trainer.build()
    batches = trainer.batches
    assert isinstance(batches, MixtureBatches)
    main, extra = batches.sources
    train_ids = set(trainer.data.split("train").videos)
    val_ids = set(trainer.data.split("val").videos)
    assert len(main) == len(train_ids) // 8 and len(extra) == len(val_ids) // 2
    first, second = batches.batch(0, 0), batches.batch(0, 1)
    assert len(first["video_ids"]) == 8 and set(first["video_ids"]) <= train_ids
    assert len(second["video_ids"]) == 2 and set(second["video_ids"]) <= val_ids
    result = Trainer(config, tmp_path / "fit", progress=False).fit()
    assert result["t2v"]["R1"] >= 0
