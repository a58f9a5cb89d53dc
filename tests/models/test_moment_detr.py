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
from videotext.config import ConfigError
from videotext.errors import VideoTextError
from videotext.apps.runs import evaluate
from videotext.eval.moment_eval import predict_moments
from videotext.eval.moments import iou_matrix, moment_metrics
from videotext.eval.span_finder import SpanSettings, find_spans
from videotext.losses.moment_detr import negative_pair_hinge
from videotext.models import METHODS, build_method
from videotext.models.moment_detr import SALIENCY_SPANS
from videotext.run_model import load_run
from videotext.train.checkpoint import save_checkpoint
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
    # the same run read by its saliency (`videotext eval RUN --decode saliency`): the span finder over the
    # saliency `predict_moments` averages, scored by the one metric; the run's own decoding is unchanged
    own, _ = evaluate(tmp_path / "run", "test", report=False, threads=1)
    assert own["moments"] == result["moments"] and own["decode"] == "spans"
    read, _ = evaluate(tmp_path / "run", "test", report=False, threads=1, decode="saliency")
    method = load_run(tmp_path / "run", threads=1).method
    test = RunData(config).split("test")
    _, saliency, steps = predict_moments(method, test, RunData(config).read_features)
    expected = {}
    for q in test.moment_queries():
        starts = np.arange(len(saliency[q.qid]), dtype=np.float32) * np.float32(steps[q.qid])
        found = find_spans(saliency[q.qid].astype(np.float32), starts, starts + np.float32(steps[q.qid]), k=10,
                           settings=SpanSettings(**SALIENCY_SPANS))
        expected[q.qid] = [(s.start, s.end, s.score) for s in found]
    composed = moment_metrics(expected, {q.qid: q.spans for q in test.moment_queries()})
    assert read["decode"] == "saliency" and read["moments"] == {k: v for k, v in composed.items() if k != "n_queries"}
    assert read["moments"] != own["moments"]  # another decoding of the same weights
    assert json.loads((tmp_path / "run" / "eval_test_best_saliency.json").read_text())["moments"] == read["moments"]
    with pytest.raises(ConfigError, match="model.decode must be one of spans, saliency"):
        build_method("moment_detr", {**config.model, "decode": "best"}, expert_dims=RunData(config).read_features.dims)


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


GUIDE = {"embed_dim": 16, "freeze_text": True, "dropout": 0.0}


def guided(root: Path, *extra: str):
    config = small_config(root, "model.guide_method=dual", *extra)
    config.model["guide_model"] = dict(GUIDE)
    return config


def test_the_guide_reads_each_step_as_a_clip_and_the_query_as_one_more_token(moments):
    """The guide's step vector is its own encoding of the `guide_context` real steps centred on the step
    (cut at the window's ends, 0 on padding); its query vector is its text encoding; both and their
    cosine change the head's inputs, and the rolled queries carry the guide's tokens along."""
    config = guided(moments, "model.guide_context=3")
    data = RunData(config)
    torch.manual_seed(0)
    method = build_method(config.method, config.model, expert_dims=data.read_features.dims)
    batch = method.train_batches(data.split("train"), data.read_features, 4, seed=0).batch(0, 0)
    dual = method.guide
    method.train()
    assert dual is not None and not dual.training and not any(p.requires_grad for p in dual.parameters())
    steps, query = method.guide_vectors(batch, batch["text"])
    mask = batch["mask"]
    assert steps.shape == (*mask.shape, 16) and query.shape == (4, 16)
    row = 0
    real = int(mask[row].sum())
    for k in (0, 5, real - 1):
        lo, hi = max(0, k - 1), min(real, k + 2)
        clip = {"features": {e: batch["features"][e][row : row + 1, lo:hi] for e in method.experts},
                "masks": {e: torch.ones(1, hi - lo, dtype=torch.bool) for e in method.experts}}
        expected = torch.nn.functional.normalize(dual.encode_video(clip), dim=-1)[0]
        torch.testing.assert_close(steps[row, k], expected, atol=1e-5, rtol=0)
    if real < mask.shape[1]:
        assert float(steps[row, real:].abs().max()) == 0.0
    texts = batch["text"]["texts"]
    torch.testing.assert_close(query, dual.encode_text(dual.prepare_text(texts)), atol=1e-5, rtol=0)
    rolled, _ = method.mismatched_texts(batch)
    assert torch.equal(rolled["guide"]["input_ids"][1], batch["text"]["guide"]["input_ids"][0])
    inputs = method.video_inputs_of(batch, (steps, query))
    cosine = (steps * query[:, None]).sum(-1)
    torch.testing.assert_close(inputs[..., -3], cosine)  # before the two temporal endpoints
    with pytest.raises(ConfigError, match="model.guide_context must be an odd"):
        build_method(config.method, {**config.model, "guide_context": 2}, expert_dims=data.read_features.dims)


