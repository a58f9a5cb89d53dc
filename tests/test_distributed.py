"""torchrun equivalence on CPU (gloo, 2 spawned processes): global-batch losses and their
gradients, a short DDP training run, and sharded extraction equal one process."""
from __future__ import annotations

import json
import os
import socket
import sys
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F

from videotext import distributed as dist

pytestmark = pytest.mark.heavy  # trains, builds indexes or starts processes and servers: `make test-quick` leaves it out

WORLD = 2
TOL = 1e-5


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _worker(rank: int, fn, port: int, errors, args) -> None:
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(WORLD),
                       "LOCAL_WORLD_SIZE": str(WORLD), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                       "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    torch.set_num_threads(1)
    try:
        dist.init_distributed("cpu", timeout_minutes=2)
        fn(rank, *args)
        torch.distributed.barrier()  # both ranks done before either tears gloo down
    except BaseException:  # noqa: BLE001 - reported to the parent
        errors.put(f"rank {rank}:\n{traceback.format_exc()}")
        raise
    finally:
        dist.cleanup()
    # Skip interpreter finalisation: under load, gloo's worker threads can abort the process
    # there ("terminate called without an active exception") after every check has passed.
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(0)


def run_ranks(fn, *args) -> None:
    """Run `fn(rank, *args)` in WORLD spawned processes joined by gloo; fail on any error."""
    errors = mp.get_context("spawn").SimpleQueue()
    try:
        mp.spawn(_worker, args=(fn, _free_port(), errors, args), nprocs=WORLD, join=True)
    except Exception:  # noqa: BLE001
        messages = []
        while not errors.empty():
            messages.append(errors.get())
        pytest.fail("\n".join(messages) or "a rank failed")


# --- the losses ----------------------------------------------------------------------------
def _inputs(batch: int = 8, dim: int = 6, steps: int = 5):
    """A full batch of encoder inputs and one linear 'encoder' per side (float64)."""
    g = torch.Generator().manual_seed(3)
    x_text = torch.randn(batch, dim, generator=g, dtype=torch.float64)
    x_video = torch.randn(batch, dim, generator=g, dtype=torch.float64)
    seq = torch.randn(batch, steps, dim, generator=g, dtype=torch.float64)
    lengths = torch.tensor([5, 2, 3, 1, 4, 2, 5, 3])[:batch]
    w_text = torch.randn(dim, dim, generator=g, dtype=torch.float64)
    w_video = torch.randn(dim, dim, generator=g, dtype=torch.float64)
    return x_text, x_video, seq, lengths, w_text, w_video


def _loss_cases():
    from videotext.losses import hardest_negative_triplet, info_nce, max_margin_ranking
    from videotext.losses.captioning import mix_support_set, support_set_weights
    from videotext.losses.coot import alignment_loss, cluster_loss

    def support(t, v, memory, mask):
        weights = support_set_weights(t, v, "cross", temperature=0.1)  # [B, B]
        mixed, mixed_mask = mix_support_set(weights, memory, mask)  # [B, M, D]
        return (mixed.sum(-1) ** 2 * mixed_mask).sum() / mixed_mask.sum()

    return {
        "info_nce": lambda t, v, m, k: info_nce(t @ v.T, temperature=0.05)["loss"],
        "max_margin": lambda t, v, m, k: max_margin_ranking(t @ v.T, margin=0.2)["loss"],
        "triplet": lambda t, v, m, k: hardest_negative_triplet(t @ v.T, margin=0.2)["loss"],
        "coot_alignment": lambda t, v, m, k: alignment_loss(v, t, 0.2) + cluster_loss(v, t, 0.2),
        "support_attention": support,
    }


def _loss_and_grads(name, x_text, x_video, seq, lengths, w_text, w_video, gather=dist.LossGather()):
    w_text, w_video = w_text.clone().requires_grad_(), w_video.clone().requires_grad_()
    t = F.normalize(x_text @ w_text, dim=-1)  # [b, D]
    v = F.normalize(x_video @ w_video, dim=-1)
    steps = int(lengths.max())  # a rank pads its sequences to its own longest only
    memory = (seq[:, :steps] @ w_video)  # [b, M, D]
    mask = torch.arange(steps)[None] < lengths[:, None]  # [b, M]
    t, v, memory, mask = gather(t, v, memory, mask)
    loss = _loss_cases()[name](t, v, memory, mask)
    loss.backward()
    return loss.detach(), w_text.grad, w_video.grad


