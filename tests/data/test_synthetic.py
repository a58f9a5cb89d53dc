"""The procedural dataset: text, timing, splits, determinism, resume, and the real mp4s."""
from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import av
import numpy as np
import pytest

from videotext.data.schema import VideoTextDataset
from videotext.data.synthetic import (
    ACTION_PHRASES,
    COLOURS,
    SHAPE_TONES_HZ,
    SynthesisError,
    VideoSpec,
    assign_splits,
    generate_specs,
    is_rendered,
    object_states,
    render_audio,
    render_frames,
    render_video,
    synthesize,
)
from videotext.data.synthetic.vocab import OPPOSITE, POSITION_RANGE

N = 32
SEED = 0
SIZE, FPS, DURATION, RATE = 128, 8, 6.0, 16000


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, VideoTextDataset]:
    """The 32-video fixture, rendered by two worker processes."""
    out = tmp_path_factory.mktemp("synth")
    return out, synthesize(out, N, SEED, workers=2, progress=False)


@pytest.fixture(scope="module")
def specs() -> dict[str, VideoSpec]:
    return {s.id: s for s in generate_specs(N, SEED)}


def decode(path: Path) -> tuple[np.ndarray, np.ndarray, dict]:
    """Frames [T, H, W, 3] uint8, mono audio [S] float32, and stream facts."""
    with av.open(str(path)) as container:
        video, audio = container.streams.video[0], container.streams.audio[0]
        info = {
            "video_codec": video.codec_context.name,
            "pix_fmt": video.codec_context.pix_fmt,
            "profile": video.codec_context.profile,
            "width": video.codec_context.width,
            "height": video.codec_context.height,
            "audio_codec": audio.codec_context.name,
            "sample_rate": audio.codec_context.sample_rate,
            "channels": audio.codec_context.channels,
        }
        frames = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
    with av.open(str(path)) as container:
        sound = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(audio=0)])
    return frames, sound, info


# --- specs and text (pure) -------------------------------------------------------------------
def test_counts_and_text(built, specs):
    _, dataset = built
    assert len(dataset) == N
    for video in dataset:
        spec = specs[video.id]
        assert 2 <= len(video.segments) <= 4
        assert len(video.captions) >= 5 and len(set(video.captions)) == len(video.captions)
        assert video.duration == DURATION
        starts = [s.start for s in video.segments]
        assert starts == sorted(starts)
        for seg, nxt in zip(video.segments, video.segments[1:]):
            assert seg.end <= nxt.start
        assert all(0 <= s.start < s.end <= DURATION and s.duration >= 1.0 for s in video.segments)
        assert video.paragraph == " ".join(spec.sentences)
        events = video.meta["events"]
        assert [(e["start"], e["end"]) for e in events] == [(s.start, s.end) for s in video.segments]
        for seg, event in zip(video.segments, events):
            name = f"{event['colour']} {event['shape']}"
            assert name in seg.sentence and ACTION_PHRASES[event["action"]][0] in seg.sentence


def test_captions_name_events_in_order(built):
    _, dataset = built
    for video in dataset:
        names = [f"{e['colour']} {e['shape']}" for e in video.meta["events"]]
        for caption in [video.paragraph, *video.captions]:
            position = -1
            for name, event in zip(names, video.meta["events"]):
                position = caption.find(name, position + 1)
                assert position >= 0, (caption, names)
                # the event's verb phrase (some synonym) follows its object
                assert any(caption.startswith(p, position + len(name) + 1) for p in ACTION_PHRASES[event["action"]])


def test_splits_cover_everything_and_keep_groups_together(built):
    _, dataset = built
    assert list(dataset.splits) == ["train", "val", "test"]
    ids = [i for split in dataset.splits.values() for i in split]
    assert sorted(ids) == sorted(dataset.videos) and len(ids) == N
    assert [len(v) for v in dataset.splits.values()] == [26, 3, 3]
    split_of = {i: name for name, split in dataset.splits.items() for i in split}
    groups: dict[str, set[str]] = {}
    for video in dataset:
        if "group" in video.meta:
            groups.setdefault(video.meta["group"], set()).add(split_of[video.id])
    assert groups and all(len(s) == 1 for s in groups.values())


