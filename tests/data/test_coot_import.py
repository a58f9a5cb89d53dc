"""COOT data paths: import of COOT's distributed feature files (video h5, text h5 + sentence
splits, ActivityNet npz) into a FeatureStore, precomputed paragraph features, and the
evaluation hook with COOT's selection sum."""
from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import torch

from videotext.data.feature_import import import_features
from videotext.data.features import FeatureStore
from videotext.data.hierarchy import (
    ParagraphTokenFeatures, StoredParagraphFeatures, paragraph_sentences, precompute_paragraph_features,
)
from videotext.data.loaders import VideoFeatures
from videotext.data.schema import Segment, Video, VideoTextDataset
from videotext.errors import VideoTextError


def _coot_files(root):
    """COOT's layout (coot/features_loader.py): `<name>.h5` one dataset per key; text h5 with
    `<name>_sentence_splits.json`; ActivityNet `features/<name>/v_<id>.npz` with frame_scores."""
    rng = np.random.default_rng(0)
    video = {"abc": rng.normal(size=(7, 6)).astype(np.float32), "xyz": rng.normal(size=(3, 6)).astype(np.float32)}
    text = {"abc": rng.normal(size=(5, 4)).astype(np.float32), "xyz": rng.normal(size=(4, 4)).astype(np.float32)}
    with h5py.File(root / "video_feat_100m.h5", "w") as h5:
        for k, v in video.items():
            h5[k] = v
    json.dump({"abc": 7, "xyz": 3}, (root / "video_feat_100m_num_frames.json").open("w"))
    with h5py.File(root / "text_feat_bert_-2,-1.h5", "w") as h5:
        for k, v in text.items():
            h5[k] = v
    json.dump({"abc": [2, 3], "xyz": [1, 1, 2]}, (root / "text_feat_bert_-2,-1_sentence_splits.json").open("w"))
    npz = root / "features" / "ICEP"
    npz.mkdir(parents=True)
    for k, v in video.items():  # [T, 1, D, 1, 1] as ActivityNet's inception frame_scores
        np.savez(npz / f"v_{k}.npz", frame_scores=v[:, None, :, None, None])
    return video, text


def test_import_coot_video_text_and_npz_features(tmp_path):
    video, text = _coot_files(tmp_path)
    store = FeatureStore(tmp_path / "store")
    assert import_features(tmp_path / "video_feat_100m.h5", store, "video", dtype="float32")["imported"] == 2
    assert import_features(tmp_path / "text_feat_bert_-2,-1.h5", store, "text", dtype="float32")["imported"] == 2
    out = import_features(tmp_path / "features" / "ICEP", store, "icep", array="frame_scores", strip_prefix="v_",
                          dtype="float32")
    assert out["imported"] == 2 and out["failed"] == 0
    store.refresh()
    for k in video:
        feats, times = store.get("video", k)
        assert np.array_equal(feats, video[k]) and np.array_equal(times, np.arange(len(video[k])))
        assert np.array_equal(store.get("icep", k)[0], video[k])  # squeezed back to [T, D]
    feats, index = store.get("text", "xyz")
    assert np.array_equal(feats, text["xyz"]) and index.tolist() == [0, 1, 2, 2]  # sentence of each token
    stored = StoredParagraphFeatures(store, "text")
    batch = stored.batch([["s1", "s2"], ["a", "b", "c"]], keys=["abc", "xyz"])
    assert batch["group_counts"].tolist() == [2, 3] and batch["words"].shape == (2, 5, 4)
    assert torch.equal(batch["group_words"][1, :3], torch.from_numpy(text["abc"][2:]))  # 2nd sentence of abc
    assert batch["group_word_mask"].sum(1).tolist() == [2, 3, 1, 1, 2]
    with pytest.raises(VideoTextError, match="3 stored sentences, its paragraph has 2"):
        stored.batch([["a", "b"]], keys=["xyz"])
    with pytest.raises(VideoTextError, match="no expert 'nope'"):
        StoredParagraphFeatures(store, "nope")