def _check_losses(rank: int) -> None:
    full = _inputs()
    rows = dist.shard_slice(len(full[0]))
    worst = 0.0
    for name in _loss_cases():
        ref = _loss_and_grads(name, *full, gather=dist.LossGather(False))  # the one-process reference on the full batch
        local = [x[rows] for x in full[:4]] + list(full[4:])
        loss, g_text, g_video = _loss_and_grads(name, *local)
        for grad in (g_text, g_video):  # what DDP does: average the parameter gradients over ranks
            torch.distributed.all_reduce(grad)
            grad /= dist.world()
        for got, want in zip((loss, g_text, g_video), ref):
            diff = float((got - want).abs().max())
            worst = max(worst, diff)
            assert diff <= TOL, (name, diff)
        assert float(ref[1].abs().max()) > 1e-3, name  # the check is not on zero gradients
        if name == "info_nce":
            ref_info_nce = ref[0]
    # train.global_negatives: false → each rank's own rows only
    local_only = _loss_and_grads("info_nce", *[x[rows] for x in full[:4]], *full[4:], gather=dist.LossGather(False))[0]
    assert abs(float(local_only - ref_info_nce)) > 0.1, (float(local_only), float(ref_info_nce))
    print(f"losses: worst difference {worst:.2e}")


def _check_losses_and_methods(rank: int, bert: str) -> None:
    _check_losses(rank)
    _check_methods(rank, bert)


def test_global_batch_losses_and_gradients_equal_one_process(tmp_path):
    """2 ranks × B/2 = 1 process × B, loss and gradients (after DDP's averaging) to 1e-5:
    - the shared losses: info_nce, max-margin, hardest-negative triplet, COOT alignment
      (+ cluster) and the support-set attention;
    - the methods' loss(batch): supportset (triplet + cross-captioning over the global
      support set), mmt (max-margin on the mixture similarity) and coot (alignment,
      cluster and cycle-consistency losses)."""
    run_ranks(_check_losses_and_methods, _tiny_bert(tmp_path / "bert"))


def test_single_process_is_a_no_op():
    x = torch.randn(3, 2, requires_grad=True)
    assert dist.world() == 1 and dist.is_main() and not dist.LossGather().active
    assert dist.LossGather()(x) is x
    assert dist.shard_slice(10, 1, 4) == slice(2, 5)
    assert [len(range(10)[dist.shard_slice(10, r, 3)]) for r in range(3)] == [3, 3, 4]


def test_sharded_batches_are_the_global_batch_in_order():
    """Rank r's rows of global batch `index` concatenate to the one-process batch, at any world size."""
    from videotext.data.loaders import SeededBatches

    whole = SeededBatches(count=50, batch_size=8, seed=4)
    for world in (2, 3):
        ranks = [SeededBatches(count=50, batch_size=8, seed=4) for _ in range(world)]
        for rank, batches in enumerate(ranks):
            batches.shard(rank, world)
        for epoch, index in ((0, 0), (1, 5)):
            parts = [b.positions(epoch, index) for b in ranks]
            assert sum(parts, []) == whole.positions(epoch, index)
            assert min(len(p) for p in parts) >= 8 // world


# --- the methods' loss(batch) ------------------------------------------------------------------
def _rows(batch, rows: slice, count: int):
    """Rows `rows` of every per-sample tensor / list (first dim == count) of a nested batch."""
    if isinstance(batch, dict):
        return {k: _rows(v, rows, count) for k, v in batch.items()}
    if isinstance(batch, (torch.Tensor, list)) and len(batch) == count:
        return batch[rows]
    return batch