def test_a_guided_head_takes_a_runs_weights_into_its_guide_and_keeps_them(moments, tmp_path):
    config = guided(moments)
    data = RunData(config)
    torch.manual_seed(3)
    dual = build_method("dual", dict(GUIDE), expert_dims=data.read_features.dims)
    save_checkpoint(tmp_path / "dual" / "checkpoints" / "best", dual, {"method": "dual"})
    config = guided(moments, f"train.init_from={tmp_path / 'dual'}", "train.init_into=guide", "train.freeze=[guide]",
                    "train.epochs=1", "train.batch_size=4", "schedule.warmup_steps=1")
    config.model["guide_model"] = dict(GUIDE)
    config.out_dir = str(tmp_path / "run")
    trainer = Trainer(config, progress=False)
    trainer.fit()
    report = json.loads((tmp_path / "run" / "init_report.json").read_text())
    assert report["counts"]["loaded"] == len(dual.state_dict()) and report["counts"]["skipped_shape"] == 0
    assert all(name.startswith("guide.") for name in report["loaded"])
    for name, value in dual.state_dict().items():  # trained, the head left its guide as loaded
        torch.testing.assert_close(trainer.method.guide.state_dict()[name], value, rtol=0, atol=0)


def test_the_packaged_guided_config_holds_the_demos_dual_run():
    """moment_detr/synthetic_guided is moment_detr/synthetic plus a guide shaped as dual/synthetic's model,
    loaded into `guide` and frozen: the settings bench/moments.py passes for its guided row."""
    guided_config, plain = load_config("moment_detr/synthetic_guided"), load_config("moment_detr/synthetic")
    dual = load_config("dual/synthetic")
    assert {k: v for k, v in guided_config.model.items() if not k.startswith("guide_")} == plain.model
    assert guided_config.model["guide_method"] == "dual" and guided_config.model["guide_context"] == 3
    assert guided_config.model["guide_model"] == dual.model
    assert (guided_config.train.init_into, guided_config.train.freeze) == ("guide", ["guide"])


def test_the_negative_pairs_reuse_the_guides_vectors(moments):
    """The loss reads the guide once: the rolled queries' pass reuses the windows' step vectors and rolls
    the query vectors, which equal the guide's encoding of the rolled texts."""
    config = guided(moments, "model.negative_pair_weight=1.0")
    data = RunData(config)
    torch.manual_seed(0)
    method = build_method(config.method, config.model, expert_dims=data.read_features.dims)
    batch = method.train_batches(data.split("train"), data.read_features, 4, seed=0).batch(0, 0)
    method.eval()
    steps, query = method.guide_vectors(batch, batch["text"])
    rolled, _ = method.mismatched_texts(batch)
    again = method.guide_vectors(batch, rolled)
    torch.testing.assert_close(again[1], query.roll(1, 0), atol=1e-5, rtol=0)
    torch.testing.assert_close(method.encode(batch, rolled, (steps, query.roll(1, 0)))[3], method.encode(batch, rolled)[3],
                               atol=1e-5, rtol=0)
    calls = []
    original = method.guide_vectors
    method.guide_vectors = lambda *args: calls.append(1) or original(*args)
    method.loss(batch)
    assert len(calls) == 1
