"""Support-set (Patrick et al. 2021): attention variants on a hand-made batch, pooling head of
eq. 4 (padding invariance, parameter counts of appendix 6.1), the 1D CNN pre-encoder, and the
method's loss = triplet + λ · cross-captioning recomputed by hand."""
from __future__ import annotations

import math

import pytest
import torch

from videotext.config import ConfigError
from videotext.losses import hardest_negative_triplet
from videotext.losses.captioning import mix_support_set, support_mask, support_set_weights
from videotext.models.layers.pooling_head import (
    BiGRUPreEncoder, MaskedBatchNorm, TemporalCNN, TransformerPoolingHead, TransformerPoolingLayer,
)
from videotext.models.registry import build_method

# Hand-made batch of 3 pairs: unit vectors, so <c_t^i, c_v^j> is read off this table.
#            v0    v1    v2
#   t0  [   1.0,  0.6,  0.0 ]
#   t1  [   0.6,  1.0,  0.8 ]
#   t2  [   0.0,  0.8,  1.0 ]    (v = text here; T = 0.5)
_T = 0.5
_A = torch.tensor([[1.0, 0.0, 0.0], [0.6, 0.8, 0.0], [0.0, 1.0, 0.0]], dtype=torch.float64)
_SIMS = [[1.0, 0.6, 0.0], [0.6, 1.0, 0.8], [0.0, 0.8, 1.0]]


def _softmax(values: list[float]) -> list[float]:
    exps = [math.exp(v / _T) for v in values]
    return [e / sum(exps) for e in exps]


def test_identity_is_one_hot():
    weights = support_set_weights(_A, _A, "identity", _T)
    assert torch.equal(weights, torch.eye(3, dtype=torch.float64))


def test_full_is_softmax_over_the_whole_batch():
    weights = support_set_weights(_A, _A, "full", _T)
    for i in range(3):
        assert weights[i].tolist() == pytest.approx(_softmax(_SIMS[i]), abs=1e-12)
    # row 1 by hand: exp(1.2), exp(2.0), exp(1.6) normalised
    total = math.exp(1.2) + math.exp(2.0) + math.exp(1.6)
    assert float(weights[1, 1]) == pytest.approx(math.exp(2.0) / total, abs=1e-12)


def test_cross_gives_zero_weight_to_its_own_video():
    weights = support_set_weights(_A, _A, "cross", _T)
    assert torch.all(weights.diagonal() == 0)
    assert weights.sum(1).tolist() == pytest.approx([1.0, 1.0, 1.0])
    # caption 0 over videos {1, 2}: sims 0.6, 0.0 → exp(1.2) / (exp(1.2) + 1)
    assert float(weights[0, 1]) == pytest.approx(math.exp(1.2) / (math.exp(1.2) + 1.0), abs=1e-12)
    # caption 1 over {0, 2}: sims 0.6, 0.8
    assert float(weights[1, 2]) == pytest.approx(math.exp(1.6) / (math.exp(1.2) + math.exp(1.6)), abs=1e-12)


def test_hybrid_is_the_average_of_identity_and_full():
    full = support_set_weights(_A, _A, "full", _T)
    hybrid = support_set_weights(_A, _A, "hybrid", _T)
    assert torch.allclose(hybrid, 0.5 * (full + torch.eye(3, dtype=torch.float64)), atol=1e-15)
    assert float(hybrid[2, 2]) == pytest.approx(0.5 + 0.5 * _softmax(_SIMS[2])[2], abs=1e-12)


def test_support_size_restricts_the_support_set_to_blocks():
    assert support_mask(4, 2).int().tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]]
    x = torch.nn.functional.normalize(torch.randn(4, 3, generator=torch.Generator().manual_seed(0)), dim=1)
    cross = support_set_weights(x, x, "cross", 0.1, support_size=2)
    assert cross.tolist() == [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]]  # one other video per block
    assert support_set_weights(x, x, "cross", 0.1, support_size=1).abs().sum() == 0  # no support at all
    with pytest.raises(ConfigError, match="variant"):
        support_set_weights(x, x, "none")


