"""ToCo building blocks: tokens of interest, TF-IDF, the candidate losses, negative sampling, fusion layers."""
from __future__ import annotations

import math

import pytest
import torch

from videotext.losses.token import global_contrast, sample_negatives, token_contrast
from videotext.models.layers.fusion import FusionEncoder, FusionLayer, ScoreMLP
from videotext.text.pos import PosTagger, fit_idf, select_pieces, tfidf_weights


def test_select_pieces_maps_words_onto_word_pieces():
    # "a reddish cube": pieces [CLS] a red ##dish cube [SEP] [PAD]
    offsets = [(0, 0), (0, 1), (2, 5), (5, 9), (10, 14), (0, 0), (0, 0)]
    words = [(0, 1, "DET"), (2, 9, "ADJ"), (10, 14, "NOUN")]
    assert select_pieces(offsets, words, ("NOUN", "VERB", "ADJ")) == [False, False, True, True, True, False, False]
    assert select_pieces(offsets, words, ("DET",)) == [False, True, False, False, False, False, False]


def test_tagger_finds_nouns_verbs_adjectives():
    words = PosTagger().words(["A red diamond spins quickly."])[0]
    tags = {"A red diamond spins quickly."[s:e]: pos for s, e, pos in words}
    assert tags["A"] == "DET" and tags["red"] == "ADJ" and tags["diamond"] == "NOUN"
    assert tags["quickly"] == "ADV" and tags["."] == "PUNCT"


def test_tfidf_matches_scikit_learn_and_hand_values():
    from sklearn.feature_extraction.text import TfidfVectorizer

    docs = [[5, 6, 5], [6, 7], [8]]
    table = {" ".join(map(str, d)): d for d in docs}
    idf = fit_idf(list(table), lambda text: table[text], vocab_size=10)
    n = 3  # smoothed idf = ln((1+n)/(1+df)) + 1
    assert idf[5].item() == pytest.approx(math.log(4 / 2) + 1)
    assert idf[6].item() == pytest.approx(math.log(4 / 3) + 1)
    assert idf[0].item() == pytest.approx(math.log(n + 1) + 1)  # unseen piece: as rare as can be
    ids = torch.tensor([[5, 6, 5, 0]])
    valid = torch.tensor([[True, True, True, False]])
    raw = tfidf_weights(ids, valid, valid, idf) * 1.0
    reference = TfidfVectorizer(analyzer=lambda t: [str(i) for i in table[t]], norm=None).fit(list(table))
    row = reference.transform(["5 6 5"]).toarray()[0]
    expected = {int(name): row[col] for name, col in reference.vocabulary_.items()}
    total = expected[5] * 2 + expected[6]  # both "5" pieces carry tf=2 · idf
    assert raw[0, 0].item() == pytest.approx(expected[5] / total, rel=1e-6)
    assert raw[0, 1].item() == pytest.approx(expected[6] / total, rel=1e-6)
    assert raw[0, 3].item() == 0.0
    none = tfidf_weights(ids, valid, torch.zeros_like(valid), idf)
    assert none.abs().sum().item() == 0.0


def test_global_contrast_hand_value():
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    expected = (math.log(1 + 2 * math.exp(-2)) + math.log(3)) / 2
    assert global_contrast(logits).item() == pytest.approx(expected, rel=1e-6)


def test_token_contrast_weights_tokens_and_skips_texts_without_tokens():
    # text 0: token 0 (weight .25) positive ahead by 1, token 1 (weight .75) tied; text 1: no token
    logits = torch.zeros(2, 2, 2)
    logits[0, 0, 0] = 1.0
    weights = torch.tensor([[0.25, 0.75], [0.0, 0.0]])
    expected = 0.25 * math.log(1 + math.exp(-1)) + 0.75 * math.log(2)
    assert token_contrast(logits, weights).item() == pytest.approx(expected, rel=1e-6)
    assert token_contrast(logits, torch.zeros(2, 2)).item() == 0.0


