"""COOT model: shapes, AF (eq. 4) against a hand computation, parameter counts, hierarchy batches."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from videotext.data.hierarchy import (
    HierarchyBatches, HierarchyVideoReader, clip_frame_range, collate_hierarchy, sample_frames, split_sentences,
)
from videotext.data.schema import Segment, Video, VideoTextDataset
from videotext.models.coot import AttentionPool, CootConfig, group, sincos_table
from videotext.models.registry import build_method

SMALL = {"hidden_dim": 16, "num_heads": 2, "ff_dim": 16, "af_dim": 32, "af_heads": 2, "text_feature_dim": 12,
         "dropout": 0.0}


def small(**kw):
    return build_method("coot", {**SMALL, **kw}, expert_dims={"a": 6, "b": 4})


def fake_batch(counts, dim, prefix, seed=0):
    g = torch.Generator().manual_seed(seed)
    whole = [(np.asarray(torch.randn(5, dim, generator=g)), [np.asarray(torch.randn(2 + i, dim, generator=g))
                                                             for i in range(c)]) for c in counts]
    return collate_hierarchy(whole, dim, prefix)


def test_shapes_and_normalised_embeddings():
    model = small().eval()
    video = fake_batch([2, 3], 10, "frame")
    text = fake_batch([2, 3], 12, "word", seed=1)
    v = model.encode_video(video)
    t = model.encode_text(text)
    assert v.shape == (2, 32) and t.shape == (2, 32)  # concat(mean(h), H_context) = 2 × hidden
    assert torch.allclose(v.norm(dim=-1), torch.ones(2), atol=1e-5)
    low = model.encode_video_hierarchy(video)["low"]
    assert low.shape == (5, 16)  # 2 + 3 clips, hidden
    assert small(use_context=False).eval().encode_video(video).shape == (2, 16)  # no CoT: mean(h) only


def test_loss_parts_and_backward():
    torch.manual_seed(0)
    model = small(cmc_samples=0)
    batch = {"video": fake_batch([2, 3, 2], 10, "frame"), "text": fake_batch([2, 3, 2], 12, "word", 1)}
    out = model.loss(batch)
    assert set(out) == {"loss", "align_low", "align_high", "align_context", "cluster", "cmc"}
    expected = sum(out[k] for k in ("align_low", "align_high", "align_context", "cluster")) + 0.01 * out["cmc"]
    assert out["loss"].item() == pytest.approx(expected.item(), rel=1e-6)
    out["loss"].backward()
    assert model.video_local.input_fc.weight.grad.abs().sum() > 0
    assert model.text_global.cross_attention.attention.query.weight.grad.abs().sum() > 0


def test_padding_does_not_change_embeddings():
    model = small().eval()
    video = fake_batch([2], 10, "frame")
    padded = {k: v.clone() for k, v in video.items()}
    padded["frames"] = torch.cat([video["frames"], torch.full((1, 3, 10), 7.0)], 1)
    padded["frame_mask"] = torch.cat([video["frame_mask"], torch.zeros(1, 3, dtype=torch.bool)], 1)
    assert torch.allclose(model.encode_video(video), model.encode_video(padded), atol=1e-5)


def test_attention_pool_matches_hand_computation():
    torch.manual_seed(0)
    pool = AttentionPool(dim=4, attn_dim=6, heads=2, dropout=0.0)
    for p in pool.parameters():
        torch.nn.init.normal_(p)
    x = torch.randn(1, 3, 4)
    mask = torch.tensor([[True, True, False]])
    out = pool(x, mask)
    # eq. 4 per head h: logits_t = W2_h GELU(W1_h x_t + b1_h) + b2_h over channels of head h
    expected = torch.zeros(4)
    for h in range(2):
        logits = torch.stack([F.gelu(x[0, t] @ pool.w1[h] + pool.b1[h]) @ pool.w2[h] + pool.b2[h] for t in range(2)])
        weights = logits.softmax(0)  # [2 valid steps, 2 channels]
        expected[2 * h : 2 * h + 2] = (weights * x[0, :2, 2 * h : 2 * h + 2]).sum(0)
    assert torch.allclose(out[0], expected, atol=1e-6)


def test_positional_tables():
    standard = sincos_table(5, 4)
    assert standard[1, 0].item() == pytest.approx(np.sin(1.0))
    assert standard[1, 1].item() == pytest.approx(np.cos(1.0))  # Vaswani: channel 1 shares divisor of 0
    official = sincos_table(5, 4, "sincos_official")
    assert official[1, 1].item() == pytest.approx(np.cos(1 / 10000 ** (2 / 4)))  # divisor per channel index


def test_parameter_count_default_config():
    # hidden 384, 8 heads, FF 384, AF 768/2 heads; video input 1488 (synthetic experts), text 768 (MiniLM ×2)
    model = build_method("coot", {"text_feature_dim": 768}, expert_dims={"a": 1280, "m": 80, "s": 128})
    h = 384
    attn_layer = 4 * (h * h + h) + 2 * (h * h + h) + 4 * h  # q,k,v,out + FF(2 linears) + 2 LN
    af = h * 768 + 768 + 768 * h // 2 + h  # 2 heads: [2, 384, 384] + [2, 384] + [2, 384, 192] + [2, 192]
    local = lambda d: 2 * d + (d * h + h) + attn_layer + af  # noqa: E731  input LN + input_fc
    global_ = 2 * h + 2 * attn_layer  # input LN + F_Local + F_Global
    assert model.count_parameters() == local(1488) + local(768) + 2 * global_
    assert model.count_parameters() == 7_091_616  # "COOT is small": 5–8 M


def test_group_restores_batch_layout():
    flat = torch.arange(5.0).unsqueeze(1)
    grouped, mask = group(flat, torch.tensor([2, 3]))
    assert grouped[:, :, 0].tolist() == [[0, 1, 0], [2, 3, 4]]
    assert mask.tolist() == [[True, True, False], [True, True, True]]


def test_frame_sampling_and_clip_expansion():
    assert sample_frames(5, 80, None).tolist() == [0, 1, 2, 3, 4]
    assert sample_frames(8, 4, None).tolist() == [1, 3, 5, 7]  # centre of each of 4 intervals
    drawn = sample_frames(8, 4, np.random.default_rng(0))
    assert all(2 * i <= j < 2 * i + 2 for i, j in enumerate(drawn))
    times = np.arange(20) * 0.5
    assert clip_frame_range(times, 2.0, 2.9) == (4, 6)
    assert clip_frame_range(times, 2.0, 2.9, min_frames=5) == (2, 7)  # grown alternately: start, end, …
    assert split_sentences("A cat sits. Then it jumps!  ok") == ["A cat sits.", "Then it jumps!", "ok"]


class _Store:
    """Two experts at different rates (2 and 1 steps/s)."""

    def has(self, expert, key):
        return True

    def get(self, expert, key):
        rate = 2 if expert == "a" else 1
        n = 6 * rate
        seed = sum(map(ord, key)) + rate
        return np.random.default_rng(seed).normal(size=(n, 6 if expert == "a" else 4)), np.arange(n) / rate


class _Reader:
    store, experts, dims = _Store(), ["a", "b"], {"a": 6, "b": 4}


class _Text:
    dim = 12

    def batch(self, paragraphs, keys=None):
        items = [(np.ones((sum(len(s.split()) for s in p), 12)), [np.ones((len(s.split()), 12)) for s in p])
                 for p in paragraphs]
        return collate_hierarchy(items, 12, "word")


def test_hierarchy_batches_are_pure_and_aligned():
    videos = [Video(f"v{i}", duration=6.0, segments=[Segment(0, 2.5, "a b"), Segment(3, 5.5, "c d e")])
              for i in range(6)]
    data = VideoTextDataset("t", videos, {"train": [v.id for v in videos]})
    reader = HierarchyVideoReader(_Reader(), max_frames=3)
    batches = HierarchyBatches(data, reader, _Text(), batch_size=4, seed=1)
    first, again = batches.batch(2, 0), batches.batch(2, 0)
    assert first["video_ids"] == again["video_ids"]
    assert torch.equal(first["video"]["group_frames"], again["video"]["group_frames"])
    assert first["video"]["group_counts"].tolist() == first["text"]["group_counts"].tolist() == [2, 2, 2, 2]
    assert first["video"]["frames"].shape == (4, 3, 10)  # 12 steps → 3 sampled, experts concatenated
    assert first["video"]["group_frames"].shape[1] == 3  # clip 0: 6 steps in [0, 2.5] → 3 sampled
    small().loss(first)  # a real batch goes through the model


def test_evaluate_hierarchy_counts_and_protocol():
    from videotext.eval.hierarchy import evaluate_hierarchy

    videos = [Video(f"v{i}", duration=6.0, segments=[Segment(0, 2.5, "a b"), Segment(3, 5.5, "c d e")][: 1 + i % 2])
              for i in range(5)]
    data = VideoTextDataset("t", videos, {"test": [v.id for v in videos]})
    model = small()
    model.__dict__["_text_features"] = _Text()
    out = evaluate_hierarchy(model, data, _Reader(), batch_size=2)
    assert (out["n_videos"], out["n_clips"], out["n_sentences"]) == (5, 7, 7)
    assert out["par2vid"]["n_queries"] == 5 and out["sent2clip"]["n_queries"] == 7
    assert out["clip2sent"]["n_queries"] == 7 and 1 <= out["par2vid"]["MdR"] <= 5


def test_prepare_text_splits_paragraph_into_sentences_in_context():
    model = build_method("coot", {**SMALL, "text_feature_dim": 0}, expert_dims={"a": 6, "b": 4})
    batch = model.prepare_text(["A red square moves. A blue circle spins!", "One sentence"])
    assert batch["group_counts"].tolist() == [2, 1]
    assert batch["sentences"][0] == ["A red square moves.", "A blue circle spins!"]
    features = model.text_features
    assert features.dim == 768 and batch["words"].shape[-1] == 768  # MiniLM: 2 layers × 384
    alone = features([["A blue circle spins!"]])[0][0]
    in_paragraph = features([["A red square moves.", "A blue circle spins!"]])[0][1]
    assert alone.shape == in_paragraph.shape == (5, 768)  # a blue circle spins !
    assert not np.allclose(alone, in_paragraph, atol=1e-3)  # BERT saw the whole paragraph
    assert model.encode_text(batch).shape == (2, 32)


def test_parameter_count_matches_paper_table1():
    # ActivityNet setting: 2048-d frame features, BERT-base last 2 layers = 1536-d → Table 1: 7.6 M
    model = build_method("coot", {"text_feature_dim": 1536}, expert_dims={"inception": 2048})
    assert model.count_parameters() == 7_604_224