def test_mix_support_set_is_the_weighted_sum_with_the_union_of_masks():
    memory = torch.tensor([[[1.0], [2.0], [9.0]], [[10.0], [9.0], [9.0]]])  # [2, 3, 1]; 9 = padding
    mask = torch.tensor([[True, True, False], [True, False, False]])
    weights = torch.tensor([[0.25, 0.75], [0.0, 1.0]])
    mixed, mixed_mask = mix_support_set(weights, memory, mask)
    assert mixed[:, :, 0].tolist() == [[0.25 + 7.5, 0.5, 0.0], [10.0, 0.0, 0.0]]
    assert mixed_mask.tolist() == [[True, True, False], [True, False, False]]


# --- pooling head (eq. 4) -------------------------------------------------------------------
def test_pooling_layer_parameter_count_matches_the_appendix_sizes():
    # d = 1024, 4 heads, FFN 2048 (appendix 6.1): MHA 4d² + 4d, FFN 2·d·f + f + d, two BNs 2·2d
    layer = TransformerPoolingLayer(1024, heads=4, ffn_dim=2048)
    d, f = 1024, 2048
    assert sum(p.numel() for p in layer.parameters()) == (4 * d * d + 4 * d) + (2 * d * f + f + d) + 4 * d == 8_399_872
    # 1024-d bidirectional GRU text pre-encoder on 384-d MiniLM states: 2 · 3 · (h·in + h·h + 2h), h = 512
    gru = BiGRUPreEncoder(384, 1024)
    assert sum(p.numel() for p in gru.parameters()) == 2 * 3 * (512 * 384 + 512 * 512 + 2 * 512) == 2_758_656


def test_temporal_cnn_keeps_length_and_aligns_even_kernels():
    cnn = TemporalCNN(1, 4, kernels=[2, 3, 4, 6])
    for conv in cnn.convs:
        torch.nn.init.ones_(conv.weight)
        torch.nn.init.zeros_(conv.bias)
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]]).unsqueeze(-1)  # [1, 5, 1]
    out = cnn(x, torch.ones(1, 5, dtype=torch.bool))[0].T  # [4 kernels, 5 steps]
    assert out.tolist() == [
        [3, 5, 7, 9, 5],  # k=2: x_t + x_{t+1}
        [3, 6, 9, 12, 9],  # k=3: centred
        [6, 10, 14, 12, 9],  # k=4: x_{t-1} … x_{t+2}
        [10, 15, 15, 14, 12],  # k=6: x_{t-2} … x_{t+3}
    ]


def test_masked_batch_norm_uses_real_steps_only():
    torch.manual_seed(0)
    bn, reference = MaskedBatchNorm(3), torch.nn.BatchNorm1d(3)
    x = torch.randn(2, 4, 3)
    mask = torch.tensor([[True, True, True, False], [True, True, False, False]])
    x_garbage = x.clone()
    x_garbage[~mask] = 1e3
    out = bn(x_garbage, mask)
    assert torch.allclose(out[mask], reference(x[mask]), atol=1e-6)
    assert torch.all(out[~mask] == 0)
    assert torch.allclose(bn.running_mean, reference.running_mean)


def test_pooling_head_output_does_not_depend_on_padding():
    torch.manual_seed(0)
    head = TransformerPoolingHead(TemporalCNN(6, 16, [2, 3, 4, 6]), dim=16, layers=2, heads=4, ffn_dim=32, dropout=0.0)
    x = torch.randn(3, 5, 6)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    padded = torch.cat([x, 50 * torch.randn(3, 4, 6)], 1)  # 4 more padded steps of garbage
    padded[:, :5][~mask] = -7.0
    padded_mask = torch.cat([mask, torch.zeros(3, 4, dtype=torch.bool)], 1)
    for mode in ("train", "eval"):
        getattr(head, mode)()
        first, seq = head(x, mask)
        first_p, seq_p = head(padded, padded_mask)
        assert first.shape == (3, 16)
        assert torch.allclose(first, first_p, atol=1e-5)
        assert torch.allclose(seq[mask], seq_p[:, :5][mask], atol=1e-5)


