"""The dual-encoder baseline and the feature loaders it reads through."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from videotext.data.loaders import collate_video_features, subsample_steps
from videotext.models import build_method


@pytest.fixture(scope="module")
def dual():
    torch.manual_seed(0)
    return build_method("dual", {"freeze_text": True, "embed_dim": 16, "dropout": 0.0},
                        expert_dims={"a": 3, "b": 2}).eval()


def test_subsample_steps_spreads_uniformly_and_keeps_short_sequences():
    assert subsample_steps(4, 30).tolist() == [0, 1, 2, 3]
    assert subsample_steps(10, 5).tolist() == [1, 3, 5, 7, 9]  # floor((i + 0.5) * 10 / 5)
    assert subsample_steps(100, 30).tolist()[:3] == [1, 5, 8]  # floor(0.5 · 10 / 3), floor(1.5 · 10 / 3), …


def test_collate_pads_and_masks_each_expert():
    items = [{"a": np.ones((2, 3), np.float32)}, {"a": np.full((4, 3), 2, np.float32)}, {"a": np.zeros((0, 3), np.float32)}]
    batch = collate_video_features(items, ["a"])
    assert batch["features"]["a"].shape == (3, 4, 3)
    assert batch["masks"]["a"].tolist() == [[True, True, False, False], [True] * 4, [False] * 4]
    assert float(batch["features"]["a"][0, 2:].abs().sum()) == 0.0


def test_temporal_pooling_ignores_padding_and_handles_missing_experts(dual):
    feats = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])  # [1, T=3, D=2], last step is padding
    mask = torch.tensor([[True, True, False]])
    assert dual.pool_time(feats, mask).tolist() == [[2.0, 3.0]]  # mean of the two real steps
    dual.config.temporal_pooling = "max"
    try:
        assert dual.pool_time(feats, mask).tolist() == [[3.0, 4.0]]
        assert dual.pool_time(feats, torch.zeros_like(mask)).tolist() == [[0.0, 0.0]]  # no step: zeros, not -inf
    finally:
        dual.config.temporal_pooling = "mean"


def test_embeddings_are_unit_vectors_and_similarity_is_cosine(dual):
    video = collate_video_features(
        [{"a": np.random.RandomState(i).randn(3, 3).astype(np.float32),
          "b": np.random.RandomState(10 + i).randn(2, 2).astype(np.float32)} for i in range(4)], ["a", "b"])
    text = dual.prepare_text(["a red circle moves left", "a blue square grows", "x", "y"])
    with torch.inference_mode():
        v, t = dual.encode_video(video), dual.encode_text(text)
        sims = dual.similarity(t, v, chunk_size=3)  # chunked: 3 + 1 rows
    assert v.shape == (4, 16) and t.shape == (4, 16)
    assert torch.allclose(v.norm(dim=-1), torch.ones(4), atol=1e-5)
    assert torch.allclose(sims, t @ v.T, atol=1e-6)


def test_loss_choice_follows_the_config(dual):
    video = collate_video_features([{"a": np.ones((1, 3), np.float32) * i, "b": np.ones((1, 2), np.float32)}
                                    for i in range(3)], ["a", "b"])
    batch = {"video": video, "text": dual.prepare_text(["one", "two", "three"])}
    for loss, margin in (("infonce", None), ("max_margin", 0.05), ("triplet", 0.2)):
        dual.config.loss = loss
        out = dual.loss(batch)
        assert set(out) == {"loss", "t2v", "v2t"} and torch.isfinite(out["loss"])
    dual.config.loss = "infonce"
    from videotext.config import ConfigError

    dual.config.loss = "nope"
    with pytest.raises(ConfigError, match="unknown contrastive loss 'nope'"):
        dual.loss(batch)
    dual.config.loss = "infonce"


def test_unknown_method_and_bad_pooling_are_config_errors():
    from videotext.config import ConfigError

    with pytest.raises(ConfigError, match="unknown method 'nope'"):
        build_method("nope", {})
    with pytest.raises(ConfigError, match="temporal_pooling"):
        build_method("dual", {"temporal_pooling": "median"}, expert_dims={"a": 2})


def test_encode_texts_batches_by_length_and_keeps_the_given_order(dual):
    from videotext.encode import encode_texts

    texts = ["a long caption about a red circle that moves to the left", "blue", "a green square spins"]
    together = encode_texts(dual, texts, batch_size=2)  # sorted: [blue, green square] then [long]
    one_by_one = torch.cat([encode_texts(dual, [t]) for t in texts])
    torch.testing.assert_close(together, one_by_one, rtol=1e-4, atol=1e-5)


def test_every_method_pools_time_with_one_rule_for_empty_rows():
    """dual, mmt, coot, clip4clip and toco pool through `masked_pool`: a row with no valid step is
    0 in mean and max (max used to give the fill value -32752 in coot)."""
    from videotext.models.coot import pool_sequence
    from videotext.models.layers import masked_pool

    x = torch.tensor([[[1.0, -5.0], [3.0, -7.0], [100.0, 100.0]], [[9.0, 9.0], [9.0, 9.0], [9.0, 9.0]]])
    mask = torch.tensor([[True, True, False], [False, False, False]])
    assert masked_pool(x, mask, "mean").tolist() == [[2.0, -6.0], [0.0, 0.0]]
    assert masked_pool(x, mask, "max").tolist() == [[3.0, -5.0], [0.0, 0.0]]
    assert pool_sequence(x, mask, "max").tolist() == [[3.0, -5.0], [0.0, 0.0]]
    assert pool_sequence(x, mask, "avg_special").tolist() == [[52.0, 44.0], [27.0, 27.0]]  # official: padding summed
