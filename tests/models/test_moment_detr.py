"""`moment_detr`: it learns spans, trains and is selected in the one trainer, and refuses what it is not."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.moment_data import event_store, moment_manifest
from videotext.config import load_config
from videotext.data.run_data import RunData
from videotext.errors import VideoTextError
from videotext.eval.moments import iou_matrix
from videotext.losses.moment_detr import negative_pair_hinge
from videotext.models import METHODS, build_method
from videotext.train.trainer import Trainer

SMALL = ["data.experts=[events,noise]", "model.hidden_dim=32", "model.heads=2", "model.ff_dim=64",
         "model.num_queries=5", "model.window_steps=40", "model.input_dropout=0.0", "model.dropout=0.0",
         "train.threads=1"]


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread, as `train.threads=1` gives the trainer: on a shared 2-core machine two threads
    spin against other processes (the fitting test below took 538 s at 2 threads under load, 4 s at 1)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def moments(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("moments")
    manifest = moment_manifest(root, {"train": 4, "val": 2, "test": 2}, minutes=(1.0, 2.0))
    event_store(manifest, root / "features")
    return root


def small_config(root: Path, *extra: str):
    return load_config("moment_detr/synthetic", [f"data.manifest={root / 'manifest.json'}",
                                                 f"data.features={root / 'features'}", *SMALL, *extra])


def test_registered_as_a_moment_method_with_both_packaged_configs(moments):
    assert METHODS["moment_detr"].task == "moments" and METHODS["moment_detr"].protocol == "moments"
    qvh = load_config("moment_detr/qvhighlights")
    assert (qvh.model["window_steps"], qvh.train.epochs, qvh.optim.lr, qvh.train.select_metric) == (
        75, 200, 1e-4, "moments.mAP")
    config = small_config(moments)
    method = build_method(config.method, config.model, expert_dims=RunData(config).read_features.dims)
    for refused in (method.encode_text, method.encode_video, method.similarity, method.index_vectors):
        with pytest.raises(VideoTextError, match="no video or text embedding"):
            refused({})


def test_fits_one_batch_of_windows(moments):
    """With its set loss alone the head learns a batch: each window's best span on its moment, and no
    confident span where there is none."""
    config = small_config(moments, "model.positive_window_odds=0.7")
    data = RunData(config)
    torch.manual_seed(0)
    method = build_method(config.method, config.model, expert_dims=data.read_features.dims)
    batch = method.train_batches(data.split("train"), data.read_features, 8, seed=0).batch(0, 0)
    assert any(len(t) == 0 for t in batch["targets"]) and any(len(t) for t in batch["targets"])
    optimizer = torch.optim.AdamW([p for p in method.parameters() if p.requires_grad], lr=3e-3)
    losses = []
    for _ in range(300):
        loss = method.loss(batch)["loss"]
        losses.append(float(loss.detach()))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert losses[-1] < losses[0] / 10
    method.eval()
    spans, scores, _ = method.predict_windows(batch)
    best_ious = []
    for row, target in enumerate(batch["targets"]):
        best = int(scores[row].argmax())
        if len(target):  # the most confident span lies on a moment of the window
            best_ious.append(float(iou_matrix(spans[row, best : best + 1].numpy(), target.numpy()).max()))
            assert scores[row, best] > 0.5
        else:  # no moment here: nothing confident
            assert scores[row].max() < 0.5
    assert min(best_ious) > 0.3 and np.mean(best_ious) > 0.7, best_ious


def test_trains_selects_on_validation_and_tests_once(moments, tmp_path):
    config = small_config(moments, "train.epochs=2", "train.batch_size=4", "train.eval_every=1", "optim.lr=0.001",
                          "schedule.warmup_steps=2")  # the packaged warm-up is longer than these 6 steps
    config.out_dir = str(tmp_path / "run")
    result = Trainer(config, progress=False).fit()
    assert result["split"] == "test" and set(result["moments"]) >= {"R1@0.5", "R1@0.7", "R5@0.5", "mIoU", "mAP"}
    expected = len(RunData(config).split("test").moment_queries())
    assert 0 <= result["moments"]["mAP"] <= 100 and result["n_queries"] == expected > 0
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    val = [line for line in lines if line["kind"] == "val"]
    assert len(val) == 2 and all("mAP" in line["moments"] for line in val)
    assert [line for line in lines if line["kind"] == "train"][0]["giou"] > 0
    assert (tmp_path / "run" / "checkpoints" / "best").is_dir()
    assert json.loads((tmp_path / "run" / "test_metrics.json").read_text())["moments"] == result["moments"]


def test_negative_pairs_read_the_windows_with_the_previous_windows_queries(moments):
    """The mismatched pairs are the batch's queries rolled by one; a window whose rolled query is the
    same text is left out; the term joins the loss only when asked for."""
    config = small_config(moments, "model.negative_pair_weight=1.0")
    data = RunData(config)
    torch.manual_seed(0)
    method = build_method(config.method, config.model, expert_dims=data.read_features.dims)
    batch = method.train_batches(data.split("train"), data.read_features, 4, seed=0).batch(0, 0)
    batch["text"] = method.prepare_text(["a red circle", "a blue star", "a blue star", "a red circle"])
    rolled, paired = method.mismatched_texts(batch)
    assert rolled["texts"] == ["a red circle", "a red circle", "a blue star", "a blue star"]
    assert paired.tolist() == [False, True, False, True]
    assert torch.equal(rolled["input_ids"][1], batch["text"]["input_ids"][0])
    method.eval()  # no dropout: the own-query saliency of the loss is the one `encode` gives
    torch.manual_seed(1)  # the saliency hinge draws its pairs
    losses = method.loss(batch)
    own, other = method.encode(batch)[3], method.encode(batch, rolled)[3]
    assert not torch.allclose(own, other)  # the saliency reads the query
    expected = negative_pair_hinge(own, other, batch["saliency"], batch["mask"], 0.2, paired)
    assert losses["negative_pair"].item() == pytest.approx(expected.item(), abs=1e-6)
    with_term = losses["loss"].item() - losses["negative_pair"].item()
    off = build_method(config.method, {**config.model, "negative_pair_weight": 0.0}, expert_dims=data.read_features.dims)
    off.load_state_dict(method.state_dict())
    off.eval()
    torch.manual_seed(1)
    without = off.loss(batch)
    assert "negative_pair" not in without and without["loss"].item() == pytest.approx(with_term, abs=1e-5)
