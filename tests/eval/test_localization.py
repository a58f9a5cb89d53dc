"""Action-step localization (CrossTask protocol): decoding, recall, windows, the reader, the CLI."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tests.conftest import tiny_config_overrides
from videotext.data.readers import read_dataset
from videotext.data.schema import Segment, Video, VideoTextDataset
from videotext.errors import DataFormatError, VideoTextError
from videotext.eval.localization import (
    WindowStore, average_recall, chance_hits, decode_argmax, decode_ordered, ground_truth, localize,
    step_hits, uniform_assignment, video_steps,
)
from videotext.models.base import Method

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "readers" / "crosstask"


def two_step_video() -> Video:
    # 6 s; step "a" in [0, 1.25] → seconds 0, 1; step "b" in [3.5, 5.2] → seconds 3, 4, 5
    return Video("v", duration=6.0, segments=[Segment(3.5, 5.2, "b"), Segment(0.0, 1.25, "a")])


# --- ground truth, decoding, recall -------------------------------------------------------
def test_steps_in_time_order_and_crosstask_ground_truth():
    video = two_step_video()
    assert video_steps(video) == ["a", "b"]
    truth = ground_truth(video, ["a", "b"], 6)
    assert truth[:, 0].tolist() == [True, True, False, False, False, False]
    assert truth[:, 1].tolist() == [False, False, False, True, True, True]


def test_perfect_scores_recall_everything():
    truth = ground_truth(two_step_video(), ["a", "b"], 6)
    for decode in (decode_ordered, decode_argmax):
        hits = step_hits(truth, decode(truth.astype(float)))
        assert average_recall(["g"], [hits], [truth])["recall"] == 100.0


def test_swapped_scores_give_the_hand_computed_recall():
    truth = ground_truth(two_step_video(), ["a", "b"], 6)
    scores = np.zeros((6, 2))
    scores[4, 0] = 1.0  # a's best second is 4 (in b's interval): miss
    scores[5, 1] = 1.0  # b's best second is 5: hit
    assert decode_argmax(scores).tolist() == [4, 5]
    assert step_hits(truth, [4, 5]).tolist() == [0.0, 1.0]
    assert average_recall(["g"], [step_hits(truth, [4, 5])], [truth])["recall"] == 50.0


def test_ordered_decoding_keeps_step_order_where_argmax_does_not():
    scores = np.array([[0.0, 3.0], [1.0, 0.0], [2.0, 1.0]])  # [T=3, K=2]
    assert decode_argmax(scores).tolist() == [2, 0]
    # t0 < t1: (0,1)=0, (0,2)=1, (1,2)=2 → (1, 2)
    assert decode_ordered(scores).tolist() == [1, 2]


def test_ordered_decoding_matches_brute_force():
    rng = np.random.default_rng(0)
    for seconds, steps in [(5, 3), (7, 4), (4, 4), (6, 1)]:
        scores = rng.normal(size=(seconds, steps))
        best = max(itertools.combinations(range(seconds), steps),
                   key=lambda ts: sum(scores[t, k] for k, t in enumerate(ts)))
        assert decode_ordered(scores).tolist() == list(best)
    assert decode_ordered(np.array([[0.0, 1.0, 2.0]])).tolist() == [0, 0, 0]  # T < K: argmax fallback


def test_recall_pools_within_tasks_then_averages_and_skips_unannotated_steps():
    truth_a1 = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=bool)  # 3 annotated steps
    truth_a2 = np.array([[1, 0], [0, 0]], dtype=bool)  # step 2 not in this video: not counted
    truth_b = np.array([[1], [0]], dtype=bool)
    hits = [np.array([1.0, 1.0, 0.0]), np.array([0.0, 1.0]), np.array([1.0])]
    result = average_recall(["A", "A", "B"], hits, [truth_a1, truth_a2, truth_b])
    assert result["per_group"] == {"A": 50.0, "B": 100.0}  # A: 2 / 4, B: 1 / 1
    assert result["recall"] == 75.0
    assert result["step_recall"] == pytest.approx(60.0)  # 3 / 5
    assert result["n_steps"] == 5 and result["n_groups"] == 2


def test_chance_and_uniform_baselines():
    truth = ground_truth(two_step_video(), ["a", "b"], 6)
    assert chance_hits(truth).tolist() == pytest.approx([2 / 6, 3 / 6])
    assert average_recall(["g"], [chance_hits(truth)], [truth])["recall"] == pytest.approx(100 * 5 / 12)
    # CrossTask's uniform_assignment: round(T/K · (k + ½)), Python rounding
    assert uniform_assignment(6, 4).tolist() == [1, 2, 4, 5]
    assert uniform_assignment(6, 2).tolist() == [2, 4]  # round(1.5) = 2, round(4.5) = 4


# --- windows and the whole protocol with a method whose answer we know -------------------------------
class ClockStore:
    """A FeatureStore stand-in: expert "clock" holds each step's own timestamp, at 2 steps/s."""

    def __init__(self, seconds: dict[str, int]):
        self.seconds = seconds

    def dim(self, expert):
        return 1

    def has(self, expert, key):
        return key in self.seconds

    def is_missing(self, expert, key):
        return False

    def get(self, expert, key):
        times = np.arange(0, self.seconds[key], 0.5)
        return times[:, None].astype(np.float32), times


