"""WebDataset shards: `videotext dataset shard` writes them (within the size, resumable), and training
streams them from a real local HTTP server that drops connections, answers 500, stalls and serves a
truncated tar: retried, then skipped and recorded; 2 gloo ranks × 2 workers read disjoint samples
covering the epoch; a run killed with SIGKILL resumes where it stood; a run from HTTP equals the
run from the same shards on disk."""
from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.shard_server import ShardServer
from tests.data.test_frozen_frames import data  # noqa: F401  (the pixel fixture: 4 videos, 3 images)
from videotext.data.features import FeatureStore
from videotext.data.shards import read_index, shard_dataset
from videotext.data.streaming import FeatureDecoder, Retry, ShardBatches, ShardFailed, SlotStream, read_shard

EXPERTS = ["appearance", "motion", "audio"]
NEEDS = ["json", *[f"{e}.npy" for e in EXPERTS], *[f"{e}.times.npy" for e in EXPERTS]]
NO_WAIT = Retry(retries=2, backoff=0.0, timeout=1.0)


def members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive if m.isreg()}


@pytest.fixture(scope="module")
def train_shards(tiny_synth, tmp_path_factory) -> Path:
    """The 26 training videos' features, at most 3 per shard: 9 shards."""
    out = tmp_path_factory.mktemp("shards") / "train"
    shard_dataset(tiny_synth / "manifest.json", out, "10MB", "features", tiny_synth / "features", EXPERTS,
                  splits=["train"], max_samples=3, progress=False)
    return out


@pytest.fixture(scope="module")
def server(train_shards):
    served = ShardServer(train_shards.parent, stall_seconds=3.0)
    yield served
    served.close()


def test_shards_hold_the_samples_within_the_size_and_a_rerun_rewrites_only_what_is_missing(tiny_synth, tmp_path):
    out = tmp_path / "shards"
    done = shard_dataset(tiny_synth / "manifest.json", out, "120KB", "features", tiny_synth / "features", EXPERTS,
                         progress=False)
    index = read_index(out)
    assert index["samples"] == 32 and sum(s["samples"] for s in index["shards"]) == 32 and done["written"] == len(index["shards"])
    assert index["splits"] == {"train": 26, "val": 3, "test": 3} and index["dims"] == {"appearance": 1280, "motion": 80, "audio": 128}
    assert all(0 < (out / s["name"]).stat().st_size <= 120 * 1024 for s in index["shards"])
    store = FeatureStore(tiny_synth / "features")
    first = members(out / index["shards"][0]["name"])
    record = json.loads(first["000000000.json"])
    assert record["split"] in ("train", "val", "test") and record["captions"]
    stored, times = store.stored("appearance", record["id"])
    assert np.array_equal(np.load(io.BytesIO(first["000000000.appearance.npy"])), stored)
    assert np.array_equal(np.load(io.BytesIO(first["000000000.appearance.times.npy"])), times)
    before = {s["name"]: (out / s["name"]).read_bytes() for s in index["shards"]}
    (out / index["shards"][1]["name"]).unlink()  # a killed job left this one unwritten
    again = shard_dataset(tiny_synth / "manifest.json", out, "120KB", "features", tiny_synth / "features", EXPERTS,
                          progress=False)
    assert again["written"] == 1 and {name: (out / name).read_bytes() for name in before} == before


def test_media_shards_carry_the_files_and_record_a_missing_one(tiny_synth, tmp_path):
    root = shutil.copytree(tiny_synth, tmp_path / "synth", ignore=shutil.ignore_patterns("features"))
    videos = sorted((root / "videos").glob("*.mp4"))
    videos[3].unlink()
    done = shard_dataset(root / "manifest.json", tmp_path / "media", "400KB", "media", progress=False)
    assert done["samples"] == 31 and done["failed"] == 1
    failure = json.loads((tmp_path / "media" / "failures.jsonl").read_text().splitlines()[0])
    assert failure["item"] == videos[3].stem and "media file not found" in failure["error"]
    first = members(tmp_path / "media" / done["shards"][0]["name"])
    record = json.loads(first["000000000.json"])
    assert first["000000000.mp4"] == (root / "videos" / f"{record['id']}.mp4").read_bytes()