def test_specs_at_scale_are_valid_and_varied():
    specs = generate_specs(600, 3)
    assert len(specs) == 600 and len({s.id for s in specs}) == 600
    actions = Counter(e.action for s in specs for e in s.events)
    assert set(actions) == set(ACTION_PHRASES)
    shared_colour = shared_shape = 0
    for spec in specs:
        colours = Counter(o.colour for o in spec.objects)
        shapes = Counter(o.shape for o in spec.objects)
        shared_colour += max(colours.values()) > 1
        shared_shape += max(shapes.values()) > 1
        assert len({o.name for o in spec.objects}) == len(spec.objects)
        assert all(not (e.action == "spin" and spec.objects[e.object].shape == "circle") for e in spec.events)
        for index, obj in enumerate(spec.objects):  # appear first, vanish last, starts hidden iff it appears
            mine = [e.action for e in spec.events if e.object == index]
            assert mine, "every object acts"
            assert "appear" not in mine[1:] and "vanish" not in mine[:-1]
            assert obj.visible == (mine[0] != "appear")
        for t in np.linspace(0, spec.duration, 13):  # centres stay inside the range
            for state in object_states(spec, float(t)):
                assert POSITION_RANGE[0] - 1e-6 <= state.x <= POSITION_RANGE[1] + 1e-6
                assert POSITION_RANGE[0] - 1e-6 <= state.y <= POSITION_RANGE[1] + 1e-6
    assert shared_colour > 60 and shared_shape > 60

    by_id = {s.id: s for s in specs}
    kinds = Counter()
    for spec in specs:
        if spec.distractor_of is None:
            continue
        base = by_id[spec.distractor_of]
        kinds[spec.distractor_kind] += 1
        assert spec.group == base.group and [o.name for o in spec.objects] == [o.name for o in base.objects]
        assert [(e.start, e.end) for e in spec.events] == [(e.start, e.end) for e in base.events]
        mine = [(e.object, e.action) for e in spec.events]
        theirs = [(e.object, e.action) for e in base.events]
        if spec.distractor_kind == "order":
            assert mine != theirs and sorted(mine) == sorted(theirs)
            assert spec.order_sensitive and base.order_sensitive
        else:
            changed = [(a, b) for a, b in zip(mine, theirs) if a != b]
            assert len(changed) == 1 and OPPOSITE[changed[0][0][1]] == changed[0][1][1]
    assert kinds["order"] > 10 and kinds["direction"] > 10
    grouped = sum(s.group is not None for s in specs)
    assert 0.15 * len(specs) < grouped < 0.6 * len(specs)

    splits = assign_splits(specs, 3)
    assert [len(v) for v in splits.values()] == pytest.approx([480, 60, 60], abs=3)


def test_specs_deterministic_per_seed_and_prefix_stable():
    first, again, other = generate_specs(N, SEED), generate_specs(N, SEED), generate_specs(N, SEED + 1)
    assert first == again
    assert [s.captions for s in first] != [s.captions for s in other]
    assert [s.events for s in first] != [s.events for s in other]
    small = generate_specs(10, SEED)  # a smaller dataset is a prefix (up to a group cut at its end)
    assert [s.captions for s in small[:8]] == [s.captions for s in first[:8]]
    assert assign_splits(first, SEED) == assign_splits(again, SEED)


def test_audio_signal_has_each_shapes_tone():
    spec = generate_specs(1, 5)[0]
    audio = render_audio(spec, RATE)
    assert audio.shape == (int(DURATION * RATE),) and np.abs(audio).max() <= 1.0
    for event in spec.events:
        assert _dominant(audio, event.start, event.end) == pytest.approx(
            SHAPE_TONES_HZ[spec.objects[event.object].shape], abs=3
        )


