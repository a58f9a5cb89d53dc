"""The public API's dtype contract: float32 (or float64 / bf16) in, float32 out, at every
`precision`, bf16 kept inside.

`load_model(..., precision="bf16")` stores Frozen's space-time tower in bf16
(`cast_for_inference`) and runs every method under bf16 autocast; `LoadedModel.encode_text`,
`encode_video`, `encode_videos`, `similarity`, `search`, `Index.search` and the HTTP service
still take float32 arrays and give float32 embeddings and plain float scores. Against fp32,
bf16 stays within the cosine bounds below on AMD (AVX512-BF16) and Intel (AMX) CPUs, whose bf16
kernels round differently: each bound leaves many times the error measured on both, with their
native kernels and under oneDNN's emulated ones (ONEDNN_MAX_CPU_ISA=AVX512_CORE).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from videotext.errors import VideoTextError

PRECISIONS = ["fp32", "bf16"]
FRAMES = 4  # frames per clip of the tiny Frozen model
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "red", "blue", "green", "square", "squares", "circle",
         "triangle", "dot", "moves", "spins", "left", "two"]


def min_cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(F.cosine_similarity(a, b, dim=1).min())


def assert_float32(x: torch.Tensor, shape: tuple[int, ...]) -> None:
    assert isinstance(x, torch.Tensor) and x.dtype is torch.float32 and x.device.type == "cpu"
    assert tuple(x.shape) == shape and bool(torch.isfinite(x).all())


# --- runs ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def frozen_run(tmp_path_factory) -> Path:
    """A run folder of the tiny Frozen preset with random weights and a tiny DistilBERT text
    tower (a folder of config + tokenizer), what `load_model` reads."""
    from transformers import DistilBertConfig, DistilBertModel, DistilBertTokenizerFast

    from videotext.config import DataConfig, RunConfig, save_config, to_plain
    from videotext.models import build_method
    from videotext.train.checkpoint import save_checkpoint

    text_model = tmp_path_factory.mktemp("distilbert")
    (text_model / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    tokenizer = DistilBertTokenizerFast.from_pretrained(text_model)  # reads vocab.txt (vocab_file= alone gives a 5-token vocabulary)
    assert tokenizer.unk_token_id not in tokenizer("red circle")["input_ids"]  # the words are known
    tokenizer.save_pretrained(text_model)
    torch.manual_seed(0)
    DistilBertModel(DistilBertConfig(vocab_size=len(VOCAB), dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                     max_position_embeddings=32)).save_pretrained(text_model)
    run = tmp_path_factory.mktemp("frozen_run")
    method = build_method("frozen", {"preset": "tiny", "num_frames": FRAMES, "freeze_text": True,
                                     "time_init": "random", "text_model": str(text_model)})
    config = RunConfig(method="frozen", model=to_plain(method.config), data=DataConfig(experts=[]),
                       out_dir=str(run), name="tiny frozen")
    save_config(config, run / "config.yaml")
    save_checkpoint(run / "checkpoints" / "best", method, {"method": "frozen", "model": config.model,
                                                           "expert_dims": None})
    return run


@pytest.fixture(scope="module")
def dual_run(tiny_synth, tmp_path_factory) -> Path:
    """`dual` trained for 3 epochs on the tiny synthetic fixture's features."""
    from tests.conftest import tiny_config_overrides
    from videotext.config import load_config
    from videotext.train.trainer import Trainer

    run = tmp_path_factory.mktemp("dual_run") / "run"
    Trainer(load_config("dual/synthetic", tiny_config_overrides(tiny_synth)), run, progress=False).fit()
    return run


