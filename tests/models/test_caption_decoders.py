"""Support-set's pre-trained caption decoders (§3.2 "a pre-trained T-5 decoder"): an HF T5 by path
(tiny random T5 from save_pretrained) and the bundled MiniLM as a decoder with new cross-attention
(Rothe et al. 2020); both cross-attend to the support-set mixture and train with the method's loss."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from videotext.losses import hardest_negative_triplet
from videotext.losses.captioning import mix_support_set, support_set_weights
from videotext.models.layers.caption_decoder import HFCaptionDecoder
from videotext.models.registry import build_method
from videotext.text.encoder import default_text_model_path

WORDS = ["a red circle", "blue square spins", "a circle moves left", "red square"]


def memory_batch(n: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    memory = torch.randn(n, 5, 6, generator=g)
    mask = torch.tensor([[i < length for i in range(5)] for length in [5, 3, 4, 2][:n]])
    return memory, mask


@torch.no_grad()
def test_t5_decoder_nll_equals_the_hf_seq2seq_loss(tiny_t5):
    torch.manual_seed(0)
    decoder = HFCaptionDecoder(str(tiny_t5), memory_dim=6, max_len=8, dropout=0.0).eval()
    assert decoder.kind == "t5" and decoder.model.encoder is None  # only the decoder stack is kept
    assert (decoder.bos_id, decoder.eos_id, decoder.pad_id) == (0, 1, 0)
    targets = decoder.tokenize(WORDS)
    assert targets[1].tolist() == [0, 8, 9, 10, 1, 0]  # <pad> starts, words, </s>, padding
    memory, mask = memory_batch()
    ours = decoder.nll(targets, memory, mask)
    # HF's own teacher-forced loss: decoder inputs are the labels shifted right, pads ignored
    from transformers.modeling_outputs import BaseModelOutput

    labels = targets[:, 1:].masked_fill(targets[:, 1:] == 0, -100)
    out = decoder.model(encoder_outputs=BaseModelOutput(last_hidden_state=decoder.memory_proj(memory)),
                        attention_mask=mask.long(), labels=labels)
    assert float(ours) == pytest.approx(float(out.loss), abs=1e-6)
    # masked memory positions are never read
    noisy = memory.clone()
    noisy[~mask] = 50.0
    assert float(decoder.nll(targets, noisy, mask)) == pytest.approx(float(ours), abs=1e-6)


@pytest.fixture(scope="module")
def minilm_decoder():
    torch.manual_seed(0)
    return HFCaptionDecoder(default_text_model_path(), memory_dim=6, max_len=16, dropout=0.0).eval()


@torch.no_grad()
def test_minilm_decoder_is_warm_started_and_causal(minilm_decoder):
    from transformers import AutoModel

    decoder = minilm_decoder
    assert decoder.kind == "bert" and (decoder.bos_id, decoder.eos_id, decoder.pad_id) == (101, 102, 0)
    encoder = AutoModel.from_pretrained(default_text_model_path())
    ours = decoder.model.bert.encoder.layer[3]
    theirs = encoder.encoder.layer[3]
    assert torch.equal(ours.attention.self.query.weight, theirs.attention.self.query.weight)  # warm start
    assert torch.equal(ours.output.dense.weight, theirs.output.dense.weight)
    assert ours.crossattention.self.query.weight.shape == (384, 384)  # new cross-attention (Rothe et al.)
    assert decoder.model.config.is_decoder
    memory, mask = memory_batch(2)
    tokens = decoder.tokenize(WORDS[:2])
    logits = decoder(tokens, memory, mask)
    assert logits.shape == (2, tokens.shape[1], 30522)
    changed = tokens.clone()
    changed[:, 3:] = 2000  # later tokens must not change earlier positions
    assert torch.allclose(decoder(changed, memory, mask)[:, :3], logits[:, :3], atol=1e-5)
    other = memory.clone()
    other[0, 0] += 1.0  # but the memory does
    assert not torch.allclose(decoder(tokens, other, mask)[0], logits[0], atol=1e-4)
    captions = decoder.generate(memory, mask, beam_size=1, max_len=5)
    assert len(captions) == 2 and all(len(c) <= 4 for c in captions)


DIMS = {"appearance": 4, "motion": 2}


def _video(n: int = 4):
    g = torch.Generator().manual_seed(3)
    lengths = torch.tensor([5, 3, 4, 2][:n])
    masks = {e: torch.arange(5)[None] < lengths[:, None] for e in DIMS}
    return {"features": {e: torch.randn(n, 5, d, generator=g) for e, d in DIMS.items()}, "masks": masks}


@pytest.mark.parametrize("decoder_model", ["minilm", "t5"])
def test_supportset_loss_with_a_pretrained_decoder_is_triplet_plus_lambda_nll(decoder_model, tiny_t5):
    torch.manual_seed(0)
    path = "" if decoder_model == "minilm" else str(tiny_t5)
    model = build_method("supportset", {"embed_dim": 16, "ffn_dim": 32, "freeze_text": True, "dropout": 0.0,
                                        "decoder_dropout": 0.0, "temperature": 0.5, "decoder_model": path,
                                        "max_caption_tokens": 12}, expert_dims=DIMS).eval()
    assert isinstance(model.decoder, HFCaptionDecoder)
    text, video = model.prepare_text(WORDS), _video()
    expected_ids = model.decoder.tokenize(WORDS)
    assert torch.equal(text["caption_ids"], expected_ids)  # the decoder's own vocabulary
    with torch.no_grad():
        out = model.loss({"text": text, "video": video})
        c_t, c_v = model.encode_text(text), model.encode_video(video)
        triplet = hardest_negative_triplet(c_t @ c_v.T, margin=0.2)["loss"]
        e_v, mask = model.fuse_experts(video)
        memory, memory_mask = mix_support_set(support_set_weights(c_t, c_v, "cross", 0.5), e_v, mask)
        logits = model.decoder(expected_ids[:, :-1], memory, memory_mask)
        labels = expected_ids[:, 1:]
        nll = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=model.decoder.pad_id)
    assert float(out["caption"]) == pytest.approx(float(nll), abs=1e-5)
    assert float(out["loss"]) == pytest.approx(float(triplet) + 10.0 * float(nll), abs=1e-4)
    model.train()
    model.loss({"text": text, "video": video})["loss"].backward()
    assert model.decoder.memory_proj.weight.grad.abs().sum() > 0
    model.eval()
    captions = model.caption(video, beam_size=2, max_len=6)
    assert len(captions) == 4 and all(isinstance(c, str) for c in captions)


def test_scratch_decoder_stays_an_option_and_bad_paths_are_named(tmp_path):
    scratch = build_method("supportset", {"embed_dim": 16, "ffn_dim": 32, "freeze_text": True, "decoder": "scratch",
                                          "decoder_dim": 16, "decoder_ffn_dim": 32}, expert_dims=DIMS)
    assert not isinstance(scratch.decoder, HFCaptionDecoder)
    assert "caption_ids" not in scratch.prepare_text(WORDS[:1])
    from videotext.config import ConfigError

    with pytest.raises(ConfigError, match="model.decoder_model"):
        build_method("supportset", {"embed_dim": 16, "ffn_dim": 32, "decoder_model": str(tmp_path / "none")},
                     expert_dims=DIMS)
    with pytest.raises(ConfigError, match="model.decoder: expected one of"):
        build_method("supportset", {"decoder": "gpt"}, expert_dims=DIMS)