def test_bad_sentence_splits_are_recorded_not_fatal(tmp_path):
    with h5py.File(tmp_path / "t.h5", "w") as h5:
        h5["good"] = np.ones((3, 2), np.float32)
        h5["bad"] = np.ones((4, 2), np.float32)
    json.dump({"good": [1, 2], "bad": [1, 2]}, (tmp_path / "t_sentence_splits.json").open("w"))
    out = import_features(tmp_path / "t.h5", tmp_path / "store", "text")
    assert (out["imported"], out["failed"]) == (1, 1)
    assert "do not add up" in (tmp_path / "store" / "failures.jsonl").read_text()


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory):
    """6 videos with 2 segments each: a video expert and MiniLM paragraph features in one store."""
    root = tmp_path_factory.mktemp("coot_store")
    rng = np.random.default_rng(1)
    words = ["red", "blue", "green", "ball", "box", "star"]
    videos = [Video(f"v{i}", duration=8.0, captions=[f"a {words[i]} {words[(i + 1) % 6]}"],
                    segments=[Segment(0, 3, f"a {words[i]} thing."), Segment(4, 7, f"then a {words[(i + 2) % 6]}.")])
              for i in range(6)]
    data = VideoTextDataset("t", videos, {"test": [v.id for v in videos]})
    store = FeatureStore(root)
    writer = store.writer("app", 5, dtype="float32")
    for v in videos:
        writer.add(v.key, rng.normal(size=(8, 5)), np.arange(8.0))
    writer.commit()
    assert precompute_paragraph_features(data, store, "para") == 6
    assert precompute_paragraph_features(data, store, "para") == 0  # resumable: nothing left to do
    store.refresh()
    return data, store


def test_precomputed_paragraph_features_equal_the_live_model(stored_run):
    data, store = stored_run
    live = ParagraphTokenFeatures()
    video = data["v2"]
    expected = live([paragraph_sentences(video)])[0]
    got = StoredParagraphFeatures(store, "para").sentences(video.key, 2)
    assert [g.shape for g in got] == [e.shape for e in expected] and got[0].shape[1] == 768  # 2 × 384
    for g, e in zip(got, expected):
        assert np.array_equal(g, e)


def test_coot_trains_and_evaluates_on_stored_text_with_the_selection_sum(stored_run):
    from videotext.models.registry import build_method

    data, store = stored_run
    reader = VideoFeatures(store, ["app"], 80)
    torch.manual_seed(0)
    model = build_method("coot", {"hidden_dim": 16, "num_heads": 2, "ff_dim": 16, "af_dim": 32, "af_heads": 2,
                                  "dropout": 0.0, "text_features": "para"}, expert_dims={"app": 5})
    batch = model.train_batches(data, reader, 4, seed=0).batch(0, 0)
    assert batch["text"]["words"].shape[-1] == 768 and batch["text"]["group_counts"].tolist() == [2] * 4
    model.loss(batch)["loss"].backward()
    from videotext.eval.protocols import evaluate_split

    out = evaluate_split(model, data, reader)
    assert {"t2v", "v2t", "par2vid", "vid2par", "sent2clip", "clip2sent", "selection"} <= set(out)
    assert out["selection"]["r1_sum"] == pytest.approx(out["par2vid"]["R1"] + out["vid2par"]["R1"])
    assert out["selection"]["clip_sent_r1_sum"] == pytest.approx(out["sent2clip"]["R1"] + out["clip2sent"]["R1"])
    assert out["n_videos"] == 6 and out["sent2clip"]["n_queries"] == 12
    from videotext.train.trainer import metric_value

    assert metric_value(out, "selection.r1_sum") == out["selection"]["r1_sum"]


def test_cli_import_features_takes_array_and_prefix(tmp_path):
    from typer.testing import CliRunner

    from videotext.cli import app

    video, _ = _coot_files(tmp_path)
    result = CliRunner().invoke(app, ["import-features", str(tmp_path / "features" / "ICEP"), "-o",
                                      str(tmp_path / "store"), "--expert", "icep", "--array", "frame_scores",
                                      "--strip-prefix", "v_", "--step", "0.5"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["imported"] == 2
    feats, times = FeatureStore(tmp_path / "store").get("icep", "xyz")
    assert feats.shape == (3, 6) and times.tolist() == [0.0, 0.5, 1.0]