def frames_batch(size: int, videos: int = 3, seed: int = 1) -> torch.Tensor:
    """Normalised-pixel-like frames [B, T, 3, H, W], float32."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(videos, FRAMES, 3, size, size, generator=generator)


def store_features(root: Path, experts: list[str], ids: list[str]) -> dict[str, np.ndarray]:
    """{expert: [B, T, D]} float32 of `ids`, each cut to the shortest of them (equal T)."""
    from videotext.data.features import FeatureStore

    store = FeatureStore(root / "features")
    out = {}
    for expert in experts:
        rows = [store.get(expert, i)[0] for i in ids]
        steps = min(len(r) for r in rows)
        out[expert] = np.stack([r[:steps] for r in rows]).astype(np.float32)
    return out


# --- Frozen: bf16 weights inside, float32 at the boundary ---------------------------------------
@pytest.mark.parametrize("precision", PRECISIONS)
def test_frozen_takes_float32_frames_and_gives_float32_embeddings(frozen_run, precision):
    from videotext.inference import load_model

    model = load_model(frozen_run, device="cpu", precision=precision)
    tower = model.method.video_model.cls_token.dtype
    assert tower is (torch.bfloat16 if precision == "bf16" else torch.float32)
    size, embed = model.method.img_size, model.method.config.embed_dim
    frames = frames_batch(size)
    video = model.encode_video(frames)
    assert_float32(video, (3, embed))
    # under bf16 the norm and the division round to 8 bits (worst case about 2^-8; measured 0.0034 on
    # AMD, 0.0030 on Intel AMX)
    unit = 1e-5 if precision == "fp32" else 2**-7
    torch.testing.assert_close(video.norm(dim=1), torch.ones(3), atol=unit, rtol=0)
    text = model.encode_text(["a red circle moves left", "a blue square"])
    assert_float32(text, (2, embed))
    scores = model.similarity(text, video)
    assert_float32(scores, (2, 3))
    torch.testing.assert_close(scores, text @ video.T)
    # float64 frames are cast to the same float32 input; bf16 frames lose only their rounding
    assert torch.equal(model.encode_video(frames.double()), video)
    assert torch.equal(model.encode_video(frames.numpy()), video)
    from_bf16 = model.encode_video(frames.bfloat16())
    assert from_bf16.dtype is torch.float32 and min_cosine(from_bf16, video) >= 0.999  # measured 0.9999998
    assert model.similarity(text.double(), video.numpy()).dtype is torch.float32


def test_frozen_bf16_run_is_within_cosine_0999_of_fp32(frozen_run):
    from videotext.inference import load_model

    fp32, bf16 = (load_model(frozen_run, device="cpu", precision=p) for p in PRECISIONS)
    frames = frames_batch(fp32.method.img_size, videos=4, seed=2)
    texts = ["a red circle moves left", "two squares", "a blue triangle spins", "a green dot"]
    video32, video16 = fp32.encode_video(frames), bf16.encode_video(frames)
    text32, text16 = fp32.encode_text(texts), bf16.encode_text(texts)
    # measured min cosine video 0.999975 / text 0.999995 on AMD EPYC (AVX512-BF16), video 0.999980 /
    # text 0.999995 on Intel Xeon (AMX), each the same under ONEDNN_MAX_CPU_ISA=AVX512_CORE (emulated
    # bf16): the bound leaves 40x the larger error
    assert min_cosine(video16, video32) >= 0.999
    assert min_cosine(text16, text32) >= 0.999
    assert not torch.equal(video16, video32)  # the bf16 tower really ran


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("precision", PRECISIONS)
def test_frozen_on_cuda_takes_cpu_float32_and_gives_cpu_float32(frozen_run, precision):
    """On a GPU the boundary also moves: CPU float32 in, CPU float32 out, the network on the device."""
    from videotext.inference import load_model

    cpu = load_model(frozen_run, device="cpu", precision="fp32")
    gpu = load_model(frozen_run, device="cuda", precision=precision)
    assert gpu.method.video_model.cls_token.device.type == "cuda"
    frames = frames_batch(cpu.method.img_size, videos=4, seed=2)
    texts = ["a red circle moves left", "two squares", "a blue triangle spins", "a green dot"]
    video, text = gpu.encode_video(frames), gpu.encode_text(texts)
    embed = cpu.method.config.embed_dim
    assert_float32(video, (4, embed))
    assert_float32(text, (4, embed))
    assert_float32(gpu.similarity(text, video), (4, 4))
    # measured min cosine to the CPU's fp32 on an H100: bf16 video 0.999983 / text 0.999996, fp32 1.00000
    assert min_cosine(video, cpu.encode_video(frames)) >= 0.999
    assert min_cosine(text, cpu.encode_text(texts)) >= 0.999


def test_frozen_wrong_inputs_raise_one_clear_error(frozen_run):
    from videotext.inference import load_model

    model = load_model(frozen_run, device="cpu", precision="bf16")
    size = model.method.img_size
    frames = frames_batch(size)
    with pytest.raises(VideoTextError, match=r"frames: expected a float array of shape \[B, T, 3, H, W\], "
                                             r"got shape \[4, 3, 32, 32\]"):
        model.encode_video(frames[0])
    with pytest.raises(VideoTextError, match=rf"frames: expected shape \[B, T, 3, {size}, {size}\] with B >= 1, "
                                             rf"got \[3, 4, 3, 16, 16\]"):
        model.encode_video(frames[..., :16, :16])
    with pytest.raises(VideoTextError, match=r"with B >= 1, got \[0, 4, 3, 32, 32\]"):
        model.encode_video(frames[:0])
    with pytest.raises(VideoTextError, match="frames: 8 frames given, the model has temporal embeddings for 4"):
        model.encode_video(torch.cat([frames, frames], dim=1))
    with pytest.raises(VideoTextError, match="frames: expected a float array .* got Tensor of dtype uint8"):
        model.encode_video(frames.to(torch.uint8))
    with pytest.raises(VideoTextError, match="frames: expected a float array .* got list of uneven lengths"):
        model.encode_video([[1.0, 2.0], [3.0]])
    with pytest.raises(VideoTextError, match="frames: expected a float array .* got str of dtype <U5"):
        model.encode_video("video")
    with pytest.raises(VideoTextError, match="texts: expected a string or a list of strings, got int at position 1"):
        model.encode_text(["a red circle", 3])
    with pytest.raises(VideoTextError, match="texts: expected a string or a list of strings, got Tensor"):
        model.encode_text(torch.zeros(2, 8))
    with pytest.raises(VideoTextError, match="texts: expected a string or a list of strings, got an empty list"):
        model.encode_text([])
    with pytest.raises(VideoTextError, match=r"video vectors: expected width D = 256 .* got shape \[3, 8\]"):
        model.similarity(torch.zeros(2, 256), torch.zeros(3, 8))


# --- dual: a feature method under bf16 autocast ----------------------------------------------
@pytest.mark.parametrize("precision", PRECISIONS)
def test_dual_takes_float32_features_and_gives_float32_embeddings(dual_run, tiny_synth, precision):
    from videotext.data.schema import VideoTextDataset
    from videotext.inference import load_model

    model = load_model(dual_run, device="cpu", precision=precision)
    embed = model.method.config.embed_dim
    dataset = VideoTextDataset.load(tiny_synth / "manifest.json")
    reader = model.features_for(dataset, tiny_synth / "features", progress=False)
    ids = [v.id for v in dataset][:4]
    features = store_features(tiny_synth, model.experts, ids)
    video = model.encode_video(features)
    assert_float32(video, (4, embed))
    # one video at a time, whole: the same vectors as encoding it from the feature store
    whole = model.encode_videos(dataset.subset(ids[:2]), reader)
    assert_float32(whole, (2, embed))
    for row, video_id in enumerate(ids[:2]):
        one = model.encode_video(store_features(tiny_synth, model.experts, [video_id]))
        torch.testing.assert_close(one[0], whole[row], atol=1e-6, rtol=0)
    assert torch.equal(model.encode_video({e: torch.from_numpy(a).double() for e, a in features.items()}), video)
    text = model.encode_text(dataset.videos[ids[0]].captions[:2])
    assert_float32(text, (2, embed))
    assert_float32(model.similarity(text, video), (2, 4))


def test_dual_bf16_run_is_within_cosine_0999_of_fp32(dual_run, tiny_synth):
    from videotext.data.schema import VideoTextDataset
    from videotext.inference import load_model

    fp32, bf16 = (load_model(dual_run, device="cpu", precision=p) for p in PRECISIONS)
    dataset = VideoTextDataset.load(tiny_synth / "manifest.json")
    features = store_features(tiny_synth, fp32.experts, [v.id for v in dataset][:8])
    texts = [v.captions[0] for v in dataset][:8]
    video32, video16 = fp32.encode_video(features), bf16.encode_video(features)
    text32, text16 = fp32.encode_text(texts), bf16.encode_text(texts)
    # measured min cosine video 0.999995 / text 0.999988 on AMD EPYC (AVX512-BF16), the same under
    # ONEDNN_MAX_CPU_ISA=AVX512_CORE (emulated bf16): the bound leaves 80x that error
    assert min_cosine(video16, video32) >= 0.999
    assert min_cosine(text16, text32) >= 0.999
    assert not torch.equal(video16, video32)  # bf16 autocast really ran


def test_dual_wrong_features_raise_one_clear_error(dual_run, tiny_synth):
    from videotext.inference import load_model

    from videotext.data.schema import VideoTextDataset

    model = load_model(dual_run, device="cpu", precision="bf16")
    ids = [v.id for v in VideoTextDataset.load(tiny_synth / "manifest.json")][:2]
    features = store_features(tiny_synth, model.experts, ids)
    first = model.experts[0]
    with pytest.raises(VideoTextError, match=r"features: expected \{expert: \[B, T, D\] array\} .* got ndarray"):
        model.encode_video(features[first])
    with pytest.raises(VideoTextError, match=r"got unknown \['flow'\]"):
        model.encode_video({**features, "flow": features[first]})
    with pytest.raises(VideoTextError, match=rf"features\['{first}'\]: expected D = {features[first].shape[2]}, "
                                             rf"got shape \[2, \d+, 5\]"):
        model.encode_video({**features, first: features[first][..., :5]})
    with pytest.raises(VideoTextError, match=rf"features\['{first}'\]: expected a float array of shape \[B, T, D\], "
                                             r"got shape \[\d+, \d+\]"):
        model.encode_video({**features, first: features[first][0]})
    with pytest.raises(VideoTextError, match="every expert needs the same number of videos B >= 1"):
        model.encode_video({**features, first: features[first][:1]})
    with pytest.raises(VideoTextError, match="every expert needs the same number of videos B >= 1"):
        model.encode_video({e: a[:0] for e, a in features.items()})


# --- the index and the HTTP service ---------------------------------------------------------
def test_index_takes_any_float_dtype_and_scores_in_float32():
    from videotext.search import Index

    generator = np.random.default_rng(0)
    vectors = generator.standard_normal((20, 16)).astype(np.float32)
    queries = generator.standard_normal((3, 16)).astype(np.float32)
    ids = [f"v{i}" for i in range(20)]
    index, from_f64 = Index(16), Index(16)
    index.add(vectors, ids)
    from_f64.add(vectors.astype(np.float64), ids)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    expected = (q @ unit.T).astype(np.float32)  # [3, 20] cosines
    hits32 = index.search(queries, k=5)
    for given in (queries.astype(np.float64), torch.from_numpy(queries).double(), queries.tolist()):
        for a, b in zip(index.search(given, k=5), hits32):
            assert [h.id for h in a] == [h.id for h in b] and [h.score for h in a] == [h.score for h in b]
    assert [[h.id for h in row] for row in from_f64.search(queries, k=5)] == [[h.id for h in row] for row in hits32]
    for row, hits in enumerate(hits32):
        assert [h.id for h in hits] == [ids[i] for i in np.argsort(-expected[row])[:5]]
        for h in hits:
            assert type(h.score) is float and np.float32(h.score) == h.score  # a float32 value
            assert h.score == pytest.approx(float(expected[row, ids.index(h.id)]), abs=1e-6)
    bf16 = index.search(torch.from_numpy(queries).bfloat16(), k=1)  # rounded queries: the same top hit here
    assert [row[0].id for row in bf16] == [row[0].id for row in hits32]
    with_parts = Index(16)  # bf16 vectors and re-scoring parts are stored as float32
    rounded = torch.from_numpy(vectors[:3]).bfloat16()
    with_parts.add(rounded, ids[:3], parts={"video": rounded})
    stored = with_parts.parts_for(ids[:3])["video"]
    assert stored.dtype == np.float32 and with_parts.embeddings_for(ids[:3]).dtype == np.float32
    np.testing.assert_allclose(stored, vectors[:3], rtol=2**-8)
    with pytest.raises(VideoTextError, match="queries must be a .N, D. matrix of numbers, got list of dtype <U1"):
        index.search([["a", "b"]], k=1)
    with pytest.raises(VideoTextError, match="embeddings must be real numbers, got a tensor of torch.complex64"):
        index.add(torch.zeros(1, 16, dtype=torch.complex64), ["c"])
    with pytest.raises(VideoTextError, match="query dim 8 does not match the index dim 16"):
        index.search(np.zeros((1, 8)), k=1)


def test_service_scores_are_plain_floats_for_a_bf16_model(dual_run, tiny_synth, tmp_path):
    from fastapi.testclient import TestClient

    from videotext.inference import load_model
    from videotext.apps.serve import create_app

    model = load_model(dual_run, device="cpu", precision="bf16")
    index = model.build_index(tiny_synth / "manifest.json", tmp_path / "index", features_dir=tiny_synth / "features",
                              progress=False)
    assert index.embeddings_for(index.ids[:2]).dtype == np.float32
    query = "a red circle moves to the left"
    expected = model.search(query, index, k=5)
    client = TestClient(create_app(tmp_path / "index", precision="bf16"))
    assert client.app.state.live.snapshot.searchable.query_side.dtype is torch.bfloat16  # a precision asks for the model
    response = client.get("/search", params={"q": query, "k": 5})
    assert response.status_code == 200
    results = response.json()["results"]
    assert [r["id"] for r in results] == [h.id for h in expected]
    scores = [r["score"] for r in results]
    assert all(type(s) is float and np.isfinite(s) for s in scores) and scores == sorted(scores, reverse=True)
    assert scores == pytest.approx([h.score for h in expected], abs=1e-6)
    assert -1.0 <= scores[-1] <= scores[0] <= 1.0 + 1e-6