def test_hard_negatives_are_the_highest_non_positive_scores():
    scores = torch.tensor([[9.0, 5.0, 1.0, 3.0], [0.0, 9.0, 4.0, 2.0], [8.0, 7.0, 9.0, 1.0], [1.0, 2.0, 3.0, 0.0]])
    positives = torch.eye(4, dtype=torch.bool)
    hard = sample_negatives(scores, positives, 2, hard=True)
    assert hard.tolist() == [[1, 3], [2, 3], [0, 1], [2, 1]]
    random = sample_negatives(scores, positives, 3, hard=False, generator=torch.Generator().manual_seed(0))
    assert all(sorted(row) == sorted(set(range(4)) - {i}) for i, row in enumerate(random.tolist()))
    with pytest.raises(ValueError, match="only 3"):
        sample_negatives(scores, positives, 4)


def test_mixed_negatives_take_the_hardest_then_distinct_random_ones():
    scores = torch.tensor([[9.0, 5.0, 1.0, 3.0, 4.0], [0.0, 9.0, 4.0, 2.0, 1.0], [8.0, 7.0, 9.0, 1.0, 0.0]])
    positives = torch.zeros(3, 5, dtype=torch.bool)
    positives[0, 0] = positives[1, 1] = positives[2, 2] = True
    for seed in range(5):
        mixed = sample_negatives(scores, positives, 3, hard=1, generator=torch.Generator().manual_seed(seed))
        assert mixed[:, 0].tolist() == [1, 2, 0]  # the single hardest negative of each text comes first
        for i, row in enumerate(mixed.tolist()):
            assert len(set(row)) == 3 and i not in row  # random ones never repeat it nor hit the positive
    # hard=0 draws exactly what random sampling draws (same RNG use: old runs stay reproducible)
    zero = sample_negatives(scores, positives, 2, hard=0, generator=torch.Generator().manual_seed(3))
    assert torch.equal(zero, sample_negatives(scores, positives, 2, hard=False, generator=torch.Generator().manual_seed(3)))
    assert torch.equal(sample_negatives(scores, positives, 2, hard=2), sample_negatives(scores, positives, 2, hard=True))
    with pytest.raises(ValueError, match="0..2"):
        sample_negatives(scores, positives, 2, hard=3)


def test_fusion_layer_parameter_count():
    d, ff = 16, 40
    layer = FusionLayer(d, heads=4, ff_dim=ff, dropout=0.0)
    # qkv + out projection, FFN, two LayerNorms
    expected = (3 * d * d + 3 * d) + (d * d + d) + (d * ff + ff) + (ff * d + d) + 4 * d
    assert sum(p.numel() for p in layer.parameters()) == expected
    assert sum(p.numel() for p in ScoreMLP(d + 8, d).parameters()) == (d + 8) * d + d + d + 1


@pytest.mark.parametrize("pre_norm", [False, True])
def test_fusion_encoder_ignores_padding(pre_norm):
    torch.manual_seed(0)
    enc = FusionEncoder(16, depth=2, heads=4, ff_dim=32, dropout=0.0, max_video_tokens=8, pre_norm=pre_norm).eval()
    video, text = torch.randn(1, 3, 16), torch.randn(1, 4, 16)
    cls, out = enc(video, torch.ones(1, 3, dtype=torch.bool), text, torch.ones(1, 4, dtype=torch.bool))
    padded_video = torch.cat([video, torch.randn(1, 2, 16)], 1)
    padded_text = torch.cat([text, torch.randn(1, 3, 16)], 1)
    v_mask = torch.tensor([[True] * 3 + [False] * 2])
    t_mask = torch.tensor([[True] * 4 + [False] * 3])
    cls2, out2 = enc(padded_video, v_mask, padded_text, t_mask)
    assert cls.shape == (1, 16) and out2.shape == (1, 7, 16)
    assert torch.allclose(cls, cls2, atol=1e-5)
    assert torch.allclose(out, out2[:, :4], atol=1e-5)
