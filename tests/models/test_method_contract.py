"""The contract every registered method keeps, checked on each one.

Parametrized over `videotext.models.METHODS`, so a newly registered method is covered
without an edit here. Each method is built from its packaged `<method>/synthetic` config,
shrunk by the overrides in `SMALL` (a method without an entry there runs its packaged
config as it is), on a few videos of the tiny synthetic fixture. A method that cannot be
built fails every test below; nothing is skipped.

For each method:
1. `encode_text` / `encode_video` give one row per caption / video (whatever the batch
   size), and `query_vectors` / `index_vectors` one vector of a shared width per row;
2. `similarity` is a finite [n_text, n_video] matrix whose rows are not constant;
3. `loss` on one training batch is finite and its gradients reach the parameters, all finite;
4. search ranks as `similarity` does: for dot-product methods `query_vectors · index_vectors`
   and the index; for methods that re-score a shortlist (MMT, ToCo: `LoadedModel.rescores`),
   the re-scored shortlist comes back in `similarity`'s order, and a shortlist as wide as the
   one `similarity` re-scores itself returns `similarity`'s top videos. A permuted index fails
   the same check, so the check is known to bite;
5. a run directory written with `save_config` + `save_checkpoint` (from a state no build
   reproduces) loads with `load_model` into a model with the same state dict and the same
   embeddings, query vectors and index vectors.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from videotext.config import RunConfig, find_config, load_config, save_config
from videotext.data.loaders import VideoFeatures
from videotext.data.schema import VideoTextDataset
from videotext.embedding import Embedding, concat_embeddings
from videotext.encode import encode_texts, encode_videos
from videotext.eval.evaluate import Encoded, encode_split, score
from videotext.inference import LoadedModel, load_model
from videotext.models import METHODS, Method, build_method  # importing the package registers every method
from videotext.search.entries import Entry
from videotext.search.index import Index
from videotext.train.checkpoint import save_checkpoint, seed_everything
from videotext.data.run_data import RunData

TINY_CLIP = str(Path(__file__).resolve().parents[1] / "fixtures" / "openclip_tiny.json")
VIDEOS = 6  # videos encoded, scored, indexed and trained on
CAPTIONS = 3  # captions kept per video (the queries)
BATCH = 4  # training batch
SHORTLIST = 4  # candidates a re-scoring method re-scores per query (fewer than VIDEOS)
SEED = 0

# Overrides of each packaged `<method>/synthetic` config that keep a model to a few seconds of
# CPU: small widths and depths, few time steps (and the tiny `text_model` below, frozen as packaged).
SMALL: dict[str, list[str]] = {
    "dual": ["model.embed_dim=16"],
    "frozen": ["model.preset=tiny", "model.num_frames=2", "model.embed_dim=16", "model.max_test_clips=1"],
    "mmt": ["data.experts=[appearance,motion,audio]", "data.max_steps_per_expert=8", "model.d_model=16",
            "model.layers=1", "model.heads=2", "model.intermediate=32", "model.max_seconds=10"],
    "coot": ["data.max_steps_per_expert=16", "model.max_frames=16", "model.hidden_dim=16", "model.num_heads=2",
             "model.ff_dim=16", "model.af_dim=32", "model.af_heads=2"],
    "supportset": ["data.max_steps_per_expert=8", "model.embed_dim=16", "model.heads=2", "model.ffn_dim=32",
                   "model.pooling_layers=1", "model.cnn_kernels=[2,3]", "model.decoder=scratch",
                   "model.decoder_dim=16", "model.decoder_layers=1", "model.decoder_heads=2",
                   "model.decoder_ffn_dim=32"],
    "toco": ["data.max_steps_per_expert=8", "model.max_video_tokens=8", "model.hidden_dim=16", "model.num_heads=2",
             "model.ff_dim=32", "model.video_layers=1", "model.num_layers=1", "model.cheap_dim=16",
             "model.num_negatives=3", f"model.rerank_top_k={SHORTLIST}"],
    "conse": ["data.experts=[appearance]", "model.layout_expert="],  # the fixture's store has no layout
    "clip4clip": [f"model.clip_model={TINY_CLIP}", "model.pretrained=", "model.transformer_layers=1",
                  "data.max_steps_per_expert=4"],
}

# A method whose case is a known defect: {test name: {method: reason}} (pytest.mark.xfail, strict).
KNOWN_DEFECTS: dict[str, dict[str, str]] = {}


def methods(test: str) -> list[Any]:
    """Every registered retrieval method as a parameter of `test`, known defects marked strict xfail
    (moment methods, which rank spans of one video, keep their own contract: tests/models/test_moment_detr.py)."""
    defects = KNOWN_DEFECTS.get(test, {})
    return [pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=defects[name])) if name in defects
            else name for name in sorted(METHODS) if METHODS[name].task == "retrieval"]


def test_every_registered_method_is_covered():
    """The built-in methods are registered, and every method has a packaged synthetic config to start from."""
    assert {"dual", "frozen", "mmt", "coot", "supportset", "toco", "clip4clip"} <= set(METHODS)
    assert set(SMALL) <= set(METHODS) and all(set(defects) <= set(METHODS) for defects in KNOWN_DEFECTS.values())
    for name in METHODS:
        assert find_config(f"{name}/synthetic").is_file(), name


# --- building one method ----------------------------------------------------------------


@dataclass
class Case:
    """A small model of one method with its run config and the videos it is checked on."""

    name: str
    config: RunConfig
    method: Method
    videos: VideoTextDataset
    read_features: VideoFeatures | None

    @property
    def expert_dims(self) -> dict[str, int] | None:
        return self.read_features.dims if self.read_features is not None else None

    def captions(self, count: int) -> list[str]:
        return [c for v in self.videos for c in v.captions][:count]

    @functools.cached_property
    def encoded(self) -> Encoded:
        """Every caption and video of `videos` encoded (as evaluation encodes a split)."""
        return encode_split(self.method, self.videos, self.read_features)


def contract_videos(dataset: VideoTextDataset, split: str) -> VideoTextDataset:
    """The first VIDEOS videos of `split`, with their first CAPTIONS captions: what every method
    is encoded, scored and trained on."""
    videos = [dataclasses.replace(dataset[i], captions=dataset[i].captions[:CAPTIONS])
              for i in dataset.splits[split][:VIDEOS]]
    return VideoTextDataset(dataset.name, videos, {split: [v.id for v in videos]}, dataset.root, dataset.meta)


@pytest.fixture(scope="module")
def text_model(tiny_synth, tmp_path_factory) -> str:
    """A 2-layer, 32-wide random BERT whose WordPiece vocabulary holds every word of the fixture's
    captions and sentences, saved as an HF folder: the text encoder of every method that takes
    `model.text_model` (the bundled MiniLM is 22M parameters, written and read by each round trip)."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    dataset = VideoTextDataset.load(tiny_synth / "manifest.json")
    texts = [t for v in dataset for t in [*v.captions, *(s.sentence for s in v.segments)]]
    words = sorted({w for t in texts for w in re.findall(r"\w+|[^\w\s]", t.lower())})
    folder = tmp_path_factory.mktemp("contract_bert")
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    tokenizer = BertTokenizerFast.from_pretrained(folder)  # reads vocab.txt (the `vocab_file=` argument may not)
    tokenizer.save_pretrained(folder)
    assert len(tokenizer) == 5 + len(words)
    assert not any(tokenizer.unk_token_id in ids for ids in tokenizer(texts)["input_ids"])
    torch.manual_seed(SEED)
    BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=512)).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def clip_features(tiny_synth, tmp_path_factory) -> Path:
    """The `clip` expert of the fixture's videos from the tiny seeded-random open_clip model (clip4clip's input)."""
    from videotext.data.experts import extract_features

    store = tmp_path_factory.mktemp("contract_clip") / "features"
    videos = contract_videos(VideoTextDataset.load(tiny_synth / "manifest.json"), "train")
    summary = extract_features(videos, ["clip"], store, progress=False, workers=0,
                               options={"clip": {"model": TINY_CLIP, "pretrained": ""}})
    assert summary["failed"] == 0 and summary["done"] == VIDEOS, summary
    return store


