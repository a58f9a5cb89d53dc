"""Narration pre-training text: clips from timestamps, concatenation, stop words, word windows, span features."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import tiny_config_overrides
from videotext.config import PACKAGED, NarrationConfig, load_config
from videotext.data.narration import (
    NarrationWindows, SpanStore, crop_steps, narration_clips, narration_dataset, parse_span_key,
    remove_stop_words, sample_window, span_key, text_dataset, timed_words,
)
from videotext.data.schema import Segment, Video, VideoTextDataset
from videotext.errors import VideoTextError
from videotext.train.trainer import Trainer

CONFIG = PACKAGED / "dual" / "synthetic.yaml"


def narrated() -> Video:
    speech = [Segment(4.0, 6.0, "e f g h"), Segment(0.0, 2.0, "okay so the red circle"), Segment(2.0, 3.0, "")]
    return Video("v", path="v.mp4", duration=8.0, speech=speech, captions=["a caption"])


def test_stop_words_and_span_keys():
    assert remove_stop_words("Okay so the red circle, um, goes LEFT") == "red circle, goes LEFT"
    assert span_key("v1", 1.5, 3.25) == "v1@1.500-3.250"
    assert parse_span_key("v1@1.500-3.250") == ("v1", 1.5, 3.25)
    assert parse_span_key("name@with-at") is None and parse_span_key("plain") is None


def test_clips_cut_from_timestamps_and_concatenated():
    clips = narration_clips(narrated())  # the empty line is dropped, lines sorted by time
    assert [(c.id, c.captions, c.feature_key) for c in clips] == [
        ("v#0", ["okay so the red circle"], "v@0.000-2.000"), ("v#1", ["e f g h"], "v@4.000-6.000")]
    joined = narration_clips(narrated(), concat=2, stop_words=True)
    assert len(joined) == 1 and joined[0].captions == ["red circle e f g h"]
    assert joined[0].feature_key == "v@0.000-6.000" and joined[0].duration == 6.0
    with pytest.raises(VideoTextError, match="concat"):
        narration_clips(narrated(), concat=0)


def test_span_store_crops_features_to_the_clip():
    times = np.arange(6, dtype=np.float64)  # steps start at 0, 1, …, 5 s

    class Store:
        experts = ["motion"]

        def get(self, expert, key):
            assert key == "v"
            return np.arange(6, dtype=np.float32)[:, None], times

        def has(self, expert, key):
            return key == "v"

    store = SpanStore(Store())
    values, stamps = store.get("motion", "v@1.000-3.000")
    assert values[:, 0].tolist() == [1.0, 2.0] and stamps.tolist() == [1.0, 2.0]
    assert crop_steps(times, 2.2, 2.4).tolist() == [2]  # no step starts inside: the closest one
    assert store.has("motion", "v@0.000-1.000") and store.experts == ["motion"]


def test_window_is_the_video_closest_in_time_to_the_words():
    video = narrated()
    words = timed_words(video.speech)
    assert [w for w, _ in words][:6] == ["okay", "so", "the", "red", "circle", "e"]
    assert words[5][1] == pytest.approx(4.25)  # "e": first of 4 words over [4, 6]

    class Pick:
        def randrange(self, n):
            assert n == 9 - 3 + 1
            return 3  # words 3..5: red (1.4 s), circle (1.8 s), e (4.25 s)

    text, start, end = sample_window(video, Pick(), window_words=3, window_seconds=2.0)
    assert text == "red circle e"
    assert (start, end) == pytest.approx((2.825 - 1.0, 2.825 + 1.0))  # centred on (1.4 + 4.25) / 2
    _, start, end = sample_window(video, type("Last", (), {"randrange": lambda self, n: n - 1})(), 3, 6.0)
    assert (start, end) == (2.0, 8.0)  # f g h centre 5.25 s: 2.25–8.25 shifted to stay inside the 8 s video


def test_narration_dataset_keeps_splits_and_needs_speech():
    other = Video("w", duration=5.0, captions=["x"])
    data = VideoTextDataset("d", [narrated(), other], {"train": ["v", "w"], "test": ["w"]})
    clips = narration_dataset(data)
    assert clips.splits == {"train": ["v#0", "v#1"], "test": []}
    whole = text_dataset(data, "narration", NarrationConfig(window_words=4))
    assert whole["v"].captions == ["okay so the red circle e f g h"] and whole.splits["train"] == ["v"]
    with pytest.raises(VideoTextError, match="no video has speech"):
        narration_dataset(VideoTextDataset("d", [other], {"train": ["w"]}))
    with pytest.raises(VideoTextError, match="narration"):
        text_dataset(data, "speech")


@pytest.fixture(scope="module")
def narrated_synth(tiny_synth, tmp_path_factory) -> Path:
    """The tiny fixture's manifest with the synthetic narration track as speech."""
    from videotext.data.synthetic import generate_specs
    from videotext.data.synthetic.narration import narrate

    manifest = json.loads((tiny_synth / "manifest.json").read_text())
    specs = {s.id: s for s in generate_specs(32, 0)}
    for video in manifest["videos"]:
        video["speech"] = [s.__dict__ for s in narrate(specs[video["id"]], video["duration"], 0)]
        video["path"] = str(tiny_synth / video["path"])
    path = tmp_path_factory.mktemp("narrated") / "manifest.json"
    path.write_text(json.dumps(manifest))
    return path


