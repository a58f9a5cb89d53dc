"""Damage that still parses: 1 000 random single bytes changed, one at a time, across every kind of file
the project writes with a digest (a run's config, checkpoint weights, optimiser state and metadata,
metrics, feature files and their sources, transcripts and on-screen lines, index vectors, entries and
metadata, the exported query encoder, the index's spoken and written lines, a benchmark record).
`videotext check` reports each as one `error:` line naming the file and its way back, with exit 2;
the file's own reader refuses it the same way; and files rewritten by the project itself never trip it."""
from __future__ import annotations

import random
import shutil

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

pytestmark = pytest.mark.heavy  # trains nothing, but builds an index and exports its query encoder

FLIPS = 1000


@pytest.fixture(scope="module")
def written(tiny_synth, tmp_path_factory):
    """Every kind of file, written by the project's own writers: {top folder: [files]}."""
    from tests.test_distributed import _fake_run
    from videotext.benchmark.runner import RECORD_WAY_BACK
    from videotext.data.ocr.reader import ONSCREEN
    from videotext.data.speech.recognize import Line
    from videotext.data.speech.transcripts import Transcript, TranscriptStore
    from videotext.data.features import FeatureStore
    from videotext.data.schema import VideoTextDataset
    from videotext.inference import load_model
    from videotext.io import write_json
    from videotext.search.spoken import SaidLine, SpokenIndex
    from videotext.train.checkpoint import save_checkpoint
    from videotext.train.trainer import MetricsLog

    root = tmp_path_factory.mktemp("digest_flips")
    run = _fake_run(tiny_synth, root / "run")
    model = load_model(run, device="cpu")
    optimizer = torch.optim.AdamW(model.method.parameters(), lr=1e-3)
    for parameter in model.method.parameters():
        parameter.grad = torch.ones_like(parameter)
    optimizer.step()  # an optimiser state with moments in it
    save_checkpoint(run / "checkpoints" / "last", model.method, {"method": "dual", "step": 1},
                    {"optimizer": optimizer.state_dict(), "step": 1})
    with MetricsLog(run) as log:
        for step in range(4):
            log.write({"kind": "train", "step": step, "epoch": 0, "loss": 1.0 / (step + 1)})
    features = root / "features"
    shutil.copytree(tiny_synth / "features", features)
    dataset = VideoTextDataset.load(tiny_synth / "manifest.json")
    ids = [v.id for v in dataset][:6]
    FeatureStore(features).record_sources({key: {"hash": f"h{key}", "size": 1, "mtime_ns": 1} for key in ids})
    for name in ("transcripts.jsonl", ONSCREEN):
        store = TranscriptStore(features, name)
        for key in ids[:3]:
            store.add(Transcript(key, [Line(0.0, 1.0, f"words of {key}", "subtitle")], "subtitle", f"/v/{key}.mp4", 1, 1))
    index = root / "index"
    model.build_index(dataset.subset(ids), index, features_dir=features, progress=False)
    rng = np.random.default_rng(0)
    for channel in ("said", "written"):
        lines = [SaidLine(i, 0.0, 1.0, f"line {n} of {i}", "subtitle") for n, i in enumerate(ids[:3])]
        SpokenIndex(lines, rng.normal(size=(3, 8)).astype(np.float32), channel).save(index)
    results = root / "results"
    write_json(results / "row" / "seed_0.json", {"results": {"test": {"t2v": {"R@1": 12.5}}}}, way_back=RECORD_WAY_BACK)
    folders = {run: ["config.yaml", "checkpoints/best/model.safetensors", "checkpoints/best/meta.json",
                     "checkpoints/last/model.safetensors", "checkpoints/last/state.pt", "checkpoints/last/meta.json",
                     "metrics.jsonl"],
               features: ["appearance.h5", "motion.h5", "audio.h5", "sources.json", "transcripts.jsonl", ONSCREEN],
               index: ["index.json", "index.faiss", "entries.parquet", "query_encoder/model.onnx",
                       "query_encoder/tokenizer.json", "query_encoder/encoder.json", "speech.jsonl", "speech.npy",
                       "written.jsonl", "written.npy"],
               results: ["row/seed_0.json"]}
    for folder, names in folders.items():
        for name in names:
            assert (folder / name).is_file(), name
    return folders


def readers():
    """How each kind of file is read by the project: a call that must refuse it."""
    from videotext.benchmark.runner import read_record
    from videotext.config import load_config
    from videotext.data.features import FeatureStore
    from videotext.data.speech.transcripts import TranscriptStore
    from videotext.search.index import open_store
    from videotext.search.query_encoder import ExportedTextEncoder
    from videotext.search.spoken import SpokenIndex
    from videotext.train.checkpoint import load_meta, load_state, read_weights
    from videotext.train.trainer import read_metrics_log

    def features(path):
        store = FeatureStore(path.parent)
        return [store.get(path.stem, key) for key in store.keys(path.stem)]

    return {
        "config.yaml": load_config, "model.safetensors": lambda p: read_weights(p.parent),
        "state.pt": lambda p: load_state(p.parent), "meta.json": lambda p: load_meta(p.parent),
        "metrics.jsonl": lambda p: read_metrics_log(p.parent), ".h5": features,
        "sources.json": lambda p: FeatureStore(p.parent).sources(),
        ".jsonl": lambda p: TranscriptStore(p.parent, p.name).all(),
        "index.json": lambda p: open_store(p.parent), "index.faiss": lambda p: open_store(p.parent),
        "entries.parquet": lambda p: open_store(p.parent), "query_encoder": lambda p: ExportedTextEncoder(p.parent),
        "speech": lambda p: SpokenIndex.load(p.parent, "said"), "written": lambda p: SpokenIndex.load(p.parent, "written"),
        "seed_": read_record,
    }