@pytest.fixture(scope="module")
def build(tiny_synth, text_model, request) -> Callable[..., Case]:
    """`build(name)`: the method's small model (built once per module, eval mode);
    `build(name, fresh=True)`: a new one with the same seed, for tests that change it."""

    def make(name: str) -> Case:
        features = request.getfixturevalue("clip_features") if name == "clip4clip" else tiny_synth / "features"
        overrides = [f"data.manifest={tiny_synth / 'manifest.json'}", f"data.features={features}"]
        if "text_model" in {f.name for f in dataclasses.fields(METHODS[name].Config)}:
            overrides.append(f"model.text_model={text_model}")
        config = load_config(f"{name}/synthetic", [*overrides, *SMALL.get(name, [])])
        data = RunData(config)
        videos = contract_videos(data.dataset, config.data.train_split)
        seed_everything(SEED)
        dims = data.read_features.dims if data.read_features is not None else None
        method = build_method(config.method, config.model, expert_dims=dims)
        config.model = method.config_dict()  # the whole model config, defaults included (as the trainer saves it)
        return Case(name, config, method.eval(), videos, data.read_features)

    cached = functools.cache(make)
    return lambda name, fresh=False: make(name) if fresh else cached(name)


def rows(embedding: Embedding) -> int:
    """Leading size of an embedding (a tensor, or a dict of tensors that all share it)."""
    if isinstance(embedding, dict):
        sizes = {key: value.shape[0] for key, value in embedding.items()}
        assert len(set(sizes.values())) == 1, sizes
        return next(iter(sizes.values()))
    return embedding.shape[0]