# --- the method -----------------------------------------------------------------------------
DIMS = {"appearance": 12, "motion": 5}
TEXTS = ["a red circle moves left", "a blue square spins", "two green stars appear", "the big ball grows"]


def _video_batch(seed: int = 0, extra_steps: int = 0) -> dict:
    """4 videos: appearance [4, 7, 12] with lengths 7, 3, 5, 2; motion [4, 5, 5] one step shorter;
    `extra_steps` appends padding (garbage values, masked out)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([7, 3, 5, 2])
    app, mot = torch.randn(4, 7, 12, generator=g), torch.randn(4, 5, 5, generator=g)
    app_mask = torch.arange(7)[None] < lengths[:, None]
    mot_mask = torch.arange(5)[None] < (lengths[:, None] - 1)
    app, mot = app * app_mask[..., None], mot * mot_mask[..., None]
    if extra_steps:
        app = torch.cat([app, torch.full((4, extra_steps, 12), 3.0)], 1)
        mot = torch.cat([mot, torch.full((4, extra_steps, 5), -2.0)], 1)
        app_mask = torch.cat([app_mask, torch.zeros(4, extra_steps, dtype=torch.bool)], 1)
        mot_mask = torch.cat([mot_mask, torch.zeros(4, extra_steps, dtype=torch.bool)], 1)
    return {"features": {"appearance": app, "motion": mot}, "masks": {"appearance": app_mask, "motion": mot_mask}}


@pytest.fixture(scope="module")
def small_model():
    torch.manual_seed(0)
    cfg = {"embed_dim": 32, "ffn_dim": 64, "decoder": "scratch", "decoder_dim": 32, "decoder_ffn_dim": 64,
           "freeze_text": True,
           "dropout": 0.0, "decoder_dropout": 0.0, "temperature": 0.5}
    return build_method("supportset", cfg, expert_dims=DIMS)


def test_loss_is_triplet_plus_lambda_cross_captioning(small_model):
    model = small_model.eval()  # BN on running statistics, no dropout: a deterministic forward
    video, text = _video_batch(), model.prepare_text(TEXTS)
    with torch.no_grad():
        out = model.loss({"video": video, "text": text})
        c_t, c_v = model.encode_text(text), model.encode_video(video)
        triplet = hardest_negative_triplet(c_t @ c_v.T, margin=0.2)
        e_v, mask = model.fuse_experts(video)
        weights = support_set_weights(c_t, c_v, "cross", 0.5)
        memory = torch.einsum("ij,jmd->imd", weights, e_v)
        nll = model.decoder.nll(text["input_ids"], memory, (weights > 0).float() @ mask.float() > 0)
    assert float(out["contrast"]) == pytest.approx(float(triplet["loss"]), abs=1e-6)
    assert float(out["caption"]) == pytest.approx(float(nll), abs=1e-5)
    assert float(out["loss"]) == pytest.approx(float(triplet["loss"]) + 10.0 * float(nll), abs=1e-4)
    assert float(out["caption"]) > 0


def test_fused_video_is_the_concatenation_of_normalised_experts(small_model):
    video = _video_batch()
    e_v, mask = small_model.fuse_experts(video)
    assert e_v.shape == (4, 7, 17) and mask.sum(1).tolist() == [7, 3, 5, 2]  # union of the expert masks
    norm = small_model.expert_norms["motion"]
    assert torch.allclose(e_v[1, :2, 12:], norm(video["features"]["motion"][1, :2]), atol=1e-6)
    assert torch.all(e_v[1, 2:, 12:] == 0)  # motion has 2 real steps in video 1
    assert torch.all(e_v[0, 5:, 12:] == 0)  # motion is 2 steps shorter than appearance: zero-padded


def test_embeddings_are_normalised_and_padding_invariant(small_model):
    model = small_model.eval()
    with torch.no_grad():
        a = model.encode_video(_video_batch())
        b = model.encode_video(_video_batch(extra_steps=4))  # same real steps, more padding
        t = model.encode_text(model.prepare_text(TEXTS))
    assert a.shape == (4, 32) and t.shape == (4, 32)
    assert torch.allclose(a.norm(dim=1), torch.ones(4)) and torch.allclose(t.norm(dim=1), torch.ones(4))
    assert torch.allclose(a, b, atol=1e-5)


def test_cached_token_states_equal_the_encoder_states(small_model):
    batch = small_model.prepare_text(TEXTS)
    with torch.no_grad():
        direct = small_model.text_encoder.token_states(batch)
        cached = small_model.token_features(batch)
        again = small_model.token_features(small_model.prepare_text(TEXTS[::-1]))
    mask = batch["attention_mask"].bool()
    assert torch.allclose(cached[mask], direct[mask], atol=1e-5)
    assert torch.allclose(again[3, : int(mask[0].sum())], direct[0, : int(mask[0].sum())], atol=1e-5)


def test_no_captioning_means_no_decoder_and_pure_triplet():
    torch.manual_seed(0)
    model = build_method("supportset", {"embed_dim": 16, "ffn_dim": 32, "freeze_text": True, "captioning": "none",
                                        "video_pre_encoder": "mlp"}, expert_dims=DIMS)
    assert model.decoder is None
    out = model.loss({"video": _video_batch(), "text": model.prepare_text(TEXTS)})
    assert "caption" not in out and torch.equal(out["loss"], out["contrast"])
    out["loss"].backward()
    assert model.video_head.layers[0].attention.in_proj_weight.grad.abs().sum() > 0


@pytest.mark.parametrize("key,value", [("captioning", "sometimes"), ("video_pre_encoder", "lstm"),
                                       ("caption_memory", "frames")])
def test_bad_config_values_are_named(key, value):
    with pytest.raises(ConfigError, match=f"model.{key}"):
        build_method("supportset", {key: value}, expert_dims=DIMS)


def test_data_text_paragraph_makes_the_joined_segments_the_one_caption():
    from videotext.data.loaders import CaptionVideoBatches, with_text
    from videotext.data.schema import Segment, Video, VideoTextDataset
    from videotext.errors import VideoTextError

    videos = [Video("a", duration=9.0, segments=[Segment(4, 8, "then it spins."), Segment(0, 3, "A ball rolls.")]),
              Video("b", captions=["a plain caption"])]
    data = VideoTextDataset("t", videos, {"train": ["a", "b"]})
    para = with_text(data, "paragraph")
    assert para["a"].captions == ["A ball rolls. then it spins."]  # time order, not file order
    assert para["b"].captions == ["a plain caption"] and para.splits == data.splits
    assert data["a"].captions == [] and with_text(data, "captions") is data  # the input is not modified
    batches = CaptionVideoBatches(para.split("train"), lambda key: {}, lambda texts: texts, 2, seed=0)
    batches.read_features = type("R", (), {"experts": [], "__call__": lambda self, k: {}})()
    assert sorted(batches.batch(0, 0)["text"]) == ["A ball rolls. then it spins.", "a plain caption"]
    with pytest.raises(VideoTextError, match="data.text"):
        with_text(data, "sentences")


# --- controls of the cross-captioning loss ----------------------------------------------------
def _controlled(**switches):
    torch.manual_seed(0)
    cfg = {"embed_dim": 32, "ffn_dim": 64, "decoder": "scratch", "decoder_dim": 32, "decoder_ffn_dim": 64,
           "freeze_text": True, "dropout": 0.0, "decoder_dropout": 0.0, "temperature": 0.5, **switches}
    return build_method("supportset", cfg, expert_dims=DIMS).train()


def _head_gradient(model, loss) -> dict[str, float]:
    """Norm of the gradient `loss` alone sends into each head, by a separate backward pass."""
    model.zero_grad(set_to_none=True)
    loss.backward(retain_graph=True)
    norms = {}
    for head in ("video", "text"):
        grads = [p.grad for p in getattr(model, f"{head}_head").parameters() if p.grad is not None]
        norms[head] = float(torch.stack([g.pow(2).sum() for g in grads]).sum().sqrt()) if grads else 0.0
    model.zero_grad(set_to_none=True)
    return norms


def test_captioning_reaches_the_embeddings_only_through_the_attention_unless_detached():
    batch = {"video": _video_batch(), "text": None}
    for detach in (False, True):
        model = _controlled(detach_attention=detach)
        batch["text"] = model.prepare_text(TEXTS)
        out = model.loss(batch)
        caption = _head_gradient(model, out["caption_weighted"])
        if detach:  # e_v is the heads' input, not their output: no path is left
            assert caption == {"video": 0.0, "text": 0.0}
        else:
            assert caption["video"] > 0 and caption["text"] > 0
        assert _head_gradient(model, out["contrast"])["video"] > 0


def _head_gradient_vector(model, loss, head: str) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    loss.backward(retain_graph=True)
    vector = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                        for p in getattr(model, f"{head}_head").parameters() if p.requires_grad])
    model.zero_grad(set_to_none=True)
    return vector


def test_diagnosed_gradient_norms_equal_separate_backward_passes():
    model = _controlled(diagnose=True)
    out = model.loss({"video": _video_batch(), "text": model.prepare_text(TEXTS)})
    contrast, caption = _head_gradient(model, out["contrast"]), _head_gradient(model, out["caption_weighted"])
    for head in ("video", "text"):
        assert float(out[f"grad_{head}_contrast"]) == pytest.approx(contrast[head], rel=1e-5)
        assert float(out[f"grad_{head}_caption"]) == pytest.approx(caption[head], rel=1e-5)
        a = _head_gradient_vector(model, out["contrast"], head)
        b = _head_gradient_vector(model, out["caption_weighted"], head)
        assert float(out[f"grad_{head}_ratio"]) == pytest.approx(float(b.norm() / a.norm()), rel=1e-5)
        cosine = float(torch.dot(a, b) / (a.norm() * b.norm()))
        assert float(out[f"grad_{head}_cosine"]) == pytest.approx(cosine, rel=1e-4, abs=1e-6)
        assert -1.0 <= cosine <= 1.0


def test_diagnosis_every_nth_step_only():
    model = _controlled(diagnose=True, diagnose_every=3)
    batch = {"video": _video_batch(), "text": model.prepare_text(TEXTS)}
    diagnosed = ["grad_video_ratio" in model.loss(batch) for _ in range(6)]
    assert diagnosed == [False, False, True, False, False, True]


def test_the_balanced_rule_sets_lambda_once_so_both_losses_start_equal(tmp_path):
    model = _controlled(caption_weight_rule="balanced")
    first = model.loss({"video": _video_batch(), "text": model.prepare_text(TEXTS)})
    assert float(first["caption_weighted"].detach()) == pytest.approx(float(first["contrast"].detach()), rel=1e-5)
    lam = float(first["caption_lambda"])
    assert lam == pytest.approx(float(first["contrast"].detach()) / float(first["caption"].detach()), rel=1e-5)
    second = model.loss({"video": _video_batch(seed=1), "text": model.prepare_text(TEXTS[::-1])})
    assert float(second["caption_lambda"]) == lam  # held after the first batch
    assert float(model.state_dict()["balanced_weight"]) == lam  # saved with the weights: a resume keeps it
    assert "balanced_weight" not in _controlled().state_dict()  # the paper's fixed λ: checkpoints unchanged
