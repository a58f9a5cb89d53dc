"""MMT (Gabeur et al. 2020): similarity (eq. 6), temporal embeddings (§3.1), missing
experts, Table 3a/3b switches, the timestamp-keeping reader and one training step."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from videotext.config import ConfigError
from videotext.data.features import FeatureStore
from videotext.data.loaders import VideoFeatures
from videotext.data.schema import Video, VideoTextDataset
from videotext.losses import info_nce, max_margin_ranking
from videotext.models import build_method
from videotext.models.layers.mmt_bert import MMTBert
from videotext.data.mmt_features import MMTFeatures
from videotext.models.mmt import mixture_similarity, mixture_similarity_reference

DIMS = {"motion": 6, "audio": 4, "appearance": 5}
SMALL = {"d_model": 16, "layers": 2, "heads": 2, "intermediate": 32, "max_seconds": 10}


def tiny_bert(folder) -> str:
    """A 1-layer, width-16 BERT + WordPiece tokenizer saved as an HF folder (a few KB)."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "red", "circle", "then", "moves", "left", "right", "blue"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(words) + "\n")
    tokenizer = BertTokenizerFast.from_pretrained(folder)  # reads vocab.txt (vocab_file= alone gives a 5-token vocabulary)
    assert tokenizer.unk_token_id not in tokenizer("red circle")["input_ids"]  # the words are known
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=40)
    BertModel(config).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def text_model(tmp_path_factory) -> str:
    return tiny_bert(tmp_path_factory.mktemp("bert"))


def make_mmt(text_model: str, **overrides):
    torch.manual_seed(0)
    return build_method("mmt", {"text_model": text_model, **SMALL, **overrides}, expert_dims=DIMS).eval()