def assert_embeddings_close(actual: Embedding, expected: Embedding, atol: float) -> None:
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and set(actual) == set(expected)
        for key in expected:
            assert_embeddings_close(actual[key], expected[key], atol)
        return
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    if actual.is_floating_point():
        torch.testing.assert_close(actual, expected, atol=atol, rtol=0)
    else:
        assert torch.equal(actual, expected)


def assert_ranks_alike(scores: torch.Tensor, reference: torch.Tensor, tolerance: float = 1e-5) -> None:
    """Each row of `scores` orders the columns as `reference` does: taken in `scores`' descending
    order, `reference` never rises by more than `tolerance` (so ties may fall either way)."""
    assert scores.shape == reference.shape, (scores.shape, reference.shape)
    order = scores.argsort(dim=1, descending=True, stable=True)
    in_order = reference.gather(1, order)
    rises = in_order[:, 1:] - in_order[:, :-1]  # > 0 where a lower-ranked column scores higher
    worst = float(rises.max()) if rises.numel() else 0.0
    assert worst <= tolerance, f"ranking differs: a column ranked lower scores {worst:.3g} higher"


def search_scores(model: LoadedModel, index: Index, texts: list[str], video_ids: list[str], k: int,
                  shortlist: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`model.search` as a (rank score, column mask) pair of [n_text, n_video] matrices: returned
    hits score k, k-1, … in their order, columns not returned are masked out."""
    column = {v: i for i, v in enumerate(video_ids)}
    ranked = torch.zeros(len(texts), len(video_ids))
    returned = torch.zeros(len(texts), len(video_ids), dtype=torch.bool)
    for row, hits in enumerate(model.search(texts, index, k=k, shortlist=shortlist)):
        assert len(hits) == k, (row, len(hits))
        for hit in hits:
            ranked[row, column[hit.id]] = float(k - hit.rank + 1)
            returned[row, column[hit.id]] = True
    return ranked, returned


def assert_search_ranks_alike(model: LoadedModel, index: Index, texts: list[str], video_ids: list[str],
                              sims: torch.Tensor, k: int, shortlist: int) -> None:
    """The hits of every query come back in `sims`' order (compared on the hits returned)."""
    ranked, returned = search_scores(model, index, texts, video_ids, k, shortlist)
    for row in range(len(texts)):
        columns = returned[row].nonzero().flatten()
        assert_ranks_alike(ranked[row : row + 1, columns], sims[row : row + 1, columns])


def build_index(model: LoadedModel, video: Embedding, ids: list[str]) -> Index:
    index = Index(dim=int(model.method.index_vectors(video).shape[1]), model=model.config.method, kind="flat")
    model.add_to_index(index, video, [Entry(id=i) for i in ids])
    return index


def derangement(count: int) -> torch.Tensor:
    """A fixed permutation that moves every position (count >= 2)."""
    return torch.roll(torch.arange(count), 1)


# --- 1. encode shapes ---------------------------------------------------------------------


@pytest.mark.parametrize("name", methods("test_encode_gives_one_row_per_caption_and_video"))
def test_encode_gives_one_row_per_caption_and_video(build, name):
    case = build(name)
    method = case.method
    captions = case.captions(5)
    text = encode_texts(method, captions, batch_size=2)  # three batches, concatenated
    video = encode_videos(method, case.videos, case.read_features, batch_size=4)  # 4 + 2 videos
    assert rows(text) == 5 and rows(video) == VIDEOS
    query, vectors = method.query_vectors(text), method.index_vectors(video)
    assert query.dim() == 2 and vectors.dim() == 2
    assert query.shape[0] == 5 and vectors.shape[0] == VIDEOS and query.shape[1] == vectors.shape[1] > 0
    # a row does not depend on the batch it was encoded in
    assert_embeddings_close(encode_texts(method, captions, batch_size=5), text, atol=1e-5)
    assert_embeddings_close(encode_videos(method, case.videos, case.read_features, batch_size=VIDEOS), video,
                            atol=1e-5)
    assert_embeddings_close(concat_embeddings([encode_texts(method, captions[:2]), encode_texts(method, captions[2:])]),
                            text, atol=1e-5)


# --- 2. similarity ------------------------------------------------------------------------


@pytest.mark.parametrize("name", methods("test_similarity_is_a_finite_text_by_video_matrix"))
def test_similarity_is_a_finite_text_by_video_matrix(build, name):
    case = build(name)
    encoded = case.encoded
    sims = score(case.method, encoded)
    n_captions = sum(len(v.captions) for v in case.videos)
    assert sims.shape == (n_captions, VIDEOS) == (len(encoded.refs), len(encoded.video_ids))
    assert torch.isfinite(sims).all()
    spread = sims.max(dim=1).values - sims.min(dim=1).values
    assert float(spread.min()) > 1e-6, "a caption scores every video alike"
    # a subset of captions ranks the videos as its rows of the full matrix do (values may differ:
    # ToCo lifts re-scored pairs above every cheap score by one shift over the whole matrix)
    part = {k: v[:3] for k, v in encoded.text.items()} if isinstance(encoded.text, dict) else encoded.text[:3]
    assert_ranks_alike(score(case.method, Encoded(part, encoded.video, encoded.refs[:3], encoded.video_ids)), sims[:3])


# --- 3. loss and gradients ----------------------------------------------------------------


@pytest.mark.parametrize("name", methods("test_loss_is_finite_and_backward_reaches_the_parameters"))
def test_loss_is_finite_and_backward_reaches_the_parameters(build, name):
    case = build(name, fresh=True)  # training mode and gradients: not the shared model
    method = case.method.train()
    batch = method.train_batches(case.videos, case.read_features, BATCH, SEED).batch(0, 0)
    torch.manual_seed(SEED)
    out = method.loss(batch)
    loss = out["loss"]
    assert loss.dim() == 0 and torch.isfinite(loss), out
    for part, value in out.items():
        assert torch.isfinite(torch.as_tensor(value)).all(), (part, value)
    loss.backward()
    trainable = {n: p for n, p in method.named_parameters() if p.requires_grad}
    assert trainable, "no trainable parameter"
    reached = {n: p.grad for n, p in trainable.items() if p.grad is not None}
    assert any(float(g.abs().sum()) > 0 for g in reached.values()), "no parameter gets a non-zero gradient"
    not_finite = [n for n, g in reached.items() if not torch.isfinite(g).all()]
    assert not not_finite, not_finite


# --- 4. index vectors rank as similarity ----------------------------------------------------


@pytest.mark.parametrize("name", methods("test_search_ranks_as_similarity"))
def test_search_ranks_as_similarity(build, name, tmp_path):
    case = build(name)
    method = case.method
    model = LoadedModel(tmp_path, method, case.config, torch.device("cpu"), "fp32")
    encoded = case.encoded
    sims = score(method, encoded)
    texts = [r.text for r in encoded.refs]
    ids = encoded.video_ids
    permuted = [ids[i] for i in derangement(len(ids))]  # entry ids that name other videos' vectors
    if not model.rescores:  # the index's dot product is the method's score
        dot = method.query_vectors(encoded.text) @ method.index_vectors(encoded.video).T
        assert_ranks_alike(dot, sims)
        with pytest.raises(AssertionError, match="ranking differs"):
            assert_ranks_alike(dot[:, derangement(len(ids))], sims)
        k = shortlist = len(ids)
    else:  # the index shortlists, the method's own score orders the shortlist
        k = shortlist = SHORTLIST
    index = build_index(model, encoded.video, ids)
    assert bool(index.part_names) == model.rescores
    assert_search_ranks_alike(model, index, texts, ids, sims, k, shortlist)
    if model.rescores:
        # as wide as the shortlist `similarity` re-scores itself (ToCo's rerank_top_k; MMT: every video),
        # search returns `similarity`'s top videos
        width = min(getattr(method.config, "rerank_top_k", 0) or len(ids), len(ids))
        _, returned = search_scores(model, index, texts, ids, width, width)
        top = torch.zeros_like(returned).scatter_(1, sims.topk(width, dim=1).indices, True)
        assert torch.equal(returned, top), (returned != top).any(dim=1).nonzero().flatten().tolist()
    with pytest.raises(AssertionError, match="ranking differs"):  # six queries are enough to tell
        assert_search_ranks_alike(model, build_index(model, encoded.video, permuted), texts[:6], ids, sims[:6], k,
                                  shortlist)


# --- 5. save / load_model round trip ------------------------------------------------------


@pytest.mark.parametrize("name", methods("test_saved_run_loads_with_equal_embeddings"))
def test_saved_run_loads_with_equal_embeddings(build, name, tmp_path):
    case = build(name, fresh=True)
    method = case.method
    captions = case.captions(5)
    as_built = encode_videos(method, case.videos, case.read_features)
    # a state no build reproduces, so equal embeddings can only come from the checkpoint: one training
    # forward moves the buffers (normalisation statistics, fitted IDF, trained frame count), noise the
    # trainable weights (as training would: a frozen text encoder keeps its weights, and its per-caption cache)
    batches = method.train().train_batches(case.videos, case.read_features, BATCH, SEED)
    torch.manual_seed(SEED + 1)
    with torch.no_grad():
        method.loss(batches.batch(0, 0))
        for parameter in method.parameters():
            if parameter.requires_grad:
                parameter.add_(0.05 * torch.randn_like(parameter))
    method.eval()
    text, video = encode_texts(method, captions), encode_videos(method, case.videos, case.read_features)
    assert not torch.allclose(method.index_vectors(video), method.index_vectors(as_built), atol=1e-4)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_config(case.config, run_dir / "config.yaml")
    save_checkpoint(run_dir / "checkpoints" / "best", method,
                    {"method": case.config.method, "model": case.config.model, "expert_dims": case.expert_dims})
    loaded = load_model(run_dir, precision="fp32", device="cpu", threads=torch.get_num_threads())
    assert type(loaded.method) is type(method) and not loaded.method.training
    assert loaded.method.config_dict() == method.config_dict()
    assert loaded.expert_dims == (case.expert_dims or {})
    state, loaded_state = method.state_dict(), loaded.method.state_dict()
    assert sorted(loaded_state) == sorted(state)
    assert [key for key in state if not torch.equal(loaded_state[key], state[key])] == []
    # buffers no checkpoint holds (BERT's token_type_ids, CLIP's causal mask) are built as a fresh build makes them
    loaded_buffers = dict(loaded.method.named_buffers())
    unsaved = {name: buffer for name, buffer in method.named_buffers() if name not in state}
    assert [name for name, buffer in unsaved.items() if not torch.equal(loaded_buffers[name], buffer)] == []
    assert_embeddings_close(encode_texts(loaded.method, captions), text, atol=1e-6)
    assert_embeddings_close(encode_videos(loaded.method, case.videos, case.read_features), video, atol=1e-6)
    # the public API of the loaded run: query and index vectors
    torch.testing.assert_close(loaded.encode_text(captions), method.query_vectors(text), atol=1e-6, rtol=0)
    torch.testing.assert_close(loaded.encode_videos(case.videos, case.read_features), method.index_vectors(video),
                               atol=1e-6, rtol=0)


# --- 6. the query side exported for search without torch -----------------------------------

# Methods whose query side is exported into an index (`videotext.search.query_export`; mmt's with
# the mixture weights its shortlist is re-scored with, clip4clip's with CLIP's BPE rebuilt); the rest
# search through torch: a shortlist re-scored by a cross encoder (toco), a sentence hierarchy (coot).
EXPORTED = {"dual", "frozen", "supportset", "conse", "mmt", "clip4clip"}
EXPORT_CAPTIONS = 1000


def export_captions(case: Case, count: int = EXPORT_CAPTIONS) -> list[str]:
    """`count` captions of the fixture's words, 1 to 60 words long (past every method's token
    limit, so truncation is checked too), seeded."""
    import random

    words = sorted({w for v in case.videos for c in v.captions for w in c.split()})
    rng = random.Random(SEED)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 60))) for _ in range(count)]