def test_bad_arguments_are_clear(tmp_path):
    with pytest.raises(SynthesisError, match="size"):
        synthesize(tmp_path, 2, size=127, progress=False)
    with pytest.raises(SynthesisError, match="split_fractions"):
        synthesize(tmp_path, 2, split_fractions=(0.5, 0.2), progress=False)
    with pytest.raises(ValueError):
        generate_specs(0)


# --- files ---------------------------------------------------------------------------------
def test_manifest_round_trip(built):
    out, dataset = built
    loaded = VideoTextDataset.load(out / "manifest.json")
    assert loaded.to_dict() == dataset.to_dict()
    assert loaded.root == dataset.root
    for video in loaded:
        assert video.path == f"videos/{video.id}.mp4"
        assert loaded.media_path(video) == out.resolve() / "videos" / f"{video.id}.mp4"
        assert loaded.media_path(video).is_file()


def test_mp4_is_browser_h264_with_aac(built):
    out, dataset = built
    frames, sound, info = decode(dataset.media_path("synth000000"))
    assert info["video_codec"] == "h264" and info["pix_fmt"] == "yuv420p"
    assert "Baseline" in info["profile"]
    assert (info["width"], info["height"]) == (SIZE, SIZE)
    assert abs(len(frames) - DURATION * FPS) <= 1 and frames.shape[1:] == (SIZE, SIZE, 3)
    assert info["audio_codec"] == "aac" and info["sample_rate"] == RATE and info["channels"] == 1
    # AAC pads to whole 1024-sample frames: allow up to two frames more than the video
    assert DURATION * RATE <= len(sound) <= DURATION * RATE + 2048


def _dominant(sound: np.ndarray, start: float, end: float) -> float:
    """The strongest frequency (Hz) of `sound` inside [start + 0.1, end − 0.1] s."""
    piece = sound[int((start + 0.1) * RATE) : int((end - 0.1) * RATE)]
    spectrum = np.abs(np.fft.rfft(piece * np.hanning(len(piece))))
    return float(np.fft.rfftfreq(len(piece), 1 / RATE)[spectrum.argmax()])


def test_decoded_pixels_and_sound_follow_the_events(built, specs):
    _, dataset = built
    checked = 0
    for vid in list(dataset.videos)[:8]:
        video, spec = dataset[vid], specs[vid]
        assert video.meta["events"] == spec.event_records()
        frames, sound, _ = decode(dataset.media_path(video))
        for event in spec.events:
            obj = spec.objects[event.object]
            # audio: the acting shape's tone dominates during its event
            assert _dominant(sound, event.start, event.end) == pytest.approx(SHAPE_TONES_HZ[obj.shape], abs=3)
            # video: the colour at the object's centre, mid-event, is the declared one
            index = int(round((event.start + event.end) / 2 * FPS))
            state = object_states(spec, index / FPS)[event.object]
            x, y = int(state.x * SIZE), int(state.y * SIZE)
            patch = frames[index, y - 1 : y + 2, x - 1 : x + 2].reshape(-1, 3).astype(float).mean(0)
            assert np.abs(patch - COLOURS[obj.colour]).max() < 25, (vid, event, patch)
            checked += 1
    assert checked >= 16
    # the whole decoded video is close to what was rendered (H.264 loses little on flat shapes)
    rendered = render_frames(spec, SIZE, FPS).astype(float)
    assert np.abs(frames.astype(float) - rendered).mean() < 3


