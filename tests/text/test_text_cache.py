"""A frozen text tower's cache: filled once, in one fixed order, at the precision it is given."""
from __future__ import annotations

import pytest
import torch

from videotext.text.encoder import HFTextEncoder

TEXTS = ["a red circle moves left", "a small blue square appears and then fades away slowly",
         "the green triangle grows", "an orange diamond vanishes, and after that a yellow star spins",
         "a purple square", "two shapes swap places while the background stays black"]


@pytest.fixture(scope="module")
def encoder():
    return HFTextEncoder("", "mean", True, 30).eval()


def cached(encoder, texts, dtype, batch_size):
    encoder._cache.clear()
    encoder.cache_dtype = dtype
    assert encoder.prefill(texts, batch_size=batch_size) == len(set(texts))
    return torch.stack([encoder._cache[t] for t in TEXTS])


def test_prefilled_vectors_do_not_depend_on_order_or_on_the_batch_that_asks(encoder):
    first = cached(encoder, TEXTS, torch.bfloat16, batch_size=4)
    again = cached(encoder, list(reversed(TEXTS)) + TEXTS[:2], torch.bfloat16, batch_size=4)
    assert torch.equal(first, again)
    batch = encoder.tokenize([TEXTS[3], TEXTS[0]])
    with torch.no_grad():
        out = encoder(batch)  # a batch of another shape reads the cache, does not encode anew
    assert torch.equal(out, first[[3, 0]])
    assert encoder.prefill(TEXTS) == 0  # nothing left to encode


def test_bf16_cache_stays_within_the_precision_rule_of_fp32(encoder):
    full = cached(encoder, TEXTS, None, batch_size=256)
    half = cached(encoder, TEXTS, torch.bfloat16, batch_size=256)
    assert full.dtype == half.dtype == torch.float32
    cosine = torch.nn.functional.cosine_similarity(full, half, dim=-1)
    assert float(cosine.min()) >= 0.999  # videotext.runtime.BF16_MIN_COSINE
    assert float((full - half).abs().max()) > 0  # bf16 did round differently


def test_a_trained_tower_keeps_no_cache():
    tower = HFTextEncoder("", "mean", False, 30)
    assert tower.prefill(TEXTS) == 0 and not tower._cache


def test_the_fill_shows_a_bar_counting_the_captions(encoder, capsys):
    encoder._cache.clear()
    encoder.prefill(TEXTS + TEXTS[:2], batch_size=4, progress=True)  # 6 distinct captions, batches of 4 + 2
    bar = capsys.readouterr().err
    assert "text cache" in bar and "6/6" in bar and "caption" in bar
    encoder.prefill(TEXTS, progress=True)  # nothing to encode: no bar
    assert capsys.readouterr().err == ""
