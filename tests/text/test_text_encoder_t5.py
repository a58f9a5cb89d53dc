"""T5 by path (Support-set §3.2): a tiny random T5 saved with save_pretrained loads as an encoder
(T5EncoderModel) in HFTextEncoder and in supportset; `hidden_states` concatenates layers."""
from __future__ import annotations

import pytest
import torch


def test_hf_text_encoder_loads_the_t5_encoder_by_path(tiny_t5):
    from transformers import T5EncoderModel

    from videotext.text import HFTextEncoder

    enc = HFTextEncoder(str(tiny_t5), pooling="mean", max_tokens=8).eval()
    assert isinstance(enc.model, T5EncoderModel) and enc.hidden_size == 16
    batch = enc.tokenize(["a red circle moves left", "a blue square"])
    assert batch["input_ids"].tolist()[1] == [3, 8, 9, 1, 0, 0]  # words, </s>, padding
    with torch.no_grad():
        states = enc.token_states(batch)
        both = enc.hidden_states(batch, layers=(-2, -1))
    assert states.shape == (2, 6, 16) and both.shape == (2, 6, 32)
    assert torch.allclose(both[..., 16:], states, atol=1e-6)  # the last layer is the final state
    assert enc(batch).shape == (2, 16)


def test_hidden_states_of_bert_concatenate_the_last_two_layers():
    from videotext.text import HFTextEncoder

    enc = HFTextEncoder(freeze=True).eval()
    batch = enc.tokenize(["a red circle moves left"])
    with torch.no_grad():
        out = enc.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                        output_hidden_states=True)
        both = enc.hidden_states(batch)
    assert both.shape == (1, batch["input_ids"].shape[1], 768)  # MiniLM: 2 × 384
    assert torch.equal(both, torch.cat([out.hidden_states[-2], out.hidden_states[-1]], -1))
    assert torch.allclose(both[..., 384:], enc.token_states(batch), atol=1e-6)


def test_supportset_trains_on_a_t5_text_encoder(tiny_t5):
    from videotext.models.registry import build_method

    torch.manual_seed(0)
    model = build_method("supportset", {"text_model": str(tiny_t5), "embed_dim": 16, "ffn_dim": 32,
                                        "decoder": "scratch", "decoder_dim": 16, "decoder_ffn_dim": 32,
                                        "dropout": 0.0},
                         expert_dims={"a": 3})
    assert model.decoder.bos_id == 0 and model.decoder.eos_id == 1  # T5: pad starts, </s> ends
    text = model.prepare_text(["a red circle", "blue square spins", "a circle"])
    video = {"features": {"a": torch.randn(3, 4, 3)}, "masks": {"a": torch.ones(3, 4, dtype=torch.bool)}}
    out = model.loss({"text": text, "video": video})
    assert set(out) >= {"loss", "contrast", "caption"} and torch.isfinite(out["loss"])
    out["loss"].backward()
    assert model.text_encoder.model.encoder.block[0].layer[0].SelfAttention.q.weight.grad is not None
    assert model.encode_text(text).shape == (3, 16)