def _method_cases(bert: str):
    """(name, model, full batch, rank batch builder) for supportset, mmt and coot, float64."""
    import numpy as np

    from tests.models.test_mmt import DIMS as MMT_DIMS, SMALL as MMT_SMALL, video_batch
    from tests.models.test_supportset import DIMS as SS_DIMS, TEXTS, _video_batch
    from videotext.data.hierarchy import collate_hierarchy
    from videotext.models.registry import build_method

    cases = []
    torch.manual_seed(0)
    support = build_method("supportset", {
        "text_model": bert, "embed_dim": 16, "ffn_dim": 32, "decoder": "scratch", "decoder_dim": 16, "decoder_ffn_dim": 32,
        "dropout": 0.0, "decoder_dropout": 0.0, "temperature": 0.5, "captioning": "cross"}, expert_dims=SS_DIMS)
    full = {"video": _video_batch(), "text": support.prepare_text(TEXTS)}
    cases.append(("supportset", support, full, lambda rows: _rows(full, rows, 4)))

    torch.manual_seed(0)
    mmt = build_method("mmt", {"text_model": bert, **MMT_SMALL}, expert_dims=MMT_DIMS)
    mmt_full = {"video": video_batch(4), "text": mmt.prepare_text(TEXTS)}
    cases.append(("mmt", mmt, mmt_full, lambda rows: _rows(mmt_full, rows, 4)))

    torch.manual_seed(0)
    coot = build_method("coot", {"hidden_dim": 16, "num_heads": 2, "ff_dim": 16, "af_dim": 32, "af_heads": 2,
                                 "text_feature_dim": 12, "dropout": 0.0, "cmc_samples": 0, "cmc_weight": 0.5},
                        expert_dims={"a": 6, "b": 4})
    g = torch.Generator().manual_seed(0)
    counts = [2, 3, 1, 2]
    whole = {dim: [(np.asarray(torch.randn(5, dim, generator=g)),
                    [np.asarray(torch.randn(2 + i, dim, generator=g)) for i in range(c)]) for c in counts]
             for dim in (10, 12)}

    def coot_batch(rows: slice) -> dict:
        return {"video": collate_hierarchy(whole[10][rows], 10, "frame"),
                "text": collate_hierarchy(whole[12][rows], 12, "word")}

    cases.append(("coot", coot, coot_batch(slice(None)), coot_batch))
    return cases


def _to_double(batch):
    if isinstance(batch, dict):
        return {k: _to_double(v) for k, v in batch.items()}
    return batch.double() if isinstance(batch, torch.Tensor) and batch.is_floating_point() else batch


def _loss_grads(model, batch):
    model.zero_grad(set_to_none=True)
    out = model.loss(_to_double(batch))
    out["loss"].backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out["loss"].detach(), grads


def _check_methods(rank: int, bert: str) -> None:
    for name, model, full, rank_batch in _method_cases(bert):
        model.double().eval()  # no dropout; BatchNorm on running statistics (batch statistics are per rank)
        model.gather = dist.LossGather(False)  # the one-process reference on the full batch
        ref_loss, ref = _loss_grads(model, full)
        model.gather = dist.LossGather(True)
        loss, grads = _loss_grads(model, rank_batch(dist.shard_slice(4)))
        assert grads.keys() == ref.keys(), name
        for grad in grads.values():  # DDP's averaging
            torch.distributed.all_reduce(grad)
            grad /= dist.world()
        assert abs(float(loss - ref_loss)) <= TOL, (name, float(loss), float(ref_loss))
        worst = max(float((grads[k] - ref[k]).abs().max()) for k in ref)
        assert worst <= TOL, (name, worst)
        assert max(float(g.abs().max()) for g in ref.values()) > 1e-3, name
        print(f"{name}: loss {float(loss):.6f}, worst gradient difference {worst:.1e}")


# --- training ------------------------------------------------------------------------------
def _tiny_bert(folder: Path) -> str:
    """A 1-layer BERT without dropout (ranks would draw other dropout masks than one process)."""
    from tests.models.test_mmt import tiny_bert

    if not (folder / "config.json").is_file():
        tiny_bert(folder)
        config = json.loads((folder / "config.json").read_text())
        config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def _train_overrides(root: Path, *extra: str) -> list[str]:
    """dual on the tiny fixture with a tiny trainable BERT (fast to load in every rank)."""
    from tests.conftest import tiny_config_overrides

    bert = _tiny_bert(root.parent / f"{root.name}_tiny_bert")
    return tiny_config_overrides(root) + [f"model.text_model={bert}", "model.freeze_text=false",
                                          "model.dropout=0.0", "train.device=cpu", "train.epochs=2",
                                          "train.threads=1", "schedule.warmup_steps=0", *extra]


def _train_rank(rank: int, root: Path, out: Path, extra: tuple[str, ...], stop: int | None) -> None:
    from tests.train.test_trainer import CONFIG
    from videotext.config import load_config
    from videotext.train.trainer import Trainer

    Trainer(load_config(CONFIG, _train_overrides(root, *extra)), out, progress=False, stop_after_steps=stop).fit()


def _weights(run: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(run / "checkpoints" / "last" / "model.safetensors"))