def reader_of(path):
    table = readers()
    for key in (path.name, path.parent.name, path.stem, path.suffix, path.name[:5]):
        if key in table:
            return table[key]
    raise AssertionError(path)


WAY_BACKS = {"config.yaml": "train CONFIG --resume", "checkpoints": "use the other checkpoint",
             "metrics.jsonl": "restore it from a copy, or delete it", ".h5": "run the extraction again",
             "sources.json": "re-hashes the videos", "transcripts.jsonl": "delete it and run the same command again",
             "onscreen.jsonl": "delete it and run the same command again", "query_encoder": "build the index again",
             "speech": "--update --speech", "written": "--update --text", "index": "rebuild the index",
             "seed_0.json": "run `videotext benchmark run` again"}


def way_back_of(path) -> str:
    for key in (path.name, path.stem, path.suffix, path.parent.name, path.parent.parent.name):
        if key in WAY_BACKS:
            return WAY_BACKS[key]
    return WAY_BACKS["index"]  # the index folder's own files


def kind_of(path) -> str:
    """A kind of file (a checkpoint's files are the same kinds in best and last; an export is one)."""
    return "query_encoder" if path.parent.name == "query_encoder" else path.name


def test_a_thousand_single_changed_bytes_are_each_one_error_line_with_the_way_back(written):
    from videotext.cli import app

    runner = CliRunner()
    files = [(folder, folder / name) for folder, names in written.items() for name in names]
    for folder in written:  # as written: no damage
        done = runner.invoke(app, ["check", str(folder)])
        assert done.exit_code == 0 and "no damage found" in done.stdout, done.output
    rng = random.Random(0)
    read_back: dict[str, int] = {}
    for flip in range(FLIPS):
        folder, path = files[rng.randrange(len(files))]
        data = path.read_bytes()
        position = rng.randrange(len(data))
        path.write_bytes(data[:position] + bytes([data[position] ^ rng.randrange(1, 256)]) + data[position + 1 :])
        try:
            done = runner.invoke(app, ["check", str(folder)])
            errors = [line for line in done.stderr.splitlines() if line.strip()]
            assert done.exit_code == 2 and len(errors) == 1, (flip, path, position, done.output)
            assert errors[0].startswith(f"error: {path}") and way_back_of(path) in errors[0], (flip, errors)
            kind = kind_of(path)
            if read_back.get(kind, 0) < 3:  # the file's own reader refuses it too (three flips of each kind)
                read_back[kind] = read_back.get(kind, 0) + 1
                with pytest.raises(ValueError) as raised:  # DamagedFile, or the damage a parser sees first
                    reader_of(path)(path)
                assert str(path) in str(raised.value) and "\n" not in str(raised.value), raised.value
        finally:
            path.write_bytes(data)
    assert set(read_back) == {kind_of(path) for _, path in files}  # every kind read back by its own reader


def test_files_rewritten_by_the_project_never_trip_their_digests(written, tiny_synth):
    from videotext.cli import app
    from videotext.config import load_config, save_config
    from videotext.data.features import FeatureStore
    from videotext.data.schema import VideoTextDataset
    from videotext.data.speech.transcripts import TranscriptStore
    from videotext.inference import load_model
    from videotext.train.checkpoint import load_state, save_checkpoint
    from videotext.train.trainer import MetricsLog

    run, features, index, results = written
    save_config(load_config(run / "config.yaml"), run / "config.yaml")
    model = load_model(run, device="cpu")
    save_checkpoint(run / "checkpoints" / "last", model.method, {"method": "dual", "step": 2}, load_state(run / "checkpoints" / "last"))
    with MetricsLog(run, keep_lines=2) as log:  # a resume cuts the log back, then appends
        log.write({"kind": "train", "step": 2, "epoch": 0, "loss": 0.3})
    store = FeatureStore(features)
    store.record_sources({"extra": {"hash": "x", "size": 2, "mtime_ns": 2}})
    store.discard([store.keys("audio")[0]])  # each feature file rewritten without one video
    TranscriptStore(features).compact()
    ids = [v.id for v in VideoTextDataset.load(tiny_synth / "manifest.json")][:7]
    model.build_index(VideoTextDataset.load(tiny_synth / "manifest.json").subset(ids), index, features_dir=features,
                      progress=False, update=True)  # a new video: the folder written again
    runner = CliRunner()
    for folder in written:
        done = runner.invoke(app, ["check", str(folder)])
        assert done.exit_code == 0 and "no damage found" in done.stdout, (folder, done.output)
    done = runner.invoke(app, ["index", "check", str(index), str(tiny_synth / "manifest.json")])
    assert "error" not in done.output, done.output
