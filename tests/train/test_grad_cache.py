"""The chunked contrastive step (`train.chunk`, Gradient Cache): the parameter gradients of the
full-batch step, for dual, Frozen, CLIP4Clip and ToCo, in one process and over 2 gloo ranks."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from videotext.data.loaders import collate_video_features
from videotext.models import build_method
from videotext.train.grad_cache import chunked_backward, slice_rows

TOL = 1e-5
BATCH = 8
CHUNK = 3  # 3 + 3 + 2 rows
TINY_CLIP = str(Path(__file__).resolve().parents[1] / "fixtures" / "openclip_tiny.json")
CAPTIONS = ["a red circle moves left", "a blue square grows", "a green star spins", "two shapes appear",
            "the triangle vanishes", "a yellow cross moves up", "a circle then a square", "nothing moves"]


def _features(dims: dict[str, int], seed: int = 0) -> dict:
    rng = np.random.RandomState(seed)
    items = [{e: rng.randn(1 + (i * 3 + j) % 5, d).astype(np.float32) for j, (e, d) in enumerate(dims.items())}
             for i in range(BATCH)]
    return collate_video_features(items, list(dims))


def _method(name: str):
    torch.manual_seed(0)
    if name == "dual":
        return build_method("dual", {"freeze_text": True, "embed_dim": 16, "dropout": 0.1},
                            expert_dims={"a": 6, "b": 4})
    if name == "frozen":
        return build_method("frozen", {"preset": "tiny", "num_frames": 2, "freeze_text": True})
    if name == "clip4clip":
        return build_method("clip4clip", {"clip_model": TINY_CLIP, "sim_header": "seqTransf", "transformer_layers": 1},
                            expert_dims={"clip": 32})
    method = build_method("toco", {"hidden_dim": 32, "num_heads": 4, "ff_dim": 64, "cheap_dim": 16,
                                   "num_negatives": 3, "video_layers": 1, "num_layers": 1},
                          expert_dims={"a": 6, "b": 4})
    method.fit_tfidf(CAPTIONS)
    return method


def _batch(method, name: str) -> dict:
    if name == "frozen":
        video = {"frames": torch.randn(BATCH, 2, 3, 32, 32, generator=torch.Generator().manual_seed(1))}
    elif name == "clip4clip":
        video = _features({"clip": 32})
    else:
        video = _features({"a": 6, "b": 4})
    return {"text": method.prepare_text(CAPTIONS), "video": video}


def _grads(method) -> dict[str, torch.Tensor]:
    out = {n: p.grad.clone() for n, p in method.named_parameters() if p.grad is not None}
    method.zero_grad(set_to_none=True)
    return out


def _full_step(method, batch, seed: int = 5) -> tuple[dict, float]:
    torch.manual_seed(seed)
    loss = method.loss(batch)["loss"]
    loss.backward()
    return _grads(method), float(loss.detach())


def _chunked_step(method, batch, chunk: int = CHUNK, seed: int = 5) -> tuple[dict, float]:
    torch.manual_seed(seed)
    out = chunked_backward(method, batch, chunk, scale=lambda loss: loss)
    return _grads(method), float(out["loss"])


def _assert_same(got: dict, expected: dict) -> None:
    assert got.keys() == expected.keys() and expected
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=TOL, rtol=TOL, msg=name)


@pytest.mark.parametrize("name", ["dual", "frozen", "clip4clip", "toco"])
def test_chunked_step_has_the_gradients_of_the_full_batch_step(name):
    method = _method(name).eval()  # no dropout: the two steps compute the same function
    batch = _batch(method, name)
    expected, expected_loss = _full_step(method, batch)
    got, loss = _chunked_step(method, batch)
    assert loss == pytest.approx(expected_loss, abs=TOL)
    _assert_same(got, expected)
    for chunk in (1, BATCH, 100):  # one row at a time; the whole batch in one chunk; more than the batch
        _assert_same(_chunked_step(method, batch, chunk)[0], expected)


def test_dual_with_dropout_draws_the_masks_of_the_full_batch_step():
    method = _method("dual").train()
    batch = _batch(method, "dual")
    expected, _ = _full_step(method, batch)
    after_full = torch.rand(3)  # the generator's next draws after the step
    got, _ = _chunked_step(method, batch)
    after_chunked = torch.rand(3)
    _assert_same(got, expected)
    assert torch.equal(after_full, after_chunked)  # the random stream goes on as after a full-batch step
    without_dropout = _full_step(method.eval(), batch)[0]
    assert max(float((without_dropout[n] - expected[n]).abs().max()) for n in expected) > 1e-3  # dropout was on


@pytest.mark.parametrize("name", ["frozen", "toco"])
def test_deep_towers_replay_each_chunks_dropout_masks(name):
    """Towers with dropout in every layer draw their masks chunk by chunk: the second pass replays
    them, so the gradients are those of the loss on the chunk-by-chunk embeddings with graphs."""
    method = _method(name).train()
    batch = _batch(method, name)
    text_inputs, video_inputs = method.chunk_inputs(batch)
    torch.manual_seed(5)
    parts = []
    for encode, inputs in ((method.encode_text, text_inputs), (method.encode_video, video_inputs)):
        pieces = [encode(slice_rows(inputs, s, min(BATCH, s + CHUNK), BATCH)) for s in range(0, BATCH, CHUNK)]
        parts.append({k: torch.cat([p[k] for p in pieces]) for k in pieces[0]} if isinstance(pieces[0], dict)
                     else torch.cat(pieces))
    method.loss_from_embeddings(*parts, batch)["loss"].backward()
    expected = _grads(method)
    got, _ = _chunked_step(method, batch)
    _assert_same(got, expected)


def test_trainer_refuses_chunk_for_a_method_without_two_towers(tmp_path):
    from videotext.config import RunConfig
    from videotext.errors import VideoTextError
    from videotext.train.trainer import Trainer

    method = build_method("coot", {}, expert_dims={"a": 6})
    assert not method.chunks_contrastive_step and _method("dual").chunks_contrastive_step
    config = RunConfig(method="coot")
    config.train.chunk = -1
    with pytest.raises(VideoTextError, match="train.chunk=-1"):
        Trainer(config, tmp_path)._check_chunk(method)
    config.train.chunk = 4
    with pytest.raises(VideoTextError, match="train.chunk=4.*'coot'"):
        Trainer(config, tmp_path)._check_chunk(method)


# --- over 2 gloo ranks ------------------------------------------------------------------------
def _rank_step(rank: int, name: str, expected_path: str) -> None:
    from videotext import distributed as dist
    from videotext.distributed import LossGather
    from videotext.train.grad_cache import average_gradients

    method = _method(name).eval()
    method.gather = LossGather(True)
    batch = _batch(method, name)
    rows = dist.shard_slice(BATCH)
    local = {"text": slice_rows(batch["text"], rows.start, rows.stop, BATCH),
             "video": slice_rows(batch["video"], rows.start, rows.stop, BATCH)}
    chunked_backward(method, local, CHUNK, scale=lambda loss: loss)  # 4 rows a rank: chunks of 3 + 1
    average_gradients(method.parameters())
    expected = torch.load(expected_path)
    _assert_same(_grads(method), expected)


@pytest.mark.heavy
@pytest.mark.parametrize("name", ["dual", "clip4clip"])
def test_chunked_step_over_two_ranks_has_the_one_process_gradients(name, tmp_path):
    from tests.test_distributed import run_ranks

    method = _method(name).eval()
    expected, _ = _full_step(method, _batch(method, name))
    path = tmp_path / "expected.pt"
    torch.save(expected, path)
    run_ranks(_rank_step, name, str(path))


@pytest.mark.heavy
def test_a_training_run_with_chunks_ends_with_the_weights_of_one_without(tiny_synth, tmp_path):
    from safetensors.torch import load_file

    from tests.conftest import tiny_config_overrides
    from videotext.config import PACKAGED, load_config
    from videotext.train.trainer import Trainer

    def run(name: str, *extra: str) -> dict[str, torch.Tensor]:
        config = load_config(PACKAGED / "dual" / "synthetic.yaml",
                             tiny_config_overrides(tiny_synth) + ["train.epochs=2", *extra])
        Trainer(config, tmp_path / name, progress=False).fit()
        return load_file(str(tmp_path / name / "checkpoints" / "last" / "model.safetensors"))

    plain, chunked = run("plain"), run("chunked", "train.chunk=3")
    assert plain.keys() == chunked.keys()
    worst = max(float((plain[k] - chunked[k]).abs().max()) for k in plain)
    assert worst <= TOL, worst


@pytest.mark.slow  # two trainings over two torchrun ranks: minutes on 2 cores (`make test-slow`)
def test_two_process_chunked_training_equals_one_process_without_chunks(tiny_synth, tmp_path):
    """Under torchrun the chunked step runs beside the DDP wrapper and averages the gradients itself
    (with accumulation: only on the step that updates): 2 ranks with train.chunk=2 end with the
    weights of one process that does not chunk."""
    from tests.test_distributed import _max_difference, _train_overrides, _train_rank, run_ranks
    from tests.train.test_trainer import CONFIG
    from videotext.config import load_config
    from videotext.train.trainer import Trainer

    extra = ("train.accumulate=2",)
    Trainer(load_config(CONFIG, _train_overrides(tiny_synth, *extra)), tmp_path / "one", progress=False).fit()
    run_ranks(_train_rank, tiny_synth, tmp_path / "two", (*extra, "train.chunk=2"), None)
    worst = _max_difference(tmp_path / "one", tmp_path / "two")
    assert worst <= 1e-4, worst  # float32 round-off through AdamW, as the plain 2-rank run