class ClockMethod(Method):
    """Text "at 3" scores a window by −|3.5 − mean time of the window|: the step's true second wins."""

    name = "clock"

    def __init__(self):
        super().__init__(None)

    def prepare_text(self, texts):
        return {"seconds": torch.tensor([float(t.split()[-1]) + 0.5 for t in texts])}

    def encode_text(self, batch):
        return batch["seconds"][:, None]  # [N, 1]

    def encode_video(self, batch):
        feats, mask = batch["features"]["clock"], batch["masks"]["clock"]  # [B, S, 1], [B, S]
        return (feats[..., 0] * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True) + 0.25  # window centre

    def similarity(self, text, video, chunk_size=4096):
        return -(text - video.T).abs()


def test_windows_hold_the_steps_of_their_second():
    store = WindowStore(ClockStore({"v": 6}), window=1.0)
    values, times = store.get("clock", "v\x00window:2")
    assert times.tolist() == [2.0, 2.5] and values[:, 0].tolist() == [2.0, 2.5]
    wide = WindowStore(ClockStore({"v": 6}), window=3.0)
    assert wide.get("clock", "v\x00window:2")[1].tolist() == [1.0, 1.5, 2.0, 2.5, 3.0, 3.5]
    assert store.num_seconds(Video("v"), ["clock"]) == 6  # last stamp 5.5 → 6 seconds
    with pytest.raises(VideoTextError, match="window"):
        WindowStore(ClockStore({}), window=0)


def test_localize_end_to_end_with_a_known_scorer():
    videos = [
        Video("v1", duration=6.0, segments=[Segment(1.0, 2.0, "at 1"), Segment(4.0, 5.0, "at 4")]),
        # the scorer puts "at 0" at second 0, outside its ground truth [2, 3): a miss
        Video("v2", duration=4.0, segments=[Segment(2.0, 3.0, "at 0"), Segment(3.0, 4.0, "at 3")]),
    ]
    dataset = VideoTextDataset("toy", videos, {"test": ["v1", "v2"]})
    store = ClockStore({"v1": 6, "v2": 4})
    for decoding in ("ordered", "argmax"):
        result, per_video = localize(ClockMethod(), dataset, store, ["clock"], decoding=decoding,
                                     normalize="none")
        assert [r.predicted.tolist() for r in per_video] == [[1, 4], [0, 3]]
        assert result["localization"]["recall"] == 75.0  # v1: 2/2, v2: 1/2, averaged over videos
        assert result["localization"]["step_recall"] == 75.0
        assert result["chance"]["recall"] == pytest.approx(100 * (2 / 12 + 2 / 8) / 2)
    with pytest.raises(VideoTextError, match="decoding"):
        localize(ClockMethod(), dataset, store, ["clock"], decoding="viterbi")


