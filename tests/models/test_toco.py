"""The `toco` method: inputs, two-stage similarity vs the exact cross-encoder, loss parts."""
from __future__ import annotations

import pytest
import torch

from videotext.models import build_method

TEXTS = ["A red circle moves to the left.", "A blue square spins then grows.",
         "The green triangle shrinks.", "A red square vanishes.", "A yellow star grows quickly."]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = build_method("toco", {"hidden_dim": 32, "num_heads": 4, "ff_dim": 64, "cheap_dim": 16,
                              "num_negatives": 3, "dropout": 0.0, "score_chunk": 7},
                     expert_dims={"a": 6, "b": 4})
    m.fit_tfidf(TEXTS)
    return m


def video_batch(seed: int = 0, n: int = 5):
    g = torch.Generator().manual_seed(seed)
    lengths_a, lengths_b = [5, 3, 5, 4, 2][:n], [3, 3, 0, 2, 1][:n]
    masks = {"a": torch.tensor([[i < L for i in range(5)] for L in lengths_a]),
             "b": torch.tensor([[i < L for i in range(3)] for L in lengths_b])}
    return {"features": {"a": torch.randn(n, 5, 6, generator=g), "b": torch.randn(n, 3, 4, generator=g)},
            "masks": masks}


def test_prepare_text_marks_pieces_of_interest(model):
    batch = model.prepare_text(TEXTS[:1])
    assert batch["input_ids"].shape == (1, 30)  # padded to max_text_tokens (§4.2) so batches concatenate
    pieces = model._tokenizer.convert_ids_to_tokens(batch["input_ids"][0])
    chosen = [p for p, keep in zip(pieces, batch["interest"][0]) if keep]
    assert {"red", "circle", "moves"} <= set(chosen) and not {"a", "to", "the", "[CLS]", "."} & set(chosen)
    assert batch["valid"][0].sum().item() == len(model._tokenizer.tokenize(TEXTS[0]))


def test_video_tokens_align_experts_by_relative_time(model):
    # one-hot rows make every time step distinguishable after the per-expert LayerNorm
    feats = {"a": torch.eye(6).unsqueeze(0), "b": torch.eye(4)[:3].unsqueeze(0)}
    masks = {"a": torch.ones(1, 6, dtype=torch.bool), "b": torch.ones(1, 3, dtype=torch.bool)}
    with torch.no_grad():
        raw, keep = model.video_tokens({"features": feats, "masks": masks})
        norm_a, norm_b = model.expert_norms["a"], model.expert_norms["b"]
        assert raw.shape == (1, 6, 10) and keep.all()
        assert torch.allclose(raw[0, :, :6], norm_a(feats["a"][0]))  # 6 steps over 6 tokens: 0..5
        index_b = torch.tensor([0, 0, 1, 1, 2, 2])  # floor((i + 0.5) · 3 / 6): same relative time
        assert torch.allclose(raw[0, :, 6:], norm_b(feats["b"][0, index_b]))
        long = {"features": {"a": torch.randn(1, 60, 6), "b": torch.randn(1, 3, 4)},
                "masks": {"a": torch.ones(1, 60, dtype=torch.bool), "b": torch.zeros(1, 3, dtype=torch.bool)}}
        raw, keep = model.video_tokens(long)
        assert raw.shape == (1, 48, 10)  # capped at max_video_tokens (§4.2)
        assert torch.allclose(raw[0, :, :6], norm_a(long["features"]["a"][0, ((torch.arange(48) + 0.5) * 60 / 48).long()]))
        assert raw[..., 6:].abs().sum().item() == 0.0  # a missing expert contributes zeros


@torch.no_grad()
def test_two_stage_similarity_reorders_the_shortlist_by_the_fusion_scores(model):
    model.eval()
    text = model.encode_text(model.prepare_text(TEXTS))
    video = model.encode_video(video_batch())
    assert text["tokens"].shape == (5, 30, 384) and video["tokens"].shape == (5, 48, 32)
    exact = model.full_similarity(text, video)  # [5, 5] f + λ f^t for every pair
    cheap = model.cheap_similarity(text, video)
    model.config.rerank_top_k = 0
    assert torch.equal(model.similarity(text, video), cheap)
    model.config.rerank_top_k = 5  # shortlist = everything: the ranking is the exact cross-encoder's
    assert torch.equal(model.similarity(text, video).argsort(1), exact.argsort(1))
    model.config.rerank_top_k = 2
    two = model.similarity(text, video)
    top = cheap.topk(2, dim=1).indices
    for row in range(5):
        rest = [j for j in range(5) if j not in top[row]]
        assert two[row, rest].tolist() == cheap[row, rest].tolist()  # outside the shortlist: cheap scores
        assert two[row, top[row]].min() > cheap.max()  # the shortlist ranks above every cheap score
        a, b = top[row].tolist()
        assert (two[row, a] > two[row, b]) == (exact[row, a] > exact[row, b])
    model.config.rerank_top_k = 16


