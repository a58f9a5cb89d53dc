"""The text-query path of CLIP text towers: the sequence cut after the end-of-text token and the
packed inference forward (`videotext.openclip.PackedTextTransformer`) give the embeddings of
open_clip's own modules.

A tiny random-weight open_clip architecture (tests/fixtures/openclip_tiny.json: width 48, 2 heads,
2 layers, embed 32).
"""
from __future__ import annotations

import copy
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("open_clip")

from videotext import openclip  # noqa: E402

TINY = str(Path(__file__).resolve().parents[1] / "fixtures" / "openclip_tiny.json")
CAPTIONS = ["a rabbit sits on the grass", "a man in a suit walks between parked cars on a rainy evening", "a tree",
            "two dogs"]
needs_packing = pytest.mark.skipif(not openclip._packing_available(), reason="torch built without oneDNN")


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> str:
    """A checkpoint of the tiny CLIP with random weights (seeded, not the module default)."""
    torch.manual_seed(7)
    model = openclip._open_clip().create_model(openclip.architecture(TINY), pretrained=None)
    path = tmp_path_factory.mktemp("clip") / "tiny_clip.pt"
    torch.save(model.state_dict(), path)
    return str(path)


@pytest.fixture()
def encoder(weights):
    from videotext.text import build_text_encoder

    return build_text_encoder(f"openclip:{TINY}@{weights}", max_tokens=32).eval()


def modules(encoder, batch) -> torch.Tensor:
    """The encoder's vectors through open_clip's modules (the reference)."""
    encoder.packed_inference = False
    try:
        return encoder(batch)
    finally:
        encoder.packed_inference = True


def padded(encoder, texts: list[str], length: int) -> dict:
    """Token ids padded to `length` (CLIP's fixed context), as open_clip's tokenizer gives them."""
    ids = encoder.tokenizer(texts, context_length=length)
    return {"input_ids": ids, "attention_mask": (ids != 0).long(), "texts": texts}


def min_cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return F.cosine_similarity(a.float(), b.float()).min().item()


@pytest.mark.parametrize("packed", [False, True])
def test_cut_sequence_equals_the_full_length_one(encoder, packed):
    """CLIP's tower is causal and pools at the end-of-text token: positions after the longest one in
    the batch change nothing, so cutting them keeps the embeddings (to fp32 round-off)."""
    batch = encoder.tokenize(CAPTIONS)
    assert batch["input_ids"].shape[1] < 32  # cut to the longest caption
    encoder.packed_inference = packed
    with torch.inference_mode():
        cut = encoder(batch)
        for length in (32, 77):
            full = encoder(padded(encoder, CAPTIONS, length))
            assert min_cosine(cut, full) >= 1 - 1e-5
            torch.testing.assert_close(cut, full, atol=1e-5, rtol=0)
        single = torch.cat([encoder(encoder.tokenize([c])) for c in CAPTIONS])  # each cut to its own length
    torch.testing.assert_close(single, cut, atol=1e-5, rtol=0)


@needs_packing
def test_packed_forward_equals_the_modules_in_fp32(encoder):
    assert encoder._packed_transformer() is not None  # open_clip's plain blocks: the packed path applies
    batch = encoder.tokenize(CAPTIONS)
    with torch.inference_mode():
        ref, new = modules(encoder, batch), encoder(batch)
    assert encoder._packed._packed  # it ran
    assert min_cosine(ref, new) >= 1 - 1e-5
    torch.testing.assert_close(new, ref, atol=1e-5, rtol=1e-5)


@needs_packing
def test_packed_forward_is_bit_equal_under_bf16_autocast(encoder):
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("no oneDNN bf16 on this CPU")
    batch = encoder.tokenize(CAPTIONS)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        ref, new = modules(encoder, batch), encoder(batch)
    assert torch.bfloat16 in encoder._packed._packed
    assert ref.dtype == new.dtype and torch.equal(ref, new)


@needs_packing
def test_packed_weights_follow_weight_updates(encoder):
    """A weight changed in place (an optimizer step, load_state_dict) is repacked before the next call."""
    batch = encoder.tokenize(CAPTIONS)
    with torch.inference_mode():
        before = encoder(batch)
    with torch.no_grad():
        encoder.tower.transformer.resblocks[-1].mlp.c_proj.weight.mul_(3.0)
        encoder.tower.transformer.resblocks[0].attn.in_proj_bias.add_(0.5)
    with torch.inference_mode():
        after, ref = encoder(batch), modules(encoder, batch)
    assert min_cosine(before, after) < 0.999
    torch.testing.assert_close(after, ref, atol=1e-5, rtol=1e-5)
    encoder.load_state_dict(copy.deepcopy(encoder.state_dict()))  # copy_ into the same storage
    with torch.inference_mode():
        torch.testing.assert_close(encoder(batch), ref, atol=1e-5, rtol=1e-5)


@needs_packing
def test_training_and_gradients_take_the_modules(encoder):
    batch = encoder.tokenize(CAPTIONS)
    with torch.inference_mode():
        ref = modules(encoder, batch)
    packed = encoder._packed_transformer()
    packed._packed.clear()
    out = encoder(batch)  # gradients on: the modules, and a graph
    assert out.requires_grad and not packed._packed
    encoder.train()
    with torch.no_grad():
        assert not packed.usable(batch["input_ids"])
    encoder.eval()
    torch.testing.assert_close(out.detach(), ref, atol=1e-6, rtol=0)


@needs_packing
def test_copies_and_pickles_leave_the_packed_weights_behind(encoder):
    with torch.inference_mode():
        ref = encoder(encoder.tokenize(CAPTIONS))
    assert encoder._packed._packed
    for clone in (copy.deepcopy(encoder), pickle.loads(pickle.dumps(encoder))):
        assert not clone._packed._packed and clone._packed.tower is clone.tower
        with torch.inference_mode():
            torch.testing.assert_close(clone(clone.tokenize(CAPTIONS)), ref, atol=0, rtol=0)


def test_other_blocks_keep_the_modules():
    """Towers that are not open_clip's plain causal blocks (no causal mask here) never take the packed path."""
    tower = openclip.text_tower(openclip.load_clip(TINY))
    assert openclip.PackedTextTransformer(tower).ok == openclip._packing_available()
    tower.attn_mask = None
    assert not openclip.PackedTextTransformer(tower).ok


@needs_packing
def test_search_returns_the_same_hits_either_way(tmp_path, weights):
    """`LoadedModel.search` on a zero-shot run: the packed path and the modules give the same top 10."""
    from videotext.convert import convert
    from videotext.inference import load_model
    from videotext.search import Index

    run = convert("openclip", TINY, tmp_path / "run", pretrained=weights)
    model = load_model(run, device="cpu", precision="fp32")
    rng = np.random.default_rng(0)
    index = Index(32, kind="flat")
    index.add(rng.standard_normal((500, 32)).astype(np.float32), [f"v{i}" for i in range(500)])
    encoder = model.method.text_encoder
    new = model.search(CAPTIONS, index, k=10)
    encoder.packed_inference = False
    ref = model.search(CAPTIONS, index, k=10)
    assert [[h.id for h in hits] for hits in new] == [[h.id for h in hits] for hits in ref]
    for a, b in zip(new, ref):
        np.testing.assert_allclose([h.score for h in a], [h.score for h in b], atol=1e-5)