def _max_difference(a: Path, b: Path) -> float:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    return max(float((wa[k] - wb[k]).abs().max()) for k in wa)


def test_two_process_training_equals_one_process_and_resumes_on_one(tiny_synth, tmp_path):
    """DDP on 2 ranks (B/2 rows each, global negatives; gradient accumulation 2, so
    no_sync on the accumulation steps; rank 0 validates after epoch 1), killed after step
    3 of 4, then resumed by ONE process: the weights equal an uninterrupted one-process
    run on the same global batches (dual, AdamW)."""
    from tests.train.test_trainer import CONFIG
    from videotext.config import load_config
    from videotext.train.trainer import Trainer, read_metrics_log

    extra = ("train.accumulate=2", "train.checkpoint_every=1")  # 3 batches/epoch → steps 2 + 2
    config = load_config(CONFIG, _train_overrides(tiny_synth, *extra))
    Trainer(config, tmp_path / "one", progress=False).fit()
    run_ranks(_train_rank, tiny_synth, tmp_path / "two", extra, 3)
    assert json.loads((tmp_path / "two/checkpoints/last/meta.json").read_text())["step"] == 3
    Trainer(config, tmp_path / "two", resume=True, progress=False).fit()
    worst = _max_difference(tmp_path / "one", tmp_path / "two")
    print(f"training {extra}: max weight difference {worst:.2e}")
    assert worst <= 1e-4, worst  # float32 round-off through AdamW (measured 3e-5; gradients match to 1e-5 above)
    # rank 0 alone logged, and the resumed log reads like the one-process one
    one, two = read_metrics_log(tmp_path / "one"), read_metrics_log(tmp_path / "two")
    assert [(e["kind"], e["step"]) for e in one] == [(e["kind"], e["step"]) for e in two]
    for a, b in zip(one, two):
        if a["kind"] == "train":
            # steps 1-2 equal exactly; step 3 runs on weights that went through the 2-rank all-reduce
            # (another summation order): measured 1.4e-5 on a loss of 5.5, i.e. float32 round-off
            assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
        if a["kind"] == "val":
            assert b["t2v"]["R1"] == pytest.approx(a["t2v"]["R1"])


# --- extraction and indexing ----------------------------------------------------------------
def _fake_run(root: Path, run: Path) -> Path:
    """A run directory with an untrained dual model (what `index build` loads)."""
    from tests.train.test_trainer import CONFIG
    from videotext.config import load_config, save_config
    from videotext.data.features import FeatureStore
    from videotext.models.registry import build_method
    from videotext.train.checkpoint import save_checkpoint

    config = load_config(CONFIG, _train_overrides(root))
    store = FeatureStore(root / "features")
    dims = {e: store.dim(e) for e in config.data.experts}
    torch.manual_seed(0)
    method = build_method("dual", config.model, expert_dims=dims)
    run.mkdir(parents=True)
    save_config(config, run / "config.yaml")
    save_checkpoint(run / "checkpoints" / "best", method, {"method": "dual", "expert_dims": dims})
    return run


def _extract_and_index(rank: int, files: list[str], out: Path, root: Path, run: Path, ids: list[str]) -> None:
    from tests.conftest import TINY_EXTRACT
    from videotext.data.experts import extract_features
    from videotext.data.schema import VideoTextDataset
    from videotext.inference import load_model

    summary = extract_features(files, ["audio", "motion"], out, progress=False, rate=1.0, options=TINY_EXTRACT)
    assert summary["videos"] == len(files) and summary["done"] == len(files), summary
    dataset = VideoTextDataset.load(root / "manifest.json").subset(ids)
    index = load_model(run, device="cpu").build_index(dataset, out / "index", features_dir=root / "features")
    assert index is not None and len(index) == len(ids)