@pytest.mark.parametrize("kind", ["drop", "500", "slow"])
def test_a_failing_read_is_retried_and_continues_after_the_samples_taken(train_shards, server, kind):
    name = "shard-000002.tar"
    local = [sample for _, sample in read_shard(str(train_shards / name), NEEDS)]
    server.clear()
    server.fault(f"train/{name}", kind, count=1)
    remote = [sample for _, sample in read_shard(f"{server.url}/train/{name}", NEEDS, 3, NO_WAIT, sleep=lambda s: None)]
    assert [s["__key__"] for s in remote] == [s["__key__"] for s in local] and remote == local
    assert server.requests[f"train/{name}"] == 2


def test_a_shard_still_broken_after_its_retries_is_skipped_and_recorded(train_shards, server, tmp_path):
    server.clear()
    server.fault("train/shard-000000.tar", "truncated", count=-1)
    with pytest.raises(ShardFailed, match=r"shard-000000\.tar: .*\(after 2 retries\)"):
        list(read_shard(f"{server.url}/train/shard-000000.tar", NEEDS, 3, NO_WAIT, sleep=lambda s: None))
    assert server.requests["train/shard-000000.tar"] == 3  # the first read and two retries
    urls = [f"{server.url}/train/shard-00000{i}.tar" for i in range(2)]
    stream = iter(SlotStream(urls, {u: 3 for u in urls}, NEEDS, seed=0, epoch=0, slot=0, slots=1, buffer=1,
                             retry=NO_WAIT, failures=tmp_path / "failures.jsonl"))
    taken = [next(stream) for _ in range(4)]  # shard 1's 3 samples, then (resampling) shard 1 again
    assert len({s["__key__"] for s in taken}) == 3
    failures = [json.loads(line) for line in (tmp_path / "failures.jsonl").read_text().splitlines()]
    assert failures[0]["item"] == urls[0] and failures[0]["stage"] == "stream"


def _read_epoch(rank: int, world: int, url: str, out: str) -> None:
    """One gloo rank reading one epoch of shards with 2 loader workers: the ids of its batches."""
    import torch.distributed as torch_dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["SHARD_TEST_PORT"])
    torch_dist.init_process_group("gloo", rank=rank, world_size=world)
    batches = ShardBatches(url, FeatureDecoder(EXPERTS), assemble=lambda items, epoch: {}, batch_size=8,
                           samples_per_epoch=32, seed=5, workers=2, buffer=3)
    batches.shard(torch_dist.get_rank(), world)
    ids = [batches.batch(0, index)["video_ids"] for index in range(batches.epoch_length(0))]
    gathered = [None] * world
    torch_dist.all_gather_object(gathered, ids)
    if rank == 0:
        Path(out).write_text(json.dumps(gathered))
    torch_dist.destroy_process_group()


@pytest.mark.heavy
def test_two_gloo_ranks_with_two_workers_each_read_disjoint_samples_covering_the_epoch(tiny_synth, tmp_path):
    import socket

    out = tmp_path / "all"  # all 32 videos, 4 per shard: 8 shards, 2 for each of the 4 readers
    shard_dataset(tiny_synth / "manifest.json", out, "10MB", "features", tiny_synth / "features", EXPERTS,
                  max_samples=4, progress=False)
    served = ShardServer(tmp_path)
    try:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            os.environ["SHARD_TEST_PORT"] = str(probe.getsockname()[1])
        torch.multiprocessing.spawn(_read_epoch, args=(2, f"{served.url}/all/shard-{{000000..000007}}.tar",
                                                       str(tmp_path / "ids.json")), nprocs=2)
    finally:
        served.close()
    per_rank = json.loads((tmp_path / "ids.json").read_text())
    assert [len(batches) for batches in per_rank] == [4, 4] and all(len(b) == 4 for r in per_rank for b in r)
    seen = [i for rank in per_rank for batch in rank for i in batch]
    manifest = json.loads((tiny_synth / "manifest.json").read_text())
    assert len(seen) == len(set(seen)) == 32 and set(seen) == {v["id"] for v in manifest["videos"]}


def _train(tiny_synth: Path, run: Path, shards: str, *extra: str, kill_at_checkpoint: bool = False) -> None:
    from tests.conftest import tiny_config_overrides

    sets = tiny_config_overrides(tiny_synth) + [
        f"data.shards={shards}", "data.samples_per_epoch=24", "data.num_workers=2", "data.shuffle_buffer=4",
        "data.shard_retries=2", "data.shard_timeout=2", "train.checkpoint_every=2", "train.epochs=2"]
    command = [sys.executable, "-m", "videotext.cli", "train", "dual/synthetic", "-o", str(run), "--no-progress",
               "--no-report", *extra, *[x for s in sets for x in ("--set", s)]]
    if not kill_at_checkpoint:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while not (run / "checkpoints" / "last").is_dir() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)  # the first mid-epoch checkpoint is written: kill the run and its readers
    process.wait()