def video_batch(batch_size: int = 3, steps: int = 4, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    batch = {"features": {}, "masks": {}, "times": {}}
    for e, d in DIMS.items():
        batch["features"][e] = torch.randn(batch_size, steps, d, generator=g)
        batch["masks"][e] = torch.ones(batch_size, steps, dtype=torch.bool)
        batch["times"][e] = torch.arange(steps, dtype=torch.float32).repeat(batch_size, 1)
    return batch


# --- eq. 6 -------------------------------------------------------------------------------
def test_similarity_hand_computed():
    # one caption, one video, two experts; ⟨φ1, ψ1⟩ = 0.5, ⟨φ2, ψ2⟩ = -1, weights 0.25 / 0.75
    text = {"experts": torch.tensor([[[1.0, 0.0], [0.0, 1.0]]]), "weights": torch.tensor([[0.25, 0.75]])}
    video = {"experts": torch.tensor([[[0.5, 0.0], [0.0, -1.0]]]), "available": torch.tensor([[1.0, 1.0]])}
    assert mixture_similarity(text, video).item() == pytest.approx(0.25 * 0.5 + 0.75 * -1.0)
    video["available"] = torch.tensor([[1.0, 0.0]])  # expert 2 missing: its weight renormalised away
    assert mixture_similarity(text, video).item() == pytest.approx(0.5)
    video["available"] = torch.tensor([[0.0, 0.0]])  # nothing available: score 0, not NaN
    assert mixture_similarity(text, video).item() == 0.0


def test_chunked_similarity_equals_per_pair_reference():
    g = torch.Generator().manual_seed(1)
    text = {"experts": torch.randn(37, 3, 8, generator=g), "weights": torch.rand(37, 3, generator=g).softmax(-1)}
    video = {"experts": torch.randn(11, 3, 8, generator=g), "available": (torch.rand(11, 3, generator=g) > 0.3).float()}
    expected = mixture_similarity_reference(text, video)
    for chunk in (1, 5, 1024):
        torch.testing.assert_close(mixture_similarity(text, video, chunk_size=chunk), expected, rtol=1e-5, atol=1e-6)


# --- §3.1 inputs -------------------------------------------------------------------------
def test_temporal_positions_by_second(text_model):
    model = make_mmt(text_model)  # max_seconds 10 → rows 0 (agg), 1 (unk), 2..11 = T_1..T_10
    times = torch.tensor([[0.0, 0.5, 1.0, 7.4, float("nan"), 100.0, 3.0]])
    mask = torch.tensor([[True] * 6 + [False]])
    # [0,1) → T_1 (row 2); 7.4 s → T_8 (row 9, the paper's example); unknown → T_unk; clamped at T_10; padding → unk
    assert model._positions(times, mask).tolist() == [[2, 2, 3, 9, 1, 11, 1]]


def test_video_encoder_parameter_count_at_paper_size():
    d, inter, layers = 512, 3072, 4  # §4.2; tables: 32 positions (30 s + agg + unk), 19 token types (official)
    per_layer = 4 * (d * d + d) + (d * inter + inter) + (inter * d + d) + 2 * 2 * d
    expected = 32 * d + 19 * d + 2 * d + layers * per_layer
    bert = MMTBert(d, layers, 4, inter, num_positions=32, num_types=19)
    assert sum(p.numel() for p in bert.parameters()) == expected == 16_835_072


def test_output_shapes_and_normalisation(text_model):
    model = make_mmt(text_model)
    with torch.no_grad():
        video = model.encode_video(video_batch())
        text = model.encode_text(model.prepare_text(["a red circle moves left", "blue"]))
    assert model.experts == ["appearance", "audio", "motion"]  # official token order: sorted names
    assert video["experts"].shape == (3, 3, 16) and text["experts"].shape == (2, 3, 16)
    torch.testing.assert_close(video["experts"].norm(dim=-1), torch.ones(3, 3))
    torch.testing.assert_close(text["weights"].sum(-1), torch.ones(2))
    assert model.similarity(text, video).shape == (2, 3)
    # the flat vectors a FAISS index stores reproduce eq. 6 when every expert is present
    torch.testing.assert_close(model.query_vectors(text) @ model.index_vectors(video).T, model.similarity(text, video))


def test_missing_expert_is_masked_and_renormalised(text_model):
    model = make_mmt(text_model)
    batch = video_batch(batch_size=2)
    batch["masks"]["audio"][1] = False  # video 1 has no audio (zero steps)
    other = {k: {e: v.clone() for e, v in d.items()} for k, d in batch.items()}
    other["features"]["audio"][1] = 1e3  # garbage in the padded audio steps of video 1
    with torch.no_grad():
        a, b = model.encode_video(batch), model.encode_video(other)
        text = model.encode_text(model.prepare_text(["a red circle"]))
    assert a["available"].tolist() == [[1.0, 1.0, 1.0], [1.0, 0.0, 1.0]]
    torch.testing.assert_close(a["experts"][1, [0, 2]], b["experts"][1, [0, 2]])  # masked keys: no influence
    w, phi, psi = text["weights"][0], text["experts"][0], a["experts"][1]
    expected = (w[0] * phi[0] @ psi[0] + w[2] * phi[2] @ psi[2]) / (w[0] + w[2])
    assert model.similarity(text, a)[0, 1].item() == pytest.approx(expected.item(), abs=1e-6)
    official = make_mmt(text_model, keep_missing_experts=True)  # official: keeps the missing expert's weight
    with torch.no_grad():
        assert official.encode_video(batch)["available"].tolist() == [[1.0] * 3] * 2


def test_missing_expert_official_agg_input_is_the_normalised_bias(text_model):
    """missing_agg "bias" (official ReduceDim(0), released models): the missing expert's [AGG]
    input is bias / |bias|; the token stays masked as a key; its output is the embedding."""
    batch = video_batch(batch_size=2)
    batch["masks"]["audio"][1] = False  # video 1 has no audio
    batch["features"]["audio"][1] = 0.0  # the official batch: zeros
    models = {mode: make_mmt(text_model, missing_agg=mode, keep_missing_experts=True) for mode in ("zero", "bias")}
    bias = torch.zeros(16)
    bias[0], bias[1] = 3.0, -4.0  # |bias| = 5 → normalised (0.6, -0.8, 0, …)
    inputs = {}
    for mode, model in models.items():
        with torch.no_grad():
            model.project["audio"].bias.copy_(bias)
        model.video_bert.register_forward_pre_hook(lambda _, args, mode=mode: inputs.__setitem__(mode, args))
    with torch.no_grad():
        out = {mode: model.encode_video(batch) for mode, model in models.items()}
    # tokens: [AGG] appearance + 4 features, then [AGG] audio at position 5 (sorted experts, no [CLS])
    features, _, _, mask = inputs["bias"]
    expected = torch.zeros(16)
    expected[0], expected[1] = 0.6, -0.8
    torch.testing.assert_close(features[1, 5], expected)
    assert not mask[1, 5] and mask[0, 5]  # masked as a key where the expert is missing
    torch.testing.assert_close(inputs["zero"][0][1, 5], torch.zeros(16))  # §4.2: a zero vector
    torch.testing.assert_close(features[0], inputs["zero"][0][0])  # video 0 has every expert: same input
    # masked key: the other experts' outputs are unchanged; the audio output differs and is used
    torch.testing.assert_close(out["bias"]["experts"][:, [0, 2]], out["zero"]["experts"][:, [0, 2]])
    assert (out["bias"]["experts"][1, 1] - out["zero"]["experts"][1, 1]).abs().max() > 1e-3
    assert out["bias"]["available"].tolist() == [[1.0] * 3] * 2
    # similarity as official: vid weights 1/M, moe = w_m (1/M) / Σ w (1/M) = w_m → Σ_m w_m ⟨φ_m, ψ_m⟩
    with torch.no_grad():
        text = models["bias"].encode_text(models["bias"].prepare_text(["a red circle"]))
    w, phi, psi = text["weights"][0], text["experts"][0], out["bias"]["experts"][1]
    expected_sim = sum(w[m] * phi[m] @ psi[m] for m in range(3))
    assert models["bias"].similarity(text, out["bias"])[0, 1].item() == pytest.approx(expected_sim.item(), abs=1e-6)
    # without the transformer the embedding is the normalised bias itself: audio adds w_audio (0.6 φ_0 − 0.8 φ_1)
    none = make_mmt(text_model, encoder="none", missing_agg="bias", keep_missing_experts=True)
    with torch.no_grad():
        none.project["audio"].bias.copy_(bias)
        video = none.encode_video(batch)
        text = none.encode_text(none.prepare_text(["a red circle"]))
    torch.testing.assert_close(video["experts"][1, 1], expected)
    w, phi, psi = text["weights"][0], text["experts"][0], video["experts"][1]
    hand = w[0] * phi[0] @ psi[0] + w[1] * (0.6 * phi[1, 0] - 0.8 * phi[1, 1]) + w[2] * phi[2] @ psi[2]
    assert none.similarity(text, video)[0, 1].item() == pytest.approx(hand.item(), abs=1e-6)
    with pytest.raises(ConfigError, match="missing_agg"):
        make_mmt(text_model, missing_agg="mean")


def test_temporal_order_matters_only_with_the_transformer(text_model):
    batch = video_batch(batch_size=2, steps=5)
    reversed_batch = {k: dict(v) for k, v in batch.items()}
    reversed_batch["features"] = {e: f.flip(1) for e, f in batch["features"].items()}  # same features, other order
    for encoder, changes in (("mmt", True), ("none", False)):
        model = make_mmt(text_model, encoder=encoder)
        if model.video_bert is not None:  # the BERT init (std 0.02) makes every effect tiny: use O(1) weights
            for weight in model.video_bert.parameters():
                if weight.dim() > 1:
                    torch.nn.init.normal_(weight, std=0.5, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            diff = (model.encode_video(batch)["experts"] - model.encode_video(reversed_batch)["experts"]).abs().max()
        assert (diff > 1e-3) if changes else (diff < 1e-6), (encoder, float(diff))


def test_table3_switches(text_model):
    batch = video_batch(batch_size=2)
    with torch.no_grad():
        none = make_mmt(text_model, encoder="none").encode_video(batch)["experts"]
        model = make_mmt(text_model, encoder="none")
        expected = torch.nn.functional.normalize(model.project["motion"](batch["features"]["motion"].amax(1)), dim=-1)
        torch.testing.assert_close(none[:, 2], expected)  # NONE = projected max-pooled features (Table 3a)
        mean = make_mmt(text_model, encoder="none", agg_init="mean").encode_video(batch)["experts"]
        expected = torch.nn.functional.normalize(model.project["motion"](batch["features"]["motion"].mean(1)), dim=-1)
        torch.testing.assert_close(mean[:, 2], expected)  # mean-pool initialisation (Table 3b)
        agg_only = make_mmt(text_model, inputs="agg")
        out = agg_only.encode_video(batch)["experts"]
        changed = {k: dict(v) for k, v in batch.items()}
        changed["features"] = {e: f.flip(1) for e, f in batch["features"].items()}
        torch.testing.assert_close(agg_only.encode_video(changed)["experts"], out)  # agg tokens only: order-free
    with pytest.raises(Exception, match="agg_init"):
        make_mmt(text_model, agg_init="median")


def test_loss_is_eq8_on_the_mixture_similarity(text_model):
    model = make_mmt(text_model)
    model.train()
    torch.manual_seed(0)
    batch = {"video": video_batch(batch_size=4), "text": model.prepare_text(["a red circle", "blue", "then left", "right"])}
    out = model.loss(batch)
    out["loss"].backward()
    assert model.project["audio"].weight.grad.abs().sum() > 0 and model.mixture.weight.grad.abs().sum() > 0
    model.eval()
    with torch.no_grad():
        sims = model.similarity(model.encode_text(batch["text"]), model.encode_video(batch["video"]))
        expected = max_margin_ranking(sims, margin=0.05)["loss"]
        assert model.loss(batch)["loss"].item() == pytest.approx(expected.item(), rel=1e-6)
        hinge = sum(max(0, 0.05 + sims[i, j] - sims[i, i]) + max(0, 0.05 + sims[j, i] - sims[i, i])
                    for i in range(4) for j in range(4) if i != j) / 4  # eq. 8 by hand
    assert expected.item() == pytest.approx(float(hinge), rel=1e-6)


def test_infonce_option_is_symmetric_cross_entropy_on_the_mixture_similarity(text_model):
    model = make_mmt(text_model, loss="infonce", temperature=0.1)
    batch = {"video": video_batch(batch_size=3), "text": model.prepare_text(["a red circle", "blue", "then left"])}
    with torch.no_grad():
        sims = model.similarity(model.encode_text(batch["text"]), model.encode_video(batch["video"]))
        logits = sims / 0.1
        by_hand = 0.0
        for i in range(3):  # -log softmax of the diagonal over rows (t2v) plus over columns (v2t), eq. 2-3
            by_hand -= math.log(math.exp(logits[i, i]) / sum(math.exp(logits[i, j]) for j in range(3))) / 3
            by_hand -= math.log(math.exp(logits[i, i]) / sum(math.exp(logits[j, i]) for j in range(3))) / 3
        loss = model.loss(batch)["loss"].item()
    assert loss == pytest.approx(by_hand, rel=1e-5)
    with pytest.raises(ConfigError, match="model.loss"):
        make_mmt(text_model, loss="hinge")


def test_expert_loss_adds_the_mean_per_expert_loss(text_model):
    base, extra = make_mmt(text_model, loss="infonce"), make_mmt(text_model, loss="infonce", expert_loss_weight=0.5)
    batch = {"video": video_batch(batch_size=3), "text": base.prepare_text(["a red circle", "blue", "then left"])}
    with torch.no_grad():
        text, video = extra.encode_text(batch["text"]), extra.encode_video(batch["video"])
        per_expert = []
        for i in range(3):  # each expert's own cosine matrix, scored like the mixture (eq. 2-3)
            sims = torch.stack([torch.stack([text["experts"][t, i] @ video["experts"][v, i] for v in range(3)])
                                for t in range(3)])
            per_expert.append(info_nce(sims, temperature=0.05)["loss"])
        out = extra.loss(batch)
    assert out["expert_loss"].item() == pytest.approx(float(sum(per_expert)) / 3, rel=1e-5)
    assert out["loss"].item() == pytest.approx(base.loss(batch)["loss"].item() + 0.5 * out["expert_loss"].item(),
                                               rel=1e-5)
    assert "expert_loss" not in base.loss(batch)


# --- the reader --------------------------------------------------------------------------
def test_reader_keeps_timestamps_pools_all_steps_and_shuffles(tmp_path, text_model):
    store = FeatureStore(tmp_path)
    with store.writer("motion", 2, dtype="float32") as writer:
        writer.add("v0", np.arange(10, dtype=np.float32).reshape(5, 2), np.arange(5) * 0.5, step=0.5)
        writer.add("v1", np.zeros((3, 2)), np.arange(3.0), step=1.0, missing=True)
    reader = MMTFeatures(store, ["motion"], max_steps=2)
    item = reader("v0")
    np.testing.assert_array_equal(item["features"]["motion"], [[2, 3], [6, 7]])  # steps 1 and 3 of 5
    np.testing.assert_array_equal(item["times"]["motion"], [0.5, 1.5])
    np.testing.assert_array_equal(item["max"]["motion"], [8, 9])  # over all 5 steps, before sub-sampling
    assert reader("v1")["features"]["motion"].shape == (0, 2)  # flagged missing → zero steps
    shuffled = MMTFeatures(store, ["motion"], max_steps=5, shuffle=True)("v0")
    assert sorted(map(tuple, shuffled["features"]["motion"].tolist())) == [(2 * i, 2 * i + 1) for i in range(5)]
    assert shuffled["features"]["motion"][:, 0].tolist() != [0, 2, 4, 6, 8]  # permuted against the times
    np.testing.assert_array_equal(shuffled["times"]["motion"], np.arange(5) * 0.5)
    dataset = VideoTextDataset("t", [Video(id=k, captions=["a red circle"]) for k in ("v0", "v1")],
                               splits={"train": ["v0", "v1"]})
    model = build_method("mmt", {"text_model": text_model, **SMALL}, expert_dims={"motion": 2})
    batches = model.train_batches(dataset, VideoFeatures(store, ["motion"], 2), batch_size=2, seed=0)
    batch = batches.batch(0, 0)
    again = batches.batch(0, 0)
    assert batch["video_ids"] == again["video_ids"]
    torch.testing.assert_close(batch["video"]["times"]["motion"], again["video"]["times"]["motion"], equal_nan=True)
    row = batch["video_ids"].index("v0")
    assert batch["video"]["masks"]["motion"].sum(1).tolist()[row] == 2
    assert batch["video"]["masks"]["motion"].sum(1).tolist()[1 - row] == 0
    assert math.isnan(batch["video"]["times"]["motion"][1 - row, 0].item())
    model.eval()
    with torch.no_grad():
        encoded = model.encode_video(next(iter(model.video_batches(dataset, VideoFeatures(store, ["motion"], 2), 8))))
    assert encoded["available"].tolist() == [[1.0], [0.0]]


def test_report_section_removes_each_expert_as_missing(tmp_path, text_model):
    from videotext.eval.mmt_report import expert_report

    rng = np.random.default_rng(0)
    store = FeatureStore(tmp_path / "features")
    keys = [f"v{i}" for i in range(4)]
    for expert, dim in DIMS.items():
        with store.writer(expert, dim, dtype="float32") as writer:
            for key in keys:
                writer.add(key, rng.normal(size=(3, dim)).astype(np.float32), np.arange(3.0), step=1.0)
    words = ["a red circle", "blue", "then left", "right"]
    dataset = VideoTextDataset("t", [Video(id=k, captions=[w]) for k, w in zip(keys, words)], splits={"test": keys})
    model = make_mmt(text_model)
    model.train()
    reader = VideoFeatures(store, list(DIMS), 4)
    extras = expert_report(model, dataset, reader, tmp_path / "report")
    assert model.training  # restored
    rows = extras["tables"]["each expert removed at test time (no retraining)"]
    assert list(rows) == ["t2v, all experts"] + [f"t2v without {e}" for e in sorted(DIMS)]
    assert all(row["n_queries"] == 4 for row in rows.values())
    assert (tmp_path / "report" / extras["figures"][0][0]).stat().st_size > 1000
    weights = [float(part.split()[-1]) for part in extras["notes"][0].split(": ")[1].rstrip(".").split(", ")]
    assert sum(weights) == pytest.approx(1.0, abs=2e-3)  # softmax over experts (eq. 7)
    # removal = the expert's tokens leave the encoder too (other experts' ψ change), not just its weight
    model.eval()
    from videotext.encode import encode_videos
    full = encode_videos(model, dataset, reader)
    drop = encode_videos(model, dataset, MMTFeatures(store, list(DIMS), 4, missing=["audio"]))
    m = model.experts.index("audio")
    assert drop["available"][:, m].sum() == 0 and full["available"][:, m].sum() == 4
    assert (drop["experts"][:, 1 - m] - full["experts"][:, 1 - m]).abs().max() > 1e-4
    # each expert alone = R@1 of its own cosine matrix ⟨φ^i, ψ^i⟩ (one caption per video, in order)
    from videotext.eval.evaluate import encode_split
    encoded = encode_split(model, dataset, reader)
    alone = extras["tables"]["each expert's own similarity ⟨φ^i, ψ^i⟩ alone (same model)"]
    for i, expert in enumerate(model.experts):
        sims = encoded.text["experts"][:, i] @ encoded.video["experts"][:, i].T  # [4 captions, 4 videos]
        ranks = 1 + (sims > sims.diagonal()[:, None]).sum(1).float()  # rank of the caption's own video
        assert alone[f"t2v, {expert} alone"]["R1"] == pytest.approx(100 * float((ranks == 1).float().mean()))
        assert alone[f"t2v, {expert} alone"]["MnR"] == pytest.approx(float(ranks.mean()))