@pytest.mark.heavy
def test_trainer_pretrains_on_narration_windows(tiny_synth, narrated_synth, tmp_path):
    config = load_config(CONFIG, tiny_config_overrides(tiny_synth) + [
        f"data.manifest={narrated_synth}", "data.text=narration", "data.narration.window_words=5",
        "data.narration.window_seconds=3", "train.epochs=1"])
    trainer = Trainer(config, tmp_path / "run", progress=False)
    trainer.build()
    assert isinstance(trainer.batches, NarrationWindows)
    texts = []
    trainer.batches.inner.prepare_text = lambda t: texts.extend(t) or {"n": len(t)}
    first = trainer.batches.batch(0, 0)
    assert len(texts) == 8 and all(len(t.split()) <= 5 for t in texts)
    again = list(texts)
    texts.clear()
    trainer.batches.batch(0, 0)
    assert texts == again  # a pure function of (seed, epoch, index)
    assert trainer.batches.inner.dataset is trainer.batches.source  # the view is only in place during a batch
    steps = first["video"]["masks"]["appearance"].sum(1)
    assert int(steps.max()) <= 3  # 3 s of video at one step per second
    result = Trainer(config, tmp_path / "fit", progress=False).fit()
    assert result["n_captions"] > 0


def test_trainer_pretrains_on_concatenated_clips(tiny_synth, narrated_synth, tmp_path):
    config = load_config(CONFIG, tiny_config_overrides(tiny_synth) + [
        f"data.manifest={narrated_synth}", "data.text=narration", "data.narration.concat=2",
        "data.narration.remove_stop_words=true", "train.epochs=1"])
    trainer = Trainer(config, tmp_path / "run", progress=False)
    trainer.build()
    train = trainer.train_set
    assert all("#" in v.id and "@" in v.key for v in train)
    video = next(iter(train))
    source = trainer.data.dataset.meta  # the clip dataset keeps the manifest meta
    assert source["generator"] == "videotext.data.synthetic"
    features = trainer.data.read_features(video.key)
    start, end = video.meta["start"], video.meta["end"]
    assert 1 <= len(features["appearance"]) <= int(np.ceil(end - start)) + 1


def test_howto100m_narrations_become_clips(tmp_path):
    from videotext.data.readers.howto100m import read_howto100m

    (tmp_path / "caption.json").write_text(json.dumps({"yt1": {
        "start": [0.0, 3.5, 7.0], "end": [3.5, 7.0, 9.0], "text": ["so today we", "cut the onion", "and fry it"]}}))
    clips = text_dataset(read_howto100m(tmp_path), "narration", NarrationConfig(concat=2, remove_stop_words=True))
    assert [(c.id, c.captions[0], c.key) for c in clips] == [
        ("yt1#0", "today cut onion", "yt1@0.000-7.000"), ("yt1#1", "fry", "yt1@7.000-9.000")]
    assert clips.splits == {"train": ["yt1#0", "yt1#1"]}