def test_deterministic_resumable_and_atomic(built, tmp_path):
    out, dataset = built
    copy = tmp_path / "copy"
    shutil.copytree(out / "videos", copy / "videos")
    (copy / "videos" / "synth000001.mp4").unlink()  # missing: must be rendered
    (copy / "videos" / "synth000002.mp4").write_bytes(b"half a file")  # broken: must be re-rendered
    stale = copy / "videos" / ".synth000003.mp4.x1y2.tmp"  # a killed run's temp file
    stale.write_bytes(b"junk")
    kept = copy / "videos" / "synth000004.mp4"
    before = kept.stat().st_mtime_ns

    again = synthesize(copy, N, SEED, workers=1, progress=False)  # one process: same bytes as two
    assert (copy / "manifest.json").read_bytes() == (out / "manifest.json").read_bytes()
    assert again.to_dict() == dataset.to_dict()
    assert kept.stat().st_mtime_ns == before and not stale.exists()
    for name in ("synth000001.mp4", "synth000002.mp4"):
        assert (copy / "videos" / name).read_bytes() == (out / "videos" / name).read_bytes()
    frames_a, sound_a, _ = decode(copy / "videos" / "synth000001.mp4")
    frames_b, sound_b, _ = decode(out / "videos" / "synth000001.mp4")
    assert np.array_equal(frames_a, frames_b) and np.array_equal(sound_a, sound_b)
    assert not list((copy / "videos").glob(".*"))


def test_render_video_parameters_and_fingerprint(tmp_path, specs):
    spec = specs["synth000005"]
    path = render_video(spec, tmp_path / "small.mp4", size=64, fps=4)
    frames, _, info = decode(path)
    assert frames.shape == (int(DURATION * 4), 64, 64, 3)
    assert np.array_equal(render_frames(spec, 64, 4)[0].shape, frames[0].shape)
    assert is_rendered(spec, path, size=64, fps=4)
    assert not is_rendered(spec, path, size=128, fps=8)  # other parameters: render again
    assert not is_rendered(specs["synth000006"], path, size=64, fps=4)  # other content
    assert not is_rendered(spec, tmp_path / "missing.mp4")


# --- the noisy narration track ------------------------------------------------------
def test_narration_track_is_noisy_loosely_aligned_and_deterministic(built, specs):
    from videotext.data.synthetic.narration import FILLERS, JITTER_S, UNRELATED, filler_share, narrate

    out, dataset = built
    assert all(not v.speech for v in dataset)  # off by default: the manifest has no speech
    lines = {vid: narrate(spec, DURATION, SEED) for vid, spec in specs.items()}
    assert lines == {vid: narrate(spec, DURATION, SEED) for vid, spec in specs.items()}  # deterministic
    assert lines != {vid: narrate(spec, DURATION, SEED + 1) for vid, spec in specs.items()}
    on_topic, shifts = [], []
    for vid, spec in specs.items():
        speech = lines[vid]
        assert len(speech) == len(spec.events)
        assert [s.start for s in speech] == sorted(s.start for s in speech)
        assert all(0 <= s.start < s.end <= DURATION for s in speech)
        for line in speech:
            if line.sentence not in UNRELATED:
                on_topic.append(line.sentence)
                assert 0.3 <= filler_share(line.sentence) <= 0.5
        events = sorted(e.start for e in spec.events)
        shifts += [min(abs(s.start - e) for e in events) for s in speech]
    assert max(shifts) <= JITTER_S + 1e-6 and np.mean(shifts) > 0.2  # misaligned, by at most the jitter
    assert 0.6 < len(on_topic) / sum(map(len, lines.values())) < 0.95  # ~20 % of lines are off-topic
    assert len({w for t in on_topic for w in t.split()} & set(FILLERS)) > 10  # varied fillers


def test_synthesize_with_narration_only_adds_speech(built, tmp_path):
    out, dataset = built
    shutil.copytree(out / "videos", tmp_path / "videos")  # rendered already: only the manifest is new
    narrated = synthesize(tmp_path, N, SEED, workers=1, progress=False, narration=True)
    assert narrated.meta["narration"]["jitter_s"] == 1.5
    for video in dataset:
        other = narrated[video.id]
        assert other.speech and other.captions == video.captions and other.segments == video.segments
    again = VideoTextDataset.load(tmp_path / "manifest.json")
    assert again[video.id].speech == narrated[video.id].speech