@pytest.mark.parametrize("name", methods("test_exported_query_side_equals_torch"))
def test_exported_query_side_equals_torch(build, name, tmp_path):
    from videotext.apps.index_folder import export_query_side
    from videotext.search.query_encoder import ExportedTextEncoder
    from videotext.search.query_export import export_query_encoder

    case = build(name)
    model = LoadedModel(tmp_path, case.method, case.config, torch.device("cpu"), "fp32")
    cached = set(getattr(getattr(case.method, "text_encoder", None), "_cache", {}))
    folder = export_query_encoder(case.method, tmp_path, rescores=model.rescores)
    assert (folder is not None) == (name in EXPORTED), name
    if folder is None:  # nothing written, and `index build` says why
        assert not (tmp_path / "query_encoder").exists()
        note = export_query_side(model, tmp_path)
        assert note.startswith(f"not exported ({name}: ") and not (tmp_path / "query_encoder").exists(), note
        return
    assert set(case.method.text_encoder._cache) == cached  # the export left the per-caption cache as it was
    captions = export_captions(case)
    exported = torch.from_numpy(ExportedTextEncoder(folder).encode(captions))  # [N, D]
    reference = model.encode_text(captions)  # [N, D], torch at fp32
    cosine = torch.nn.functional.cosine_similarity(exported, reference, dim=1)
    assert float(cosine.min()) >= 0.9999, float(cosine.min())
    torch.testing.assert_close(exported, reference, atol=1e-5, rtol=0)
    # searching through the export returns what `LoadedModel.search` returns, re-scored or not
    from videotext.search.query_encoder import ExportedQuerySearcher

    encoded = case.encoded
    video = encoded.video
    if isinstance(video, dict) and "available" in video:  # a video without its first expert: eq. 6 renormalises
        video = {**video, "available": video["available"].clone()}
        video["available"][0, 0] = False
    index = build_index(model, video, encoded.video_ids)
    texts = [r.text for r in encoded.refs]
    k = min(SHORTLIST, len(encoded.video_ids))
    through_torch = model.search(texts, index, k=k, shortlist=len(encoded.video_ids))
    through_export = ExportedQuerySearcher(ExportedTextEncoder(folder)).search(texts, index, k=k,
                                                                               shortlist=len(encoded.video_ids))
    assert [[h.id for h in hits] for hits in through_export] == [[h.id for h in hits] for hits in through_torch]
    assert [h.score for hits in through_export for h in hits] == pytest.approx(
        [h.score for hits in through_torch for h in hits], abs=1e-5)


def test_building_for_a_checkpoint_skips_drawing_weights_but_initialises_buffers():
    """`weights_loaded_after` (what `load_model` builds under): a parameter keeps what it holds, a
    buffer is initialised (transformers zeroes BERT's token_type_ids buffer with `init.zeros_`)."""
    from videotext.models.registry import weights_loaded_after

    parameter, buffer = torch.nn.Parameter(torch.full((4,), 7.0)), torch.full((4,), 7.0)
    with weights_loaded_after():
        torch.nn.init.zeros_(parameter)
        torch.nn.init.zeros_(buffer)
        torch.nn.init.normal_(parameter)
    assert parameter.tolist() == [7.0] * 4 and buffer.tolist() == [0.0] * 4
    torch.nn.init.zeros_(parameter)  # outside, the initialisers are torch's own again
    assert parameter.tolist() == [0.0] * 4