def test_two_process_extraction_and_index_equal_one_process(tiny_synth, tmp_path):
    """`extract` and `index build` under 2 ranks: videos r::R per rank, parts merged by
    rank 0; the merged store and the index equal a single-process run."""
    from tests.conftest import TINY_EXTRACT
    from videotext.data.experts import extract_features
    from videotext.data.features import FeatureStore, store_equal
    from videotext.data.schema import VideoTextDataset
    from videotext.inference import load_model
    from videotext.search.index import Index

    files = sorted(str(p) for p in (tiny_synth / "videos").rglob("*.mp4"))[:4]
    run = _fake_run(tiny_synth, tmp_path / "run")
    ids = [v.id for v in VideoTextDataset.load(tiny_synth / "manifest.json")][:5]
    extract_features(files, ["audio", "motion"], tmp_path / "one", progress=False, rate=1.0, options=TINY_EXTRACT)
    dataset = VideoTextDataset.load(tiny_synth / "manifest.json").subset(ids)
    single = load_model(run, device="cpu").build_index(dataset, tmp_path / "one" / "index",
                                                         features_dir=tiny_synth / "features")
    run_ranks(_extract_and_index, files, tmp_path / "two", tiny_synth, run, ids)
    merged = FeatureStore(tmp_path / "two")
    assert sorted(merged.keys("motion")) == sorted(Path(f).stem for f in files)
    assert not list((tmp_path / "two" / ".parts").rglob("*.h5"))  # every part was merged
    assert store_equal(FeatureStore(tmp_path / "one"), merged)
    sharded = Index.load(tmp_path / "two" / "index")
    assert sharded.ids == single.ids == ids
    assert torch.allclose(torch.from_numpy(sharded.embeddings_for(ids)), torch.from_numpy(single.embeddings_for(ids)),
                          atol=1e-6)
    assert not (tmp_path / "two" / "index.parts").exists()


def _index_into_milvus(rank: int, run: Path, root: Path, ids: list[str], out: Path, store: str) -> None:
    """One rank of a torchrun `index build` into Milvus; records how many rows this rank upserted."""
    from videotext.data.schema import VideoTextDataset
    from videotext.inference import load_model
    from videotext.search.milvus import MilvusIndex

    written = []
    add = MilvusIndex.add
    MilvusIndex.add = lambda self, vectors, entries, parts=None: written.append(len(entries)) or add(
        self, vectors, entries, parts)
    dataset = VideoTextDataset.load(root / "manifest.json").subset(ids)
    index = load_model(run, device="cpu").build_index(dataset, out, features_dir=root / "features", store=store,
                                                      collection="clips", progress=False)
    (out.parent / f"rank{rank}.json").write_text(json.dumps(sum(written)))
    if rank == 0 or store.startswith("http"):
        assert len(index) == len(ids)
    else:
        assert index is None  # Milvus Lite's file is rank 0's


@pytest.mark.parametrize("kind", ["lite", "server"])
def test_two_process_index_into_milvus_equals_one_process(tiny_synth, tmp_path, kind):
    """`index build` under 2 ranks into Milvus Lite (one writer: the ranks hand their rows to
    rank 0) and into a Milvus server (Milvus Lite's own gRPC server on a TCP port: every rank
    upserts its own rows): the same ids and vectors as a one-process FAISS build."""
    from videotext.data.schema import VideoTextDataset
    from videotext.inference import load_model
    from videotext.search.index import Index
    from videotext.search.milvus import MilvusIndex

    run = _fake_run(tiny_synth, tmp_path / "run")
    ids = [v.id for v in VideoTextDataset.load(tiny_synth / "manifest.json")][:7]
    dataset = VideoTextDataset.load(tiny_synth / "manifest.json").subset(ids)
    single = load_model(run, device="cpu").build_index(dataset, tmp_path / "one", features_dir=tiny_synth / "features",
                                                         progress=False)
    server = None
    if kind == "server":
        from milvus_lite.adapter.grpc.server import start_server_in_thread

        server, db, port = start_server_in_thread(str(tmp_path / "server.db"))
        store = f"http://127.0.0.1:{port}"
    else:
        store = f"milvus:{tmp_path / 'lite.db'}"
    try:
        run_ranks(_index_into_milvus, run, tiny_synth, ids, tmp_path / "two" / "index", store)
        sharded = Index.load(tmp_path / "two" / "index")
        assert isinstance(sharded, MilvusIndex) and sharded.alias == "clips" and sharded.target() == sharded.collection
        assert sorted(sharded.ids) == sorted(single.ids) == sorted(ids)
        np.testing.assert_allclose(sharded.embeddings_for(ids), single.embeddings_for(ids), atol=1e-6)
        rows = [json.loads((tmp_path / "two" / f"rank{r}.json").read_text()) for r in range(WORLD)]
        assert rows == ([4, 3] if kind == "server" else [7, 0]), rows  # videos r::R per rank, or all by rank 0
        sharded.close()
    finally:
        if server is not None:
            server.stop(grace=0)
            db.close()
