"""The one training loop: exact resume, honest model selection, divergence stops."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import tiny_config_overrides
from videotext.config import PACKAGED, load_config
from videotext.train.trainer import Trainer, TrainingDiverged, read_metrics_log

pytestmark = pytest.mark.heavy  # trains, builds indexes or starts processes and servers: `make test-quick` leaves it out

CONFIG = PACKAGED / "dual" / "synthetic.yaml"


def make_config(root: Path, *extra: str):
    return load_config(CONFIG, tiny_config_overrides(root) + list(extra))


def weights(run_dir: Path, name: str = "last") -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "checkpoints" / name / "model.safetensors"))


def test_resume_mid_epoch_reproduces_uninterrupted_run(tiny_synth, tmp_path):
    config = make_config(tiny_synth, "train.checkpoint_every=2")
    full = Trainer(config, tmp_path / "full", progress=False).fit()

    # killed after step 5: the last checkpoint is from step 4, in the middle of epoch 2
    stopped = Trainer(config, tmp_path / "resumed", progress=False, stop_after_steps=5).fit()
    assert stopped == {"stopped_at_step": 5}
    meta = json.loads((tmp_path / "resumed/checkpoints/last/meta.json").read_text())
    assert meta["step"] == 4
    resumed = Trainer(config, tmp_path / "resumed", resume=True, progress=False).fit()

    a, b = weights(tmp_path / "full"), weights(tmp_path / "resumed")
    assert a.keys() == b.keys()
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert worst <= 1e-6, worst
    for direction in ("t2v", "v2t"):
        for metric in ("R1", "R5", "MdR", "MnR"):
            assert resumed[direction][metric] == pytest.approx(full[direction][metric], abs=1e-6)
    # the resumed log reads like the uninterrupted one: same steps, no duplicates
    steps = lambda run: [(e["kind"], e["step"]) for e in read_metrics_log(run)]  # noqa: E731
    assert steps(tmp_path / "resumed") == steps(tmp_path / "full")
    # training seconds are logged, grow with every step, and carry over the resume (the checkpoint
    # at step 4 holds the clock; steps 5+ of the resumed run continue from it)
    for run in ("full", "resumed"):
        clock = [(e["train_s"], e["train_cpu_s"]) for e in read_metrics_log(tmp_path / run) if e["kind"] == "train"]
        assert len(clock) >= 3 and clock[0][0] > 0 and clock[0][1] > 0
        assert all(b[0] >= a[0] and b[1] >= a[1] for a, b in zip(clock, clock[1:]))
    val = [e for e in read_metrics_log(tmp_path / "resumed") if e["kind"] == "val"]
    assert all("train_s" in e for e in val) and val[-1]["train_s"] > val[0]["train_s"]


def test_selection_uses_validation_and_test_runs_once(tiny_synth, tmp_path):
    result = Trainer(make_config(tiny_synth), tmp_path / "run", progress=False).fit()
    log = read_metrics_log(tmp_path / "run")
    vals = [e for e in log if e["kind"] == "val"]
    tests = [e for e in log if e["kind"] == "test"]
    assert len(vals) == 3 and len(tests) == 1  # one validation per epoch, test once at the end
    best = max(vals, key=lambda e: e["t2v"]["geometric_mean"])
    assert best["selected"] and result["best_step"] == best["step"]
    # the best checkpoint is the one selected on validation, and test used it
    meta = json.loads((tmp_path / "run/checkpoints/best/meta.json").read_text())
    assert meta["step"] == best["step"]
    assert meta["val"]["t2v"]["geometric_mean"] == pytest.approx(best["t2v"]["geometric_mean"])
    saved = json.loads((tmp_path / "run/test_metrics.json").read_text())
    assert saved["split"] == "test" and saved["n_videos"] == 3  # 32 videos split 26 / 3 / 3
    assert saved["t2v"]["n_queries"] == 18  # 6 captions per test video
    # training and validation never saw a test video
    from videotext.data.schema import VideoTextDataset

    dataset = VideoTextDataset.load(tiny_synth / "manifest.json")
    assert not set(dataset.splits["test"]) & (set(dataset.splits["train"]) | set(dataset.splits["val"]))


def test_training_lowers_the_loss(tiny_synth, tmp_path):
    Trainer(make_config(tiny_synth, "train.epochs=6"), tmp_path / "run", progress=False).fit()
    losses = [e["loss"] for e in read_metrics_log(tmp_path / "run") if e["kind"] == "train"]
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert last < 0.8 * first, (first, last)


def test_nan_loss_stops_with_the_step_and_keeps_checkpoints_clean(tiny_synth, tmp_path):
    trainer = Trainer(make_config(tiny_synth, "train.checkpoint_every=1"), tmp_path / "run", progress=False)
    trainer.build()
    original = trainer.method.loss
    calls = {"n": 0}

    def loss_that_diverges(batch):
        calls["n"] += 1
        out = original(batch)
        if calls["n"] == 3:
            out["loss"] = out["loss"] * float("nan")
        return out

    trainer.build = lambda: None  # keep the patched method
    trainer.method.loss = loss_that_diverges
    with pytest.raises(TrainingDiverged, match=r"step 3 \(epoch 1\): loss is nan"):
        trainer.fit()
    meta = json.loads((tmp_path / "run/checkpoints/last/meta.json").read_text())
    assert meta["step"] == 2
    assert all(torch.isfinite(t).all() for t in weights(tmp_path / "run").values())


def test_existing_run_needs_resume(tiny_synth, tmp_path):
    from videotext.errors import VideoTextError

    config = make_config(tiny_synth, "train.epochs=1")
    Trainer(config, tmp_path / "run", progress=False).fit()
    with pytest.raises(VideoTextError, match="pass --resume"):
        Trainer(config, tmp_path / "run", progress=False).fit()


def test_early_stop_after_patience_validations_without_improvement(tiny_synth, tmp_path):
    config = make_config(tiny_synth, "train.epochs=8", "train.early_stop_patience=1", "optim.lr=1e-12")
    # lr 1e-12: the weights barely move, so validation never improves after the first epoch
    Trainer(config, tmp_path / "run", progress=False).fit()
    vals = [e for e in read_metrics_log(tmp_path / "run") if e["kind"] == "val"]
    assert [v["selected"] for v in vals] == [True, False]  # stopped after the first stale validation


def test_early_stop_counts_only_improvements_beyond_min_delta_on_its_own_metric(tiny_synth, tmp_path):
    from videotext.train.stopping import settled_epoch

    # min_delta 1000 points: no validation after the first is an improvement, whatever it selects
    config = make_config(tiny_synth, "train.epochs=8", "train.early_stop_patience=2",
                         "train.early_stop_min_delta=1000", "train.early_stop_metric=t2v.R1")
    Trainer(config, tmp_path / "run", progress=False).fit()
    vals = [e for e in read_metrics_log(tmp_path / "run") if e["kind"] == "val"]
    assert [v["epoch"] for v in vals] == [1, 2, 3]
    curve = [[v["epoch"], v["t2v"]["R1"]] for v in vals]
    assert settled_epoch(curve, 2, 1000) == 3.0  # the offline rule stops where the trainer did
    # min_delta 0 on the selection metric is the plain early stop: every new best resets the count
    plain = make_config(tiny_synth, "train.epochs=3", "train.early_stop_patience=5")
    Trainer(plain, tmp_path / "plain", progress=False).fit()
    assert len([e for e in read_metrics_log(tmp_path / "plain") if e["kind"] == "val"]) == 3


def test_a_larger_budget_continues_a_run_as_if_planned_where_the_schedule_allows(tiny_synth, tmp_path):
    # plateau (COOT's reduce-on-plateau) does not depend on the budget: 2 epochs, then continued
    # to 4, equals 4 epochs from the start
    plateau = ["schedule.decay=plateau", "schedule.plateau_patience=0"]
    full = Trainer(make_config(tiny_synth, *plateau, "train.epochs=4"), tmp_path / "full", progress=False).fit()
    Trainer(make_config(tiny_synth, *plateau, "train.epochs=2"), tmp_path / "grown", progress=False).fit()
    grown = Trainer(make_config(tiny_synth, *plateau, "train.epochs=4"), tmp_path / "grown", resume=True,
                    progress=False).fit()
    a, b = weights(tmp_path / "full"), weights(tmp_path / "grown")
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6
    assert grown["t2v"]["R1"] == pytest.approx(full["t2v"]["R1"], abs=1e-6)
    assert [e["epoch"] for e in read_metrics_log(tmp_path / "grown") if e["kind"] == "val"] == [1, 2, 3, 4]

    # cosine decays to its floor at the end of the budget: continuing it would not be the longer run
    from videotext.errors import VideoTextError

    cosine = ["schedule.decay=cosine", "schedule.warmup_steps=1"]
    Trainer(make_config(tiny_synth, *cosine, "train.epochs=2"), tmp_path / "cosine", progress=False).fit()
    with pytest.raises(VideoTextError, match=r"budget of 6 optimizer steps under schedule.decay='cosine'.*now gives 9"):
        Trainer(make_config(tiny_synth, *cosine, "train.epochs=3"), tmp_path / "cosine", resume=True,
                progress=False).fit()


def test_an_early_stopped_run_stays_stopped_under_a_larger_budget(tiny_synth, tmp_path):
    stop = ["train.early_stop_patience=1", "optim.lr=1e-12"]
    Trainer(make_config(tiny_synth, *stop, "train.epochs=8"), tmp_path / "run", progress=False).fit()
    before = weights(tmp_path / "run")
    Trainer(make_config(tiny_synth, *stop, "train.epochs=20"), tmp_path / "run", resume=True, progress=False).fit()
    after = weights(tmp_path / "run")
    assert all(torch.equal(before[k], after[k]) for k in before)
    vals = [e for e in read_metrics_log(tmp_path / "run") if e["kind"] == "val"]
    assert [v["epoch"] for v in vals] == [1, 2]  # no validation beyond the early stop


def test_model_paths_in_configs_resolve_against_the_config_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  image_manifest: imgs/m.json\n  vit_checkpoint: /abs/vit.pth\n  name: x\n")
    config = load_config(path)
    assert config.model["image_manifest"] == str((tmp_path / "imgs/m.json").resolve())
    assert config.model["vit_checkpoint"] == "/abs/vit.pth" and config.model["name"] == "x"


def test_threads_option_sets_torch_threads(tiny_synth, tmp_path):
    before = torch.get_num_threads()
    try:
        Trainer(make_config(tiny_synth, "train.threads=1"), tmp_path / "run", progress=False).build()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_a_methods_own_evaluation_drives_selection_and_the_test_record(tiny_synth, tmp_path, monkeypatch):
    """The method's protocol (`Method.protocol`, run by `eval.protocols.evaluate_split`) is what the
    trainer validates, selects on and tests with."""
    from videotext.eval.protocols import PROTOCOLS
    from videotext.models.dual import DualEncoder

    calls = []

    def custom(method, dataset, read_features, device="cpu"):
        calls.append(len(dataset))
        # a made-up protocol whose R1 falls every validation: selection must keep the first
        value = 100.0 / len(calls)
        return {"custom": {"R1": value, "n_queries": len(dataset)}, "n_videos": len(dataset)}

    monkeypatch.setitem(PROTOCOLS, "custom", custom)
    monkeypatch.setattr(DualEncoder, "protocol", "custom")
    result = Trainer(make_config(tiny_synth, "train.select_metric=custom.R1"), tmp_path / "run",
                     progress=False).fit()
    vals = [e for e in read_metrics_log(tmp_path / "run") if e["kind"] == "val"]
    assert [e["custom"]["R1"] for e in vals] == pytest.approx([100.0, 50.0, 100.0 / 3])
    assert [e["selected"] for e in vals] == [True, False, False]
    assert result["best_step"] == vals[0]["step"]
    assert calls == [3, 3, 3, 3]  # three validations on val (3 videos), one test (3 videos)
    assert result["custom"]["R1"] == pytest.approx(25.0) and result["n_videos"] == 3


def test_order_twin_accuracy_by_hand():
    """A caption of a video with an order twin (same events, other order) wins when it scores its
    own video above the twin; a video with the same events in the same order is not a twin."""
    from videotext.data.schema import CaptionRef, Video, VideoTextDataset
    from videotext.eval.evaluate import Encoded, order_twin_accuracy, order_twin_pairs

    def events(*names):
        return {"events": [{"colour": c, "shape": "circle", "action": a, "start": float(t), "end": t + 1.0}
                           for t, (c, a) in enumerate(names)]}

    videos = [Video("ab", captions=["x", "y"], meta=events(("red", "grow"), ("blue", "spin"))),
              Video("ba", captions=["z"], meta=events(("blue", "spin"), ("red", "grow"))),
              Video("ab_copy", captions=["w"], meta=events(("red", "grow"), ("blue", "spin"))),
              Video("other", captions=["v"], meta=events(("red", "spin")))]
    dataset = VideoTextDataset("twins", videos)
    refs = [CaptionRef(v.id, i, c) for v in videos for i, c in enumerate(v.captions)]
    encoded = Encoded({}, {}, refs, [v.id for v in videos])
    pairs = order_twin_pairs(dataset, encoded)
    # rows: x, y (ab) → twin ba; z (ba) → twins ab, ab_copy; w (ab_copy) → twin ba; v has none
    assert sorted(pairs) == [(0, 0, 1), (1, 0, 1), (2, 1, 0), (2, 1, 2), (3, 2, 1)]
    sims = torch.tensor([[0.9, 0.1, 0.0, 0.0],   # x: own 0.9 > twin 0.1 → win
                         [0.2, 0.5, 0.0, 0.0],   # y: loses
                         [0.3, 0.3, 0.1, 0.0],   # z: tie with ab (½), beats ab_copy
                         [0.0, 0.0, 0.4, 0.4],   # w: own 0.4 vs ba 0.0 → win
                         [0.0, 0.0, 0.0, 1.0]])
    assert order_twin_accuracy(sims, pairs) == pytest.approx(100 * (1 + 0 + 0.5 + 1 + 1) / 5)


def test_order_dependent_captions_are_scored_as_their_own_subset(tiny_synth):
    """evaluate() adds t2v_order / v2t_order: the same metric on the order-sensitive captions only."""
    from videotext.data.schema import VideoTextDataset
    from videotext.eval.evaluate import encode_split, evaluate, evaluate_encoded, order_sensitive_mask
    from videotext.models.registry import build_method
    from videotext.data.run_data import RunData

    dataset = VideoTextDataset.load(tiny_synth / "manifest.json")
    order_ids = {v.id for v in dataset if v.meta.get("order_sensitive")}
    assert 0 < len(order_ids) < len(dataset)  # the fixture has both kinds
    data = RunData(make_config(tiny_synth))
    torch.manual_seed(0)
    method = build_method("dual", {"embed_dim": 16, "freeze_text": True}, expert_dims=data.read_features.dims)
    result = evaluate(method, dataset, data.read_features)
    encoded = encode_split(method, dataset, data.read_features)
    mask = order_sensitive_mask(dataset, encoded)
    assert int(mask.sum()) == sum(len(dataset[v].captions) for v in order_ids)
    assert result["t2v_order"]["n_queries"] == int(mask.sum())
    expected = evaluate_encoded(method, encoded, query_mask=mask)
    assert result["t2v_order"]["R1"] == pytest.approx(expected["t2v"]["R1"])
    assert result["v2t_order"]["n_queries"] == len(order_ids)
    assert 0 < result["t2v_order"]["twin_pairs"] and 0 <= result["t2v_order"]["twin_accuracy"] <= 100
