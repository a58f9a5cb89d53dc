"""Pixel batches for Frozen in Time: sampling, transforms, purity, images, joint batches, a short training."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from videotext.data.frames import (
    AlternatingBatches, FrameBatches, FrameSource, FrameSpec, eval_times, eval_transform,
    eval_video_batches, train_times, train_transform,
)
from videotext.data.schema import Video, VideoTextDataset
from videotext.data.transforms import normalize, to_tensor
from videotext.data.video_write import write_video

FPS, SECONDS = 8, 2


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """4 videos (frame i of video v has red = 16 i, green = 60 v) and 3 images, with manifests."""
    from PIL import Image

    root = tmp_path_factory.mktemp("frozen_frames")
    videos = []
    for v in range(4):
        frames = np.zeros((FPS * SECONDS, 32, 48, 3), np.uint8)
        for i in range(len(frames)):
            frames[i, ..., 0], frames[i, ..., 1] = 16 * i, 60 * v
        write_video(root / f"v{v}.mp4", frames, FPS)
        videos.append(Video(f"v{v}", f"v{v}.mp4", float(SECONDS), captions=[f"video {v}", f"clip {v}"]))
    dataset = VideoTextDataset("vids", videos, {"train": [v.id for v in videos]}, root)
    dataset.save(root / "manifest.json")
    images = []
    for k in range(3):
        Image.fromarray(np.full((20, 30, 3), 80 * k, np.uint8)).save(root / f"i{k}.png")
        images.append(Video(f"i{k}", f"i{k}.png", 0.0, captions=[f"image {k}"], kind="image"))
    image_set = VideoTextDataset("imgs", images, {"train": [i.id for i in images]}, root)
    image_set.save(root / "images.json")
    return root


def spec(**kw) -> FrameSpec:
    return FrameSpec(size=16, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), **kw)


def test_sampling_hand_values():
    # 6 s, 4 frames, stride 2 s: segments of 1.5 s, one sampling at each segment's centre
    np.testing.assert_allclose(eval_times(6.0, 4, 2.0, 4), [[0.75, 2.25, 3.75, 5.25]])
    # 16 s: segments of 4 s → 2 samplings 2 s apart (§4.3: a stride of 2 seconds)
    np.testing.assert_allclose(eval_times(16.0, 4, 2.0, 4), [[1, 5, 9, 13], [3, 7, 11, 15]])
    assert eval_times(100.0, 2, 2.0, 4).shape == (4, 2)  # capped at max_test_clips
    times = train_times(8.0, 4, np.random.default_rng(0))
    assert all(2 * i <= t < 2 * (i + 1) for i, t in enumerate(times))  # one per segment (TSN)
    np.testing.assert_array_equal(times, train_times(8.0, 4, np.random.default_rng(0)))


def test_clips_pick_the_frames_on_screen(data):
    dataset = VideoTextDataset.load(data / "manifest.json")
    for cache in ("memory", "off"):
        source = FrameSource(dataset, spec(cache=cache, cache_fps=8.0))
        clip = source.clip(dataset["v2"], np.array([0.25, 0.75, 1.25, 1.75]))  # frames 2, 6, 10, 14
        np.testing.assert_allclose(clip[:, 8, 8, 0], [32, 96, 160, 224], atol=6)
        np.testing.assert_allclose(clip[:, 8, 8, 1], [120] * 4, atol=6)
        assert clip.shape == (4, 16, 24, 3)  # short side = input size
    disk = FrameSource(dataset, spec(cache=str(data / "cache"), cache_fps=8.0))
    first = disk.clip(dataset["v1"], np.array([0.3]))
    assert len(list((data / "cache").glob("*.npz"))) == 1
    again = FrameSource(dataset, spec(cache=str(data / "cache"), cache_fps=8.0)).clip(dataset["v1"], np.array([0.3]))
    np.testing.assert_array_equal(first, again)


def test_transforms_hand_values():
    clip = np.arange(2 * 16 * 16 * 3, dtype=np.uint8).reshape(2, 16, 16, 3)
    rng = np.random.default_rng(0)
    out = train_transform(clip, spec(crop_scale=(1.0, 1.0), flip=1.0), rng)  # full crop, always flip
    torch.testing.assert_close(out, to_tensor(clip).flip(-1).float() / 255)
    wide = np.arange(1 * 16 * 24 * 3, dtype=np.uint8).reshape(1, 16, 24, 3)
    torch.testing.assert_close(eval_transform(wide, spec()), to_tensor(wide[:, :, 4:20]).float() / 255)
    norm = normalize(to_tensor(clip), (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    assert float(norm.min()) >= -1 and float(norm.max()) <= 1


def test_batches_are_pure_functions_of_seed_epoch_index(data):
    dataset = VideoTextDataset.load(data / "manifest.json")

    def make():
        return FrameBatches(dataset, FrameSource(dataset, spec()), lambda t: {"texts": t}, 2, 7, lambda e: 1 + e)

    a, b = make(), make()
    first, second = a.batch(1, 1), b.batch(1, 1)
    assert first["video_ids"] == second["video_ids"] and first["text"] == second["text"]
    torch.testing.assert_close(first["video"]["frames"], second["video"]["frames"], atol=0, rtol=0)
    assert first["video"]["frames"].shape == (2, 2, 3, 16, 16)  # [B, F = frames_for_epoch(1), 3, S, S]
    assert a.batch(2, 0)["video"]["frames"].shape[1] == 3
    other = a.batch(0, 1)["video"]["frames"]
    assert other.shape[1] == 1 and len(a) == 2


def test_images_are_one_frame_videos_and_batches_alternate(data):
    videos = VideoTextDataset.load(data / "manifest.json")
    images = VideoTextDataset.load(data / "images.json")
    video_batches = FrameBatches(videos, FrameSource(videos, spec()), list, 1, 0, lambda e: 4)
    image_batches = FrameBatches(images, FrameSource(images, spec()), list, 2, 1, lambda e: 4)
    joint = AlternatingBatches(video_batches, image_batches)  # 4 video batches, 1 image batch
    assert len(joint) == 5
    assert [joint.locate(i) for i in range(5)] == [(0, 0), (1, 0), (0, 1), (0, 2), (0, 3)]
    image = joint.batch(0, 1)
    assert image["video"]["frames"].shape == (2, 1, 3, 16, 16)  # images: 1 frame whatever the count
    assert joint.batch(0, 2)["video"]["frames"].shape == (1, 4, 3, 16, 16)
    grey = {f"i{k}": 80 * k / 255 for k in range(3)}
    for vid, frames in zip(image["video_ids"], image["video"]["frames"]):
        torch.testing.assert_close(frames.mean(), torch.tensor(grey[vid]), atol=0.01, rtol=0)
    test = list(eval_video_batches(images, FrameSource(images, spec()), 4, 2))
    assert [b["frames"].shape[:2] for b in test] == [(2, 1), (1, 1)]


def curriculum_config(data, *extra: str):
    """A tiny Frozen run on the 3 training videos of `data` with a 1 → 2 frame curriculum."""
    from videotext.config import load_config

    manifest = json.loads((data / "manifest.json").read_text())
    manifest["splits"] = {"train": ["v0", "v1", "v2"], "val": ["v3"], "test": ["v3"]}
    (data / "split.json").write_text(json.dumps(manifest))
    return load_config(None, [
        "method=frozen", f"data.manifest={data / 'split.json'}", "data.experts=[]",
        "model.preset=tiny", "model.num_frames=2", "model.freeze_text=true", "model.frame_schedule=[1, 2]",
        "model.frame_schedule_epochs=[0, 1]", "train.epochs=2", "train.log_every=1",
        "train.device=cpu", "optim.lr=0.001", *extra,
    ])


@pytest.mark.heavy
def test_frozen_trains_from_pixels_with_joint_images(data, tmp_path):
    """The trainer feeds Frozen pixel batches (no feature store); joint image batches run too."""
    from videotext.train.trainer import Trainer

    config = curriculum_config(data, f"model.image_manifest={data / 'images.json'}", "model.image_batch_size=3",
                               "train.batch_size=3")
    result = Trainer(config, tmp_path / "run", progress=False).fit()
    assert (result["n_videos"], result["n_captions"]) == (1, 2)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x["kind"] == "train"]
    assert [x["step"] for x in train] == [1, 2, 3, 4]  # 1 video + 1 image batch per epoch
    assert train[2]["loss"] < train[0]["loss"]  # it learns
    from safetensors.torch import load_file

    weights = load_file(str(tmp_path / "run" / "checkpoints" / "last" / "model.safetensors"))
    assert int(weights["trained_frames"]) == 2  # the curriculum reached 2 frames (saved for resume)
    assert weights["video_model.temporal_embed"].shape == (1, 2, 32)


def test_paragraph_text_augmentation_keeps_caption_order():
    from videotext.data.frames import sample_text

    captions = ["one.", "two.", "three."]
    seen = {sample_text(captions, np.random.default_rng(s), paragraph=True) for s in range(40)}
    assert "one. two. three." in seen and "one. three." in seen and "three. one." not in seen
    assert seen <= {"one.", "two.", "three.", "one. two.", "one. three.", "two. three.", "one. two. three."}
    assert sample_text(captions, np.random.default_rng(0)) in captions


def test_curriculum_stages_have_their_own_batch_sizes(data, tmp_path):
    """§4.3: 1-frame stages use a larger batch than 2-frame ones; steps and the LR schedule follow."""
    from videotext.train.trainer import Trainer

    config = curriculum_config(data, "model.frame_batch_sizes=[3, 1]", "train.batch_size=2",
                               "schedule.warmup_steps=0", "schedule.decay=linear")
    trainer = Trainer(config, tmp_path / "run", progress=False)
    trainer.fit()
    from videotext.data.loaders import epoch_length

    assert [epoch_length(trainer.batches, e) for e in (0, 1)] == [1, 3]  # 3 videos: 1 batch of 3, 3 of 1
    assert trainer.batches.batch(0, 0)["video"]["frames"].shape[:2] == (3, 1)
    assert trainer.batches.batch(1, 2)["video"]["frames"].shape[:2] == (1, 2)
    assert trainer.total_steps == 4
    train = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in train if x["kind"] == "train"]
    assert [x["step"] for x in train] == [1, 2, 3, 4]
    assert [x["epoch"] for x in train] == pytest.approx([1.0, 1 + 1 / 3, 1 + 2 / 3, 2.0])
    assert train[-1]["lr"] == pytest.approx(0.0)  # the linear decay ends exactly at the last step
    from videotext.config import ConfigError
    from videotext.models.registry import build_method

    with pytest.raises(ConfigError, match="frame_batch_sizes"):
        build_method("frozen", {"preset": "tiny", "num_frames": 2, "frame_schedule": [1, 2],
                                "frame_schedule_epochs": [0, 1], "frame_batch_sizes": [3]})


def test_a_stage_batch_larger_than_the_split_is_a_clear_error(data, tmp_path):
    from videotext.errors import VideoTextError
    from videotext.train.trainer import Trainer

    config = curriculum_config(data, "model.frame_batch_sizes=[3, 4]", "train.batch_size=2")
    with pytest.raises(VideoTextError, match="batch size of epoch 2 .* larger than .* \\(3 videos\\)"):
        Trainer(config, tmp_path / "run", progress=False).fit()
