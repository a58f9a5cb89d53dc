"""Training batches made ahead on a thread (on a GPU, while the step runs): the same batches, in order."""
from __future__ import annotations

import time

import pytest
import torch

from videotext.runtime import pin_batch, to_device
from videotext.train.trainer import BatchPrefetcher


class Batches:
    """Batch i of epoch e holds e·100 + i; batch `broken` raises; each takes a little while."""

    def __init__(self, broken: int | None = None):
        self.broken, self.made = broken, []

    def batch(self, epoch: int, index: int) -> dict:
        time.sleep(0.002)
        if index == self.broken:
            raise ValueError(f"batch {index} is broken")
        self.made.append(index)
        return {"x": torch.full((2,), float(epoch * 100 + index)), "nested": {"y": torch.ones(1)}, "ids": [index]}


@pytest.mark.parametrize("depth", [0, 2])
def test_prefetched_batches_are_those_asked_for_in_order(depth):
    ahead = BatchPrefetcher(Batches(), epoch=3, start=4, end=9, depth=depth)
    got = [float(ahead.next(i)["x"][0]) for i in range(4, 9)]
    ahead.close()
    assert got == [304.0, 305.0, 306.0, 307.0, 308.0]


def test_an_error_reaches_the_training_thread_and_an_early_stop_ends_the_thread():
    ahead = BatchPrefetcher(Batches(broken=2), epoch=0, start=0, end=5, depth=2)
    assert ahead.next(0)["ids"] == [0] and ahead.next(1)["ids"] == [1]
    with pytest.raises(ValueError, match="batch 2 is broken"):
        ahead.next(2)
    ahead.close()
    source = Batches()
    stopped = BatchPrefetcher(source, epoch=0, start=0, end=1000, depth=2)
    stopped.next(0)
    stopped.close()  # a run stopped mid-epoch: the thread ends, having made at most depth + 2 batches
    assert not stopped.thread.is_alive() and len(source.made) <= 4


def test_pinning_and_non_blocking_copies_keep_the_values():
    batch = {"x": torch.arange(4.0), "nested": {"y": torch.ones(2, dtype=torch.int64)}, "texts": ["a"]}
    pinned = pin_batch(batch)
    assert pinned["x"].is_pinned() == torch.cuda.is_available()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    moved = to_device(pinned, device, non_blocking=True)
    if device == "cuda":
        torch.cuda.synchronize()
    assert moved["x"].tolist() == [0.0, 1.0, 2.0, 3.0] and moved["nested"]["y"].tolist() == [1, 1]
    assert moved["texts"] == ["a"]


@pytest.mark.heavy
def test_training_with_batches_made_ahead_ends_with_the_same_weights(tiny_synth, tmp_path):
    from safetensors.torch import load_file

    from tests.conftest import tiny_config_overrides
    from videotext.config import PACKAGED, load_config
    from videotext.train.trainer import Trainer

    def run(name: str, depth: int) -> dict:
        config = load_config(PACKAGED / "dual" / "synthetic.yaml", tiny_config_overrides(tiny_synth) + ["train.epochs=2"])
        trainer = Trainer(config, tmp_path / name, progress=False)
        trainer.prefetch_batches = depth  # 2 on a GPU; forced here on the CPU
        trainer.fit()
        return load_file(str(tmp_path / name / "checkpoints" / "last" / "model.safetensors"))

    plain, ahead = run("plain", 0), run("ahead", 2)
    assert all(torch.equal(plain[k], ahead[k]) for k in plain)