# --- the CrossTask reader -------------------------------------------------------------------
def test_crosstask_reader_layout_splits_and_steps():
    dataset = read_dataset("crosstask", FIXTURES, val_count=1, val_seed=0)
    assert sorted(dataset.splits["test"]) == ["vidA000004", "vidB000003"]
    assert len(dataset.splits["train"]) + len(dataset.splits["val"]) == 4 and len(dataset.splits["val"]) == 1
    assert dataset.meta["skipped"] == 2  # vidA000003 has no annotation; vidR000001 is not a primary task
    video = dataset["vidA000001"]
    assert video.meta["task"] == "23521" and video.meta["steps"] == ["pour water", "pour jello powder", "stir mixture"]
    assert [(s.start, s.end, s.sentence) for s in video.segments] == [
        (3.5, 9.2, "pour water"), (12.0, 15.5, "pour jello powder"), (16.1, 24.9, "stir mixture"),
        (30.0, 32.0, "pour water"),
    ]
    assert video.path == "vidA000001.mp4" and video.duration is None
    truth = ground_truth(video, video_steps(video), 33)
    assert np.flatnonzero(truth[:, 0]).tolist() == [3, 4, 5, 6, 7, 8, 9, 30, 31]  # ⌊3.5⌋..⌈9.2⌉−1, 30..31
    shelf = dataset["vidB000003"]
    assert video_steps(shelf) == ["cut shelf", "assemble shelf", "sand shelf", "attach shelf"]
    assert ground_truth(shelf, video_steps(shelf), 20).any(0).tolist() == [False, True, False, True]


def test_crosstask_reader_names_a_bad_step_index():
    with pytest.raises(DataFormatError) as info:
        read_dataset("crosstask", FIXTURES / "malformed", val_fraction=None)
    assert "23521_vidA000001.csv" in str(info.value) and "row 2" in str(info.value) and "1..3" in str(info.value)


# --- the command on a tiny trained run ------------------------------------------------------
@pytest.mark.heavy
def test_localize_cli_on_a_tiny_dual_run(tiny_synth, tmp_path):
    from videotext.cli import app
    from videotext.config import PACKAGED, load_config
    from videotext.train.trainer import Trainer

    config_path = PACKAGED / "dual" / "synthetic.yaml"
    config = load_config(config_path, tiny_config_overrides(tiny_synth) + ["train.epochs=1"])
    Trainer(config, tmp_path / "run", progress=False).fit()
    result = CliRunner().invoke(app, ["localize", str(tmp_path / "run"), "--split", "test"])
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "run" / "localization_test_best.json").read_text())
    dataset = VideoTextDataset.load(tiny_synth / "manifest.json").split("test")
    assert saved["localization"]["n_videos"] == len(dataset)
    assert saved["localization"]["n_steps"] == sum(len(video_steps(v)) for v in dataset)
    assert 0.0 <= saved["localization"]["recall"] <= 100.0 and 0.0 < saved["chance"]["recall"] < 100.0
    assert f"average recall {saved['localization']['recall']:.1f}" in result.output
    other = CliRunner().invoke(app, ["localize", str(tmp_path / "run"), "--manifest", str(tiny_synth / "manifest.json"),
                                     "--features", str(tiny_synth / "features"), "--decoding", "argmax"])
    assert other.exit_code == 0, other.output
    zero_shot = json.loads((tmp_path / "run" / "localization_manifest_test_best.json").read_text())
    assert zero_shot["decoding"] == "argmax" and zero_shot["chance"] == saved["chance"]
    bad = CliRunner().invoke(app, ["localize", str(tmp_path / "run"), "--decoding", "viterbi"])
    assert bad.exit_code == 2 and "viterbi" in bad.output
