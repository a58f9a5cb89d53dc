"""Support-set captioning: the decoder (teacher-forced NLL, greedy = beam 1, beam search = brute
force on a tiny vocabulary), the captioning metrics on hand-computed cases, and
`caption_videos` on real mp4 files (slow: it extracts features)."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from videotext.eval.captioning import caption_metrics, tokenize_caption
from videotext.models.layers.caption_decoder import CaptionDecoder

PAD, BOS, EOS = 0, 1, 2


def _decoder(seed: int = 0, vocab: int = 6, max_len: int = 4) -> CaptionDecoder:
    torch.manual_seed(seed)
    dec = CaptionDecoder(vocab, memory_dim=5, bos_id=BOS, eos_id=EOS, pad_id=PAD, dim=8, layers=1, heads=2,
                         ffn_dim=16, dropout=0.0, max_len=max_len).eval()
    with torch.no_grad():  # a peaked output distribution, so search choices matter
        dec.token_embedding.weight.mul_(6.0)
    return dec


def _memory(seed: int = 0, batch: int = 2):
    g = torch.Generator().manual_seed(seed)
    memory = torch.randn(batch, 3, 5, generator=g)
    mask = torch.tensor([[True, True, True], [True, False, False]])[:batch]
    return memory, mask


@torch.no_grad()
def _sequence_logp(dec: CaptionDecoder, seqs: list[list[int]], memory, mask) -> list[float]:
    """log p(seq | memory) of equally long sequences, by teacher forcing (one batched forward)."""
    tokens = torch.tensor([[BOS] + list(s) for s in seqs])  # [N, n+1]
    n = len(seqs)
    logp = dec(tokens[:, :-1], memory.expand(n, -1, -1), mask.expand(n, -1)).log_softmax(-1)  # [N, n, V]
    return logp.gather(2, tokens[:, 1:, None])[..., 0].sum(1).tolist()


def test_nll_is_the_mean_token_cross_entropy_ignoring_padding():
    dec = _decoder()
    memory, mask = _memory()
    targets = torch.tensor([[BOS, 3, 4, EOS], [BOS, 5, EOS, PAD]])
    with torch.no_grad():
        nll = float(dec.nll(targets, memory, mask))
        first = _sequence_logp(dec, [[3, 4, EOS]], memory[:1], mask[:1])[0]
        second = _sequence_logp(dec, [[5, EOS]], memory[1:], mask[1:])[0]
    total = -(first + second)
    assert nll == pytest.approx(total / 5, abs=1e-5)  # 5 real target tokens


def test_greedy_equals_beam_of_one_step_argmax():
    dec = _decoder(seed=1, max_len=5)
    memory, mask = _memory(1)
    greedy = dec.generate(memory, mask, beam_size=1)
    for row, ids in enumerate(greedy):
        tokens = [BOS]
        for _ in range(4):  # re-derive greedy by hand: argmax of the next-token distribution
            nxt = int(dec(torch.tensor([tokens]), memory[row : row + 1], mask[row : row + 1])[0, -1].argmax())
            tokens.append(nxt)
            if nxt == EOS:
                break
        expected = tokens[1:]
        assert ids == (expected[: expected.index(EOS)] if EOS in expected else expected)


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_wide_beam_search_finds_the_brute_force_best_caption(length_penalty):
    dec = _decoder(seed=2, vocab=5, max_len=4)
    memory, mask = _memory(2)
    for row in range(2):
        m, k = memory[row : row + 1], mask[row : row + 1]
        candidates = []  # every sequence of ≤ 3 generated tokens: ends at EOS, or is cut at max_len
        for n in range(1, 4):
            seqs = [s for s in itertools.product(range(5), repeat=n)
                    if EOS not in s[:-1] and (n == 3 or s[-1] == EOS)]
            for seq, logp in zip(seqs, _sequence_logp(dec, seqs, m, k)):
                candidates.append((logp / n ** length_penalty, [t for t in seq if t != EOS]))
        best = max(candidates)[1]
        with torch.no_grad():
            found = dec.generate(m, k, beam_size=200, length_penalty=length_penalty)[0]
        assert found == best


# --- metrics --------------------------------------------------------------------------------
def test_tokenize_caption_drops_ptb_punctuation():
    assert tokenize_caption("A ball, rolling... to the LEFT!") == "a ball rolling to the left"
    assert tokenize_caption("it's red.") == "it's red"


def test_caption_metrics_hand_computed():
    # id 1: "a b c d" vs "a b c e": 1-gram precision 3/4, LCS 3 → ROUGE-L F = 0.75; id 2: exact match
    predictions = {"1": "a b c d", "2": "the red circle moves left"}
    references = {"1": ["a b c e"], "2": ["the red circle moves left"]}
    scores = caption_metrics(predictions, references, meteor=False)
    # corpus BLEU-1: matched 3 + 5 of 4 + 5 unigrams, no brevity penalty
    assert scores["bleu1"] == pytest.approx(100 * 8 / 9, abs=1e-4)
    # corpus BLEU-2: bigram matches (2 + 4) / (3 + 4)
    assert scores["bleu2"] == pytest.approx(100 * math.sqrt(8 / 9 * 6 / 7), abs=1e-4)
    assert scores["rouge_l"] == pytest.approx(100 * (0.75 + 1.0) / 2, abs=1e-4)
    assert set(scores) == {"bleu1", "bleu2", "bleu3", "bleu4", "rouge_l", "cider"}
    perfect = caption_metrics({"1": "a b c e", "2": "the red circle moves left"}, references, meteor=False)
    assert perfect["bleu4"] == pytest.approx(100.0, abs=1e-4) and perfect["cider"] > scores["cider"]


def test_caption_metrics_need_references():
    with pytest.raises(ValueError, match="no reference"):
        caption_metrics({"x": "a b"}, {"y": ["a b"]}, meteor=False)


@pytest.mark.slow
def test_meteor_runs_through_java():
    scores = caption_metrics({"1": "a red circle moves left", "2": "a blue square"},
                             {"1": ["a red circle moves left"], "2": ["a green star spins"]}, meteor=True)
    assert 0 < scores["meteor"] < 100


# --- caption_videos on real files ---------------------------------------------------------
@pytest.mark.slow
def test_caption_videos_matches_the_method_on_stored_features(tiny_synth, tmp_path):
    from videotext.captioning import caption_videos
    from videotext.config import load_config, save_config
    from videotext.data.features import FeatureStore
    from videotext.data.loaders import VideoFeatures
    from videotext.data.schema import VideoTextDataset
    from videotext.models.registry import build_method
    from videotext.train.checkpoint import save_checkpoint

    experts = ["motion", "audio"]  # no network to run: quick to extract again
    config = load_config(None, [f"data.manifest={tiny_synth / 'manifest.json'}",
                                f"data.features={tiny_synth / 'features'}", "data.experts=motion,audio",
                                "method=supportset", "model.freeze_text=true", "train.batch_size=8",
                                "model.embed_dim=16", "model.ffn_dim=32", "model.decoder=scratch",
                                "model.decoder_dim=16"])
    store = FeatureStore(tiny_synth / "features")
    dims = {e: int(store.dim(e)) for e in experts}
    torch.manual_seed(0)
    method = build_method("supportset", config.model, expert_dims=dims).eval()
    run = tmp_path / "run"
    save_config(config, run / "config.yaml")
    save_checkpoint(run / "checkpoints" / "best", method, {"method": "supportset", "expert_dims": dims})

    dataset = VideoTextDataset.load(tiny_synth / "manifest.json")
    videos = list(dataset)[:2]
    files = [dataset.media_path(v) for v in videos]
    got = caption_videos(run, files, beam_size=2, device="cpu")
    assert list(got) == [str(f.resolve()) for f in files]

    batch_reader = VideoFeatures(store, experts, config.data.max_steps_per_expert)
    batch = next(iter(method.video_batches(dataset.subset([v.id for v in videos]), batch_reader, 8)))
    assert list(got.values()) == method.caption(batch, beam_size=2)

    # the run-report pieces: Fig. 3 attention map and split captioning metrics
    from videotext.captioning import evaluate_run_captioning, plot_support_attention

    png = plot_support_attention(run)
    assert png == run / "report" / "support_attention.png" and png.stat().st_size > 1000
    from videotext.captioning import support_attention_stats

    stats = support_attention_stats(run, batches=2)
    assert len(stats["batches"]) == 2 and stats["mean"]["own_weight"] == pytest.approx(0.0, abs=1e-6)  # cross
    assert 1.0 <= stats["mean"]["effective_size"] <= 7.0  # at most the 7 other videos of a batch of 8
    assert 0.0 <= stats["mean"]["weight_on_sharing"] <= 1.0 and 0.0 <= stats["mean"]["sharing_uniform"] <= 1.0
    result = evaluate_run_captioning(run, split="test", beam_size=1, meteor=False, device="cpu")
    assert result["n_videos"] == len(dataset.split("test")) and 0 <= result["metrics"]["bleu4"] <= 100
    assert (run / "report" / "captioning.json").is_file()


# --- the run-report hook ------------------------------------------------------------------
class _Store:
    """In-memory stand-in for a FeatureStore: 6 videos, experts a [4, 3] and m [2, 2]."""

    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.data = {(e, f"v{i}"): torch.randn(n, d, generator=g).numpy()
                     for i in range(6) for e, (n, d) in {"a": (4, 3), "m": (2, 2)}.items()}

    def dim(self, expert):
        return {"a": 3, "m": 2}[expert]

    def has(self, expert, key):
        return (expert, key) in self.data

    def get(self, expert, key):
        values = self.data[(expert, key)]
        return values, torch.arange(len(values)).numpy()


def test_report_section_scores_captions_in_one_call_and_plots_the_attention(tmp_path, monkeypatch):
    import videotext.eval.captioning as captioning
    from videotext.data.loaders import VideoFeatures
    from videotext.data.schema import Video, VideoTextDataset
    from videotext.eval.supportset_report import captioning_report
    from videotext.models.registry import build_method

    calls = []

    def no_java(predictions, references, meteor=True):  # count the calls; skip the JVM
        calls.append(meteor)
        return {**caption_metrics(predictions, references, meteor=False), "meteor": 12.5}

    monkeypatch.setattr(captioning, "caption_metrics", no_java)
    videos = [Video(f"v{i}", captions=[f"a red circle number {i}", "a shape moves"]) for i in range(6)]
    data = VideoTextDataset("t", videos, {"test": [v.id for v in videos]})
    torch.manual_seed(0)
    model = build_method("supportset", {"embed_dim": 16, "ffn_dim": 32, "decoder": "scratch", "decoder_dim": 16,
                                        "decoder_ffn_dim": 32,
                                        "freeze_text": True, "max_caption_tokens": 6, "report_beam_size": 2},
                         expert_dims={"a": 3, "m": 2})
    extras = captioning_report(model, data, VideoFeatures(_Store(), ["a", "m"], 10), tmp_path)
    assert calls == [True]  # one METEOR call for the whole split
    (caption, table), = extras["tables"].items()
    assert caption.startswith("captioning (beam 2, 6 videos") and set(table["captioning"]) == {
        "bleu4", "meteor", "rouge_l", "cider"}
    assert table["captioning"]["meteor"] == 12.5
    (png, text), = extras["figures"]
    assert png == tmp_path / "support_attention.png" and png.stat().st_size > 1000 and "Fig. 3" in text
    assert (tmp_path / "captioning.json").is_file()
    no_decoder = build_method("supportset", {"embed_dim": 16, "ffn_dim": 32, "captioning": "none",
                                             "freeze_text": True}, expert_dims={"a": 3, "m": 2})
    assert captioning_report(no_decoder, data, None, tmp_path) == {}


def test_attention_stats_by_hand():
    from videotext.eval.supportset_report import attention_stats

    w = np.array([[0, .5, .5], [1, 0, 0], [.25, .25, .5]])
    shares = np.array([[0, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=bool)
    got = attention_stats(w, shares)
    assert got["effective_size"] == pytest.approx((2 + 1 + 2 ** 1.5) / 3)  # exp(entropy): 2, 1, 2^1.5
    assert got["max_weight"] == pytest.approx(2 / 3) and got["own_weight"] == pytest.approx(1 / 6)
    assert got["weight_on_sharing"] == pytest.approx(0.5)  # rows: .5, 1, 0
    assert got["sharing_uniform"] == pytest.approx(1 / 3)  # rows: 1/2, 1/2, 0
    assert set(attention_stats(w)) == {"effective_size", "max_weight", "own_weight"}


def test_sharing_matrix_marks_videos_with_a_common_event():
    from videotext.data.schema import Video
    from videotext.data.synthetic.sharing import sharing_matrix

    def video(i, *events):
        return Video(id=f"v{i}", meta={"events": [dict(zip(("colour", "shape", "action"), e)) for e in events]})

    videos = [video(0, ("red", "cross", "grow"), ("blue", "disc", "left")), video(1, ("blue", "disc", "left")),
              video(2, ("red", "cross", "shrink")), video(3, ("red", "cross", "grow"))]
    assert sharing_matrix(videos).tolist() == [[False, True, False, True], [True, False, False, False],
                                               [False, False, False, False], [True, False, False, False]]