@torch.no_grad()
def test_inference_score_is_f_plus_lambda_weighted_token_scores(model):
    model.eval()
    text = model.encode_text(model.prepare_text(TEXTS))
    video = model.encode_video(video_batch())
    f, ft = model.fuse(text, video, torch.tensor([1]), torch.tensor([3]))
    weights = text["weights"][1, : ft.shape[1]]
    assert weights.sum().item() == pytest.approx(1.0, abs=1e-6)
    expected = f + 0.5 * (ft * weights).sum(1)
    # scored inside a chunk of pairs with other (longer / shorter) texts and videos: padding must not matter
    scores = model.rerank(text, video)
    assert scores[1, 3].item() == pytest.approx(expected.item(), abs=1e-5)
    assert torch.allclose(model.rerank({k: v[1:2] for k, v in text.items()}, video), scores[1:2], atol=1e-5)


def test_loss_parts_and_hard_negative_gradients(model):
    model.train()
    batch = {"text": model.prepare_text(TEXTS), "video": video_batch()}
    out = model.loss(batch)
    assert set(out) == {"loss", "global", "token", "cheap"}
    total = out["global"] + 0.5 * out["token"] + out["cheap"]
    assert out["loss"].item() == pytest.approx(total.item(), rel=1e-6)
    out["loss"].backward()
    assert model.token_head.net[0].weight.grad.abs().sum() > 0
    assert model.cheap_text.weight.grad.abs().sum() > 0
    model.zero_grad()
    model.config.token_weight = 0.0  # the λ = 0 baseline: no token loss, f^t untouched
    try:
        out = model.loss(batch)
        assert set(out) == {"loss", "global", "cheap"}
        out["loss"].backward()
        assert model.token_head.net[0].weight.grad is None or model.token_head.net[0].weight.grad.abs().sum() == 0
    finally:
        model.config.token_weight = 0.5
        model.zero_grad()


def _grad_norm(module: torch.nn.Module) -> float:
    return sum(float(p.grad.abs().sum()) for p in module.parameters() if p.grad is not None)


@pytest.mark.parametrize("cheap_input", ["shared", "raw"])
def test_cheap_input_raw_keeps_the_cheap_loss_off_the_fusion_projections(cheap_input):
    torch.manual_seed(0)
    m = build_method("toco", {"hidden_dim": 32, "num_heads": 4, "ff_dim": 64, "cheap_dim": 16, "num_negatives": 3,
                              "dropout": 0.0, "cheap_input": cheap_input}, expert_dims={"a": 6, "b": 4})
    m.fit_tfidf(TEXTS)
    out = m.loss({"text": m.prepare_text(TEXTS), "video": video_batch()})
    out["cheap"].backward()
    assert m.cheap_video.in_features == (10 if cheap_input == "raw" else 32)  # Σ expert dims vs fusion width
    assert m.cheap_text.in_features == (384 if cheap_input == "raw" else 32)  # MiniLM embeddings vs fusion width
    assert _grad_norm(m.cheap_video) > 0 and _grad_norm(m.cheap_text) > 0
    touched = _grad_norm(m.video_proj) + _grad_norm(m.text_proj)
    assert (touched == 0.0) == (cheap_input == "raw")
    with torch.no_grad():  # raw: the pooled vector is the masked mean of x, mapped by the cheap scorer's own layer
        raw, keep = m.video_tokens(video_batch())
        video = m.encode_video(video_batch())
    if cheap_input == "raw":
        expected = m.cheap_video(raw.sum(1) / keep.sum(1, keepdim=True))
        assert torch.allclose(video["pooled"], torch.nn.functional.normalize(expected, dim=-1), atol=1e-6)


def test_hard_fraction_mixes_mined_and_random_negatives(monkeypatch):
    import videotext.models.toco as toco

    seen = []
    real = toco.sample_negatives
    monkeypatch.setattr(toco, "sample_negatives", lambda *a, **k: seen.append(k["hard"]) or real(*a, **k))
    torch.manual_seed(0)
    for negatives, fraction, hard in [("hard", 1.0, 3), ("hard", 0.5, 2), ("hard", 0.0, 0), ("random", 1.0, 0)]:
        m = build_method("toco", {"hidden_dim": 32, "num_heads": 4, "ff_dim": 64, "cheap_dim": 16, "num_negatives": 3,
                                  "negatives": negatives, "hard_fraction": fraction}, expert_dims={"a": 6, "b": 4})
        m.loss({"text": m.prepare_text(TEXTS), "video": video_batch()})
        assert seen[-1] == hard  # round(3 · 0.5) = 2 mined, 1 random
    from videotext.config import ConfigError
    with pytest.raises(ConfigError, match="hard_fraction"):
        build_method("toco", {"hard_fraction": 1.5}, expert_dims={"a": 6})
    with pytest.raises(ConfigError, match="cheap_input"):
        build_method("toco", {"cheap_input": "pooled"}, expert_dims={"a": 6})


@torch.no_grad()
def test_bench_two_stage_from_the_full_matrices_matches_similarity(model):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "toco_two_stage.py"
    spec = importlib.util.spec_from_file_location("toco_two_stage", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    model.eval()
    text = model.encode_text(model.prepare_text(TEXTS))
    video = model.encode_video(video_batch())
    cheap, exact = model.cheap_similarity(text, video), model.full_similarity(text, video)
    for k in (1, 2, 4):
        model.config.rerank_top_k = k
        assert torch.equal(bench.two_stage_from(cheap, exact, k).argsort(1), model.similarity(text, video).argsort(1))
    model.config.rerank_top_k = 16
    assert bench.query_subset(10, 4).tolist() == [0, 3, 6, 9]