def weights(run: Path) -> dict[str, torch.Tensor]:
    from videotext.train.checkpoint import read_weights

    return read_weights(run / "checkpoints" / "last")


@pytest.mark.heavy
def test_a_run_from_http_equals_the_run_from_disk_and_resumes_after_sigkill(tiny_synth, train_shards, server, tmp_path):
    pattern = "shard-{000000..000008}.tar"
    _train(tiny_synth, tmp_path / "disk", f"{train_shards}/{pattern}")
    server.clear()
    server.fault("train/shard-000004.tar", "drop", count=1)  # a dropped connection, retried
    _train(tiny_synth, tmp_path / "http", f"{server.url}/train/{pattern}")
    reference, over_http = weights(tmp_path / "disk"), weights(tmp_path / "http")
    assert max(float((reference[k] - over_http[k]).abs().max()) for k in reference) <= 1e-6

    _train(tiny_synth, tmp_path / "killed", f"{server.url}/train/{pattern}", kill_at_checkpoint=True)
    from videotext.train.checkpoint import load_state

    state = load_state(tmp_path / "killed" / "checkpoints" / "last")["trainer"]
    assert state["batch"] > 0  # killed after a mid-epoch checkpoint
    position = state["data_position"]
    assert [p["batch"] for p in position] == [0, 1] and all(p["shard"].endswith(".tar") and p["offset"] >= 0 for p in position)
    _train(tiny_synth, tmp_path / "killed", f"{server.url}/train/{pattern}", "--resume")
    resumed = weights(tmp_path / "killed")
    assert max(float((reference[k] - resumed[k]).abs().max()) for k in reference) <= 1e-6
    metrics = [json.loads(line) for line in (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if m["kind"] == "train"] == list(range(1, 7))  # each step once


def test_a_method_whose_batches_do_not_stream_is_one_clear_error(train_shards):
    from types import SimpleNamespace

    from videotext.config import load_config
    from videotext.data.streaming import shard_training_batches
    from videotext.errors import VideoTextError

    config = load_config("dual/synthetic", [f"data.shards={train_shards}/shard-{{000000..000008}}.tar"])
    with pytest.raises(VideoTextError, match="method 'dual' does not train from shards yet"):
        shard_training_batches(SimpleNamespace(streams_shards=False), config, {}, None)
    batches = shard_training_batches(SimpleNamespace(streams_shards=True), config,
                                     {"appearance": 1280, "motion": 80, "audio": 128}, None)
    assert batches.samples_per_epoch == 26 and len(batches.urls) == 9  # the index's training count
    with pytest.raises(VideoTextError, match=r"expert dims \(shards, run\)"):
        shard_training_batches(SimpleNamespace(streams_shards=True), config, {"appearance": 512, "motion": 80, "audio": 128}, None)


def test_mmt_trains_from_feature_shards_with_its_own_batches(tiny_synth, train_shards, tmp_path):
    from videotext.config import load_config
    from videotext.train.trainer import Trainer

    config = load_config("mmt/synthetic", [
        f"data.manifest={tiny_synth / 'manifest.json'}", f"data.features={tiny_synth / 'features'}",
        "data.experts=[appearance,motion,audio]", f"data.shards={train_shards}/shard-{{000000..000008}}.tar",
        "data.samples_per_epoch=16", "data.num_workers=0", "train.epochs=1", "train.batch_size=8",
        "schedule.warmup_steps=0"])
    trainer = Trainer(config, tmp_path / "run", progress=False)
    trainer.build()
    batch = trainer.batches.batch(0, 0)
    from videotext.data.loaders import caption_video_batch
    from videotext.data.mmt_features import collate_mmt

    videos = [trainer.data.dataset[i] for i in batch["video_ids"]]  # the same videos, read from the store
    disk = caption_video_batch(videos, trainer.method.feature_reader(trainer.data.read_features),
                               trainer.method.prepare_text, config.train.seed, 0, collate=collate_mmt)
    assert len(videos) == 8 and all(trainer.data.dataset.splits["train"].count(v.id) for v in videos)
    for part in ("features", "masks", "times", "pooled_max", "pooled_mean"):
        for expert in EXPERTS:
            torch.testing.assert_close(batch["video"][part][expert], disk["video"][part][expert], equal_nan=True)
    assert torch.equal(batch["text"]["input_ids"], disk["text"]["input_ids"])


def test_extraction_from_media_shards_over_http_equals_extraction_from_the_folder(tiny_synth, server, tmp_path):
    """`videotext extract PATTERN`: one shard at a time, a dropped connection retried; the features
    equal those extracted from the video files; a rerun writes out and decodes nothing."""
    from tests.conftest import TINY_EXTRACT
    from videotext.data.experts import extract_features
    from videotext.data.experts.from_shards import extract_from_shards
    from videotext.data.schema import VideoTextDataset

    dataset = VideoTextDataset.load(tiny_synth / "manifest.json")
    subset = dataset.subset([v.id for v in list(dataset)[:6]])
    subset.save(tmp_path / "six.json")
    served = server.folder / "media"
    shard_dataset(tmp_path / "six.json", served, "10MB", "media", max_samples=2, progress=False)
    experts = ["appearance", "audio"]
    extract_features(tmp_path / "six.json", experts, tmp_path / "folder", rate=1.0, options=TINY_EXTRACT, progress=False)
    server.clear()
    server.fault("media/shard-000001.tar", "drop", count=1)
    summary = extract_from_shards(f"{server.url}/media/shard-{{000000..000002}}.tar", experts, tmp_path / "streamed",
                                  retry=NO_WAIT, rate=1.0, options=TINY_EXTRACT, progress=False)
    assert summary["shards"] == 3 and summary["done"] == 6 and summary["failed"] == 0
    folder, streamed = FeatureStore(tmp_path / "folder"), FeatureStore(tmp_path / "streamed")
    for expert in experts:
        assert sorted(streamed.keys(expert)) == sorted(folder.keys(expert)) == sorted(v.id for v in subset)
        for key in folder.keys(expert):
            assert np.abs(streamed.get(expert, key)[0] - folder.get(expert, key)[0]).max() <= 1e-6
    assert not [p for p in (tmp_path / "streamed").iterdir() if p.name.startswith(".shard-")]  # scratch removed
    again = extract_from_shards(f"{server.url}/media/shard-{{000000..000002}}.tar", experts, tmp_path / "streamed",
                                retry=NO_WAIT, rate=1.0, options=TINY_EXTRACT, progress=False)
    assert again["done"] == 0 and again["videos"] == 0


def test_frozen_clips_from_media_shards_equal_the_clips_from_files(data, tmp_path):  # noqa: F811
    """Frozen (§3.2, §4.5) from shards: each clip equals the one `FrameBatches` cuts from the file
    (same frames, crop and flip), the curriculum's frame count per epoch, images alternating."""
    from tests.data.test_frozen_frames import curriculum_config
    from videotext.data.frames import frame_item
    from videotext.data.schema import VideoTextDataset
    from videotext.train.trainer import Trainer

    config = curriculum_config(data, "train.batch_size=3", f"model.image_manifest={data / 'images.json'}",
                               "model.image_batch_size=3")
    shard_dataset(data / "split.json", tmp_path / "videos", "10MB", "media", splits=["train"], progress=False)
    shard_dataset(data / "images.json", tmp_path / "images", "10MB", "media", progress=False)
    disk = Trainer(config, tmp_path / "disk", progress=False)
    disk.build()
    config.data.shards = f"{tmp_path / 'videos'}/shard-000000.tar"
    config.data.num_workers = 1
    config.model["image_shards"] = f"{tmp_path / 'images'}/shard-000000.tar"
    streamed = Trainer(config, tmp_path / "streamed", progress=False)
    streamed.build()
    method = disk.method
    source = method._source(disk.train_set)
    for epoch, frames in ((0, 1), (1, 2)):
        batch = streamed.batches.batch(epoch, 0)  # the video batch (batch 1 is the images')
        assert batch["video"]["frames"].shape[:2] == (3, frames) and sorted(batch["video_ids"]) == ["v0", "v1", "v2"]
        for row, video_id in enumerate(batch["video_ids"]):
            text, clip = frame_item(source, disk.train_set[video_id], config.train.seed, epoch, frames)
            assert torch.equal(batch["video"]["frames"][row], clip)
        images = streamed.batches.batch(epoch, 1)
        assert images["video"]["frames"].shape[1] == 1 and len(images["video_ids"]) == 3
    assert VideoTextDataset.load(data / "images.json").videos.keys() >= set(images["video_ids"])


@pytest.mark.heavy
def test_mmt_pretraining_windows_from_shards_equal_the_windows_from_disk(tmp_path):
    """MMT §4.2 pre-training (`mmt/pretrain_synthetic`: data.text narration, 24-word windows) from
    feature shards: each video's window text and its cropped features equal the disk path's."""
    from tests.conftest import TINY_EXTRACT
    from videotext.config import load_config
    from videotext.data.experts import extract_features
    from videotext.data.loaders import caption_video_batch
    from videotext.data.mmt_features import collate_mmt
    from videotext.data.narration import window_of
    from videotext.data.synthetic import synthesize
    from videotext.train.trainer import Trainer

    root = tmp_path / "narrated"
    synthesize(root, 12, 3, progress=False, narration=True)
    extract_features(root / "manifest.json", EXPERTS, root / "features", rate=1.0, options=TINY_EXTRACT, progress=False)
    shard_dataset(root / "manifest.json", tmp_path / "shards", "10MB", "features", root / "features", EXPERTS,
                  splits=["train"], max_samples=3, progress=False)
    count = len(read_index(tmp_path / "shards")["shards"])
    config = load_config("mmt/pretrain_synthetic", [
        f"data.manifest={root / 'manifest.json'}", f"data.features={root / 'features'}", "train.batch_size=4",
        f"data.shards={tmp_path / 'shards'}/shard-{{000000..{count - 1:06d}}}.tar", "data.num_workers=0",
        "data.samples_per_epoch=8", "train.epochs=1"])
    trainer = Trainer(config, tmp_path / "run", progress=False)
    trainer.build()
    method, seed = trainer.method, config.train.seed
    for epoch in (0, 1):
        batch = trainer.batches.batch(epoch, 0)
        videos = [window_of(trainer.data.dataset[i], seed, epoch, config.data.narration) for i in batch["video_ids"]]
        disk = caption_video_batch(videos, method.feature_reader(trainer.data.read_features), method.prepare_text, seed,
                                   epoch, collate=collate_mmt)
        assert all(v.feature_key.startswith(f"{v.id}@") for v in videos)  # features cut to the window
        assert torch.equal(batch["text"]["input_ids"], disk["text"]["input_ids"])
        for part in ("features", "masks", "times"):
            for expert in EXPERTS:
                torch.testing.assert_close(batch["video"][part][expert], disk["video"][part][expert], equal_nan=True)


def test_a_pipe_reads_the_same_samples(train_shards):
    path = train_shards / "shard-000003.tar"
    local = [sample for _, sample in read_shard(str(path), NEEDS, 3)]
    piped = [sample for _, sample in read_shard(f"pipe:cat {path}", NEEDS, 3, NO_WAIT)]
    assert len(local) == 3 and piped == local


def test_an_fsspec_url_reads_the_same_samples(train_shards):
    """Object storage goes through fsspec (s3://, gs:// with their packages); its in-memory file
    system stands in for one here."""
    import fsspec

    path = train_shards / "shard-000005.tar"
    with fsspec.open("memory://bucket/shard-000005.tar", "wb") as handle:
        handle.write(path.read_bytes())
    local = [sample for _, sample in read_shard(str(path), NEEDS, 3)]
    remote = [sample for _, sample in read_shard("memory://bucket/shard-000005.tar", NEEDS, 3, NO_WAIT)]
    assert len(local) == 3 and remote == local


def test_a_resumed_reader_checks_it_stands_where_the_checkpoint_says(train_shards):
    pattern = f"{train_shards}/shard-{{000000..000008}}.tar"

    def reader() -> ShardBatches:
        return ShardBatches(pattern, FeatureDecoder(EXPERTS), assemble=lambda items, epoch: {}, batch_size=4,
                            samples_per_epoch=24, seed=1, workers=0, buffer=5)

    first = reader()
    ids = [first.batch(0, index)["video_ids"] for index in range(4)]
    saved = first.position()
    assert saved[0]["batch"] == 3 and saved[0]["samples"] == 16 and saved[0]["shard"].endswith(".tar")
    resumed = reader()
    resumed.expect(saved)
    assert [resumed.batch(0, index)["video_ids"] for index in (4, 5)] == [first.batch(0, index)["video_ids"] for index in (4, 5)]
    assert len({i for batch in ids for i in batch}) == 16  # no sample twice within the epoch's first pass
    moved = reader()
    moved.expect([{**saved[0], "offset": saved[0]["offset"] + 1}])
    from videotext.errors import VideoTextError

    with pytest.raises(VideoTextError, match="the checkpoint recorded shard"):
        moved.batch(0, 4)
