"""ToCo built as the paper draws it (Fig. 2, §3.1-3.4, §4.2, §5.2): the fine-tuned text model's
contextual outputs enter the cross encoder, its embedding layer gives y^k, a 2-layer video
transformer makes x̂, and the cross encoder starts from the text model's top layers."""
from __future__ import annotations

import pytest
import torch

from videotext.models import build_method
from videotext.models.layers.fusion import FusionLayer, VideoEncoder, copy_bert_layers

TEXTS = ["A red circle moves to the left.", "A blue square spins then grows.",
         "The green triangle shrinks.", "A red square vanishes."]
# MiniLM's own sizes (width 384, 12 heads, FFN 1536): the cross encoder can start from its layers
PAPER = {"hidden_dim": 384, "num_heads": 12, "ff_dim": 1536, "cheap_dim": 16, "num_negatives": 2,
         "dropout": 0.0, "max_video_tokens": 8}


def video_batch(n: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lengths = [5, 3, 4, 2][:n]
    mask = torch.tensor([[i < length for i in range(5)] for length in lengths])
    return {"features": {"a": torch.randn(n, 5, 6, generator=g)}, "masks": {"a": mask}}


@pytest.fixture(scope="module")
def paper_model():
    torch.manual_seed(0)
    model = build_method("toco", PAPER, expert_dims={"a": 6})
    model.fit_tfidf(TEXTS)
    return model.eval()


@torch.no_grad()
def test_contextual_states_enter_the_cross_encoder_and_embedding_outputs_are_y_k(paper_model):
    batch = paper_model.prepare_text(TEXTS)
    text = paper_model.encode_text(batch)
    bert = paper_model.text_model  # the whole text model h is kept (and fine-tuned, §3.4)
    out = bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    real = batch["attention_mask"].bool()
    assert torch.allclose(text["tokens"][real], out.last_hidden_state[real], atol=1e-6)
    assert torch.allclose(text["types"][real], bert.embeddings(input_ids=batch["input_ids"])[real], atol=1e-6)
    assert text["tokens"][~real].abs().sum() == 0 and text["types"][~real].abs().sum() == 0  # as cached states
    # y^k is context-independent: the same word piece at the same position gives the same vector
    assert torch.allclose(text["types"][0, 2], text["types"][3, 2])  # "red" in both captions
    assert not torch.allclose(text["tokens"][0, 2], text["tokens"][3, 2], atol=1e-3)


def test_cross_encoder_starts_from_the_text_models_top_layers(paper_model):
    assert paper_model.cross_init_source == "text model layers 4-5"
    bert_layers = paper_model.text_model.encoder.layer[4:]
    torch.manual_seed(1)
    states = torch.randn(2, 7, 384)
    keep = torch.tensor([[True] * 7, [True] * 5 + [False] * 2])
    extended = (1.0 - keep[:, None, None, :].float()) * torch.finfo(torch.float32).min  # HF's additive mask
    with torch.no_grad():
        for ours, theirs in zip(paper_model.fusion.layers, bert_layers):
            expected = theirs(states, attention_mask=extended)
            expected = expected[0] if isinstance(expected, tuple) else expected
            assert torch.allclose(ours(states, keep)[keep], expected[keep], atol=1e-5)
    # ŷ's projection starts as the identity, so the copied layers read the states they were trained on
    assert torch.equal(paper_model.text_proj.weight, torch.eye(384))


def test_cross_init_falls_back_to_random_when_widths_differ():
    model = build_method("toco", {**PAPER, "hidden_dim": 64, "num_heads": 4, "ff_dim": 128},
                         expert_dims={"a": 6})
    assert model.cross_init_source.startswith("random (hidden_dim 64 vs 384")
    random = build_method("toco", {**PAPER, "cross_init": "random"}, expert_dims={"a": 6})
    assert random.cross_init_source == "random"
    assert not torch.equal(random.text_proj.weight, torch.eye(384))


def test_copy_bert_layers_needs_one_layer_each(paper_model):
    with pytest.raises(ValueError, match="2 fusion layers, 1 BERT layers"):
        copy_bert_layers(paper_model.fusion.layers, paper_model.text_model.encoder.layer[:1])


@torch.no_grad()
def test_video_encoder_ignores_padding_and_zeroes_it():
    torch.manual_seed(0)
    encoder = VideoEncoder(16, 2, 4, 32, 0.0, 8).eval()
    tokens = torch.randn(2, 6, 16)
    keep = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    out = encoder(tokens, keep)
    noisy = tokens.clone()
    noisy[1, 3:] = 100.0
    assert torch.allclose(encoder(noisy, keep), out, atol=1e-6)
    assert out[1, 3:].abs().sum() == 0 and out[1, :3].abs().sum() > 0
    empty = encoder(tokens, torch.zeros(2, 6, dtype=torch.bool))  # a video with no token: zeros, no NaN
    assert torch.equal(empty, torch.zeros_like(empty))
    assert len(encoder.layers) == 2 and all(isinstance(layer, FusionLayer) for layer in encoder.layers)


def test_paper_build_trains_the_text_model_and_the_video_encoder(paper_model):
    paper_model.train()
    batch = {"text": paper_model.prepare_text(TEXTS), "video": video_batch()}
    parts = paper_model.loss(batch)
    assert set(parts) == {"loss", "global", "cheap", "token"}
    parts["loss"].backward()
    layer = paper_model.text_model.encoder.layer[0].attention.self.query.weight
    assert layer.grad is not None and layer.grad.abs().sum() > 0  # h is fine-tuned (§3.4)
    assert paper_model.video_encoder.layers[0].qkv.weight.grad.abs().sum() > 0
    paper_model.zero_grad()
    paper_model.eval()


def test_earlier_build_is_an_option():
    old = build_method("toco", {**PAPER, "text_features": "embeddings", "video_layers": 0, "cross_init": "random"},
                       expert_dims={"a": 6})
    assert old.video_encoder is None and old.cross_init_source == "random"
    names = {name.split(".")[0] for name, _ in old.named_parameters()}
    assert "video_encoder" not in names
    assert not any(n.startswith("text_model.encoder") for n, _ in old.named_parameters())  # embedding layer only
    text = old.encode_text(old.prepare_text(TEXTS[:2]))
    assert text["tokens"] is text["types"]  # embedding-layer vectors are both ŷ's source and y^k


@torch.no_grad()
def test_a_frozen_text_model_is_run_once_per_caption_with_the_same_states():
    torch.manual_seed(0)
    model = build_method("toco", {**PAPER, "hidden_dim": 32, "num_heads": 4, "ff_dim": 64, "freeze_text": True},
                         expert_dims={"a": 6}).train()  # cached while training only
    model.fit_tfidf(TEXTS)
    batch = model.prepare_text(TEXTS)
    cached = model.encode_text(batch)
    direct_tokens, direct_types = model._text_states(batch["input_ids"], batch["attention_mask"].bool())
    mask = batch["attention_mask"].bool()
    assert torch.allclose(cached["tokens"][mask], direct_tokens[mask], atol=1e-6)
    assert torch.allclose(cached["types"][mask], direct_types[mask], atol=1e-6)
    assert cached["tokens"][~mask].abs().sum() == 0  # padding is zero (masked everywhere downstream)
    calls = []
    hook = model.text_model.register_forward_hook(lambda *args: calls.append(1))
    again = model.encode_text(model.prepare_text(TEXTS[::-1]))
    hook.remove()
    assert calls == [] and torch.equal(again["tokens"][0], cached["tokens"][3])
    model.eval()  # inference runs the model: queries are not cached
    model.encode_text(model.prepare_text(["a new query"]))
    assert len(model._text_cache) == len(TEXTS)
    assert all(text != "a new query" for text, _ in model._text_cache)


def test_a_fit_caches_its_validation_captions_and_can_train_on_them():
    torch.manual_seed(0)
    model = build_method("toco", {**PAPER, "hidden_dim": 32, "num_heads": 4, "ff_dim": 64, "freeze_text": True},
                         expert_dims={"a": 6}).eval()
    model.fit_tfidf(TEXTS)
    model._fitting = True  # what train_batches sets on the model being trained
    batch = model.prepare_text(TEXTS)
    with torch.inference_mode():  # validation encodes under inference mode
        first = model.encode_text(batch)
        direct_tokens, direct_types = model._text_states(batch["input_ids"], batch["attention_mask"].bool())
    mask = batch["attention_mask"].bool()
    assert sorted(text for text, _ in model._text_cache) == sorted(TEXTS)
    assert all(precision is None for _, precision in model._text_cache)  # fp32, no autocast
    assert torch.equal(first["tokens"][mask], direct_tokens[mask])
    assert torch.equal(first["types"][mask], direct_types[mask])
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.inference_mode():
        model.encode_text(batch)  # bf16 states are their own entries, never served to fp32
    assert sorted(p is None for _, p in model._text_cache) == [False] * len(TEXTS) + [True] * len(TEXTS)
    model.train()  # a caption first met at validation recurs in a training batch: gradients still flow
    again = model.encode_text(batch)
    again["pooled"].sum().backward()
    assert model.cheap_text.weight.grad.abs().sum() > 0
    assert torch.equal(again["tokens"][mask], direct_tokens[mask])
