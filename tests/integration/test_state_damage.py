"""Every other file the project keeps state in (checkpoints, a run's config, feature files,
transcripts, Milvus Lite data, benchmark records) truncated, zeroed or replaced by garbage: one
error naming the file and the way back, never a traceback and never a silently wrong answer.
The index folder's own files are under test in test_index_damage.py."""
from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tests.search.test_index_damage import damage
from videotext.digests import forget
from videotext.errors import DataFormatError, VideoTextError

DAMAGE = ["truncated", "zeroed", "garbage"]


def one_error(exc_info, path, remedy: str) -> str:
    message = str(exc_info.value)
    assert message.startswith(str(path)) and "\n" not in message, message
    assert remedy in message, message
    return message


# --- checkpoints and the run's config ------------------------------------------------------------
@pytest.fixture
def checkpoint(tmp_path):
    from videotext.train.checkpoint import save_checkpoint

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    folder = save_checkpoint(tmp_path / "run" / "checkpoints" / "last", model, {"method": "stand-in", "step": 3},
                             {"optimizer": {"lr": 0.1}, "step": 3})
    return folder, model


@pytest.mark.parametrize("how", DAMAGE)
@pytest.mark.parametrize("name", ["model.safetensors", "state.pt", "meta.json"])
def test_a_damaged_checkpoint_file_names_itself_and_the_way_back(checkpoint, name, how):
    from videotext.train.checkpoint import load_meta, load_state, load_weights

    folder, model = checkpoint
    damage(folder / name, how)
    read = {"model.safetensors": lambda: load_weights(folder, model), "state.pt": lambda: load_state(folder),
            "meta.json": lambda: load_meta(folder)}[name]
    with pytest.raises(DataFormatError) as raised:
        read()
    message = one_error(raised, folder / name, f"restore {folder} from a copy")
    assert "`--checkpoint best`" in message and f"videotext train CONFIG -o {folder.parent.parent}" in message


def test_a_save_killed_between_its_renames_is_undone_and_its_leftovers_cleared(checkpoint):
    from videotext.train.checkpoint import load_meta, load_weights, save_checkpoint

    folder, model = checkpoint
    old = folder.with_name(".last.old")
    folder.rename(old)  # the moment between setting the old folder aside and renaming the new one in
    leftover = folder.with_name(".last.k2j4x")  # a killed save's half-written folder
    leftover.mkdir()
    (leftover / "model.safetensors").write_bytes(b"\0" * 10)
    assert load_meta(folder)["step"] == 3 and folder.is_dir() and not old.exists()
    torch.nn.init.zeros_(model.weight)
    save_checkpoint(folder, model, {"method": "stand-in", "step": 4})
    assert not leftover.exists() and sorted(p.name for p in folder.parent.iterdir()) == ["last"]
    fresh = torch.nn.Linear(8, 4)
    load_weights(folder, fresh)
    assert float(fresh.weight.detach().abs().sum()) == 0.0 and load_meta(folder)["step"] == 4


@pytest.fixture(scope="module")
def run_dir(tiny_synth, tmp_path_factory):
    from tests.test_distributed import _fake_run

    return _fake_run(tiny_synth, tmp_path_factory.mktemp("damaged_run") / "run")


@pytest.mark.parametrize("name, how", [("checkpoints/best/model.safetensors", "truncated"),
                                       ("checkpoints/best/meta.json", "garbage"),
                                       ("config.yaml", "garbage"), ("config.yaml", "zeroed")])
def test_the_command_line_says_it_in_one_line(run_dir, tmp_path, name, how):
    from videotext.cli import app

    copy = shutil.copytree(run_dir, tmp_path / "run")
    damage(copy / name, how)
    result = CliRunner().invoke(app, ["eval", str(copy), "--no-report"])
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1 and "Traceback" not in result.output, result.output
    assert errors[0].startswith(f"error: {copy / name}")
    remedy = "write it again (the checkpoints are kept)" if name == "config.yaml" else "from a copy"
    assert remedy in errors[0]


# --- feature files --------------------------------------------------------------------------------
@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_feature_file_names_itself_and_the_extraction_that_remakes_it(tiny_synth, tmp_path, how):
    from videotext.data.features import FeatureStore

    store_folder = shutil.copytree(tiny_synth / "features", tmp_path / "features")
    damage(store_folder / "audio.h5", how)
    store = FeatureStore(store_folder)
    assert store.get("motion", store.keys("motion")[0])[0].shape[1] == store.dim("motion")  # the others still read
    with pytest.raises(DataFormatError) as raised:
        store.keys("audio")
    one_error(raised, store_folder / "audio.h5", "delete it and run the extraction again")


# --- transcripts (and every append-only log) ------------------------------------------------------
def transcript(key: str, text: str):
    from videotext.data.speech.recognize import Line
    from videotext.data.speech.transcripts import Transcript

    return Transcript(key=key, path=f"/videos/{key}.mp4", size=1, mtime_ns=1, source="subtitle",
                      lines=[Line(0.0, 1.0, text, "subtitle")])


@pytest.fixture
def transcripts(tmp_path):
    from videotext.data.speech.transcripts import TranscriptStore

    store = TranscriptStore(tmp_path / "features")
    for key in ("a", "b", "c"):
        store.add(transcript(key, f"line of {key}"))
    return store.path


@pytest.mark.parametrize("how", ["zeroed", "garbage"])
def test_damaged_transcripts_name_the_file_and_the_way_back(transcripts, how):
    from videotext.data.speech.transcripts import TranscriptStore

    damage(transcripts, how)
    with pytest.raises(DataFormatError) as raised:
        TranscriptStore(transcripts.parent).all()
    one_error(raised, transcripts, "delete it and run the same command again")


def test_a_torn_last_line_is_skipped_and_the_next_line_appended_whole(transcripts):
    from videotext.data.speech.transcripts import TranscriptStore

    data = transcripts.read_bytes()
    transcripts.write_bytes(data[: len(data) - 20])  # the writer of "c" killed mid-line
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert sorted(TranscriptStore(transcripts.parent).all()) == ["a", "b"]  # "c" is transcribed again
    assert any("torn line skipped" in str(w.message) for w in seen)
    store = TranscriptStore(transcripts.parent)
    store.add(transcript("c", "line of c"))  # the torn line is cut off first: never glued on, never left inside
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing torn left to warn about
        again = TranscriptStore(transcripts.parent).all()
    assert sorted(again) == ["a", "b", "c"] and again["c"].lines[0].text == "line of c"
    assert transcripts.read_bytes().count(b"\n") == 3


def test_a_damaged_failure_log_is_said_and_the_extraction_it_records_goes_on(tiny_synth, tmp_path):
    from tests.conftest import TINY_EXTRACT
    from videotext.data.experts import extract_features

    out = tmp_path / "features"
    out.mkdir()
    damaged = b"\x00\x00 a failure line whose bytes were lost\n"
    (out / "failures.jsonl").write_bytes(damaged)
    videos = [str(path) for path in sorted((tiny_synth / "videos").glob("*.mp4"))[:2]]
    with pytest.warns(UserWarning, match=r"failures\.jsonl \[line 1\]: not a JSON line, the file is damaged"):
        summary = extract_features(videos, ["audio"], out, rate=1.0, progress=False, options=TINY_EXTRACT)
    assert summary["done"] == 2 and summary["failed"] == 0, summary
    assert (out / "failures.jsonl").read_bytes() == damaged  # kept as it was: nothing lost


# --- Milvus Lite data -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def milvus_folder(tmp_path_factory):
    pytest.importorskip("milvus_lite")
    from videotext.search import Entry
    from videotext.search.index import new_index

    root = tmp_path_factory.mktemp("milvus_damage")
    index = new_index(16, "stand-in", store=f"milvus:{root / 'lite.db'}")
    index.add(np.random.default_rng(0).standard_normal((6, 16)).astype(np.float32), [Entry(f"v{i}") for i in range(6)])
    index.save(root / "idx")
    index.close()
    return root


def milvus_copy(milvus_folder, tmp_path):
    shutil.copytree(milvus_folder / "lite.db", tmp_path / "lite.db")
    shutil.copytree(milvus_folder / "idx", tmp_path / "idx")
    info = tmp_path / "idx" / "index.json"
    info.write_text(info.read_text().replace(str(milvus_folder / "lite.db"), str(tmp_path / "lite.db")))
    forget(info)  # edited on purpose: its digest record goes ("delete .NAME.crc32 to accept it")
    return tmp_path / "lite.db", tmp_path / "idx"


@pytest.mark.parametrize("how", DAMAGE)
@pytest.mark.parametrize("kind", ["schema.json", "manifest.json", ".parquet", ".idx"])
def test_damaged_milvus_lite_data_names_the_store_and_the_rebuild(milvus_folder, tmp_path, kind, how):
    from videotext.search.index import open_store

    lite, folder = milvus_copy(milvus_folder, tmp_path)
    target = next(p for p in lite.rglob("*") if p.is_file() and p.name.endswith(kind))
    damage(target, how)
    with pytest.raises(DataFormatError) as raised:
        open_store(folder)
    message = one_error(raised, lite, f"videotext index build RUN SOURCE -o {folder} --store milvus:{lite}")
    if kind == "manifest.json":  # Milvus Lite falls back to its previous manifest: an older, empty table
        assert "holds 0 entries; the index folder recorded 6" in message


def test_an_intact_milvus_lite_index_opens_with_its_count(milvus_folder, tmp_path):
    from videotext.search.index import open_store

    _, folder = milvus_copy(milvus_folder, tmp_path)
    assert json.loads((folder / "index.json").read_text())["count"] == 6
    index = open_store(folder)
    assert len(index) == 6 and index.search_one(np.ones(16, np.float32), 3)[0].id.startswith("v")
    index.close()


# --- benchmark records ----------------------------------------------------------------------------
@pytest.mark.parametrize("how", DAMAGE + ["not a record"])
def test_a_damaged_benchmark_record_names_itself_and_the_rerun(tmp_path, how):
    from videotext.benchmark.runner import read_record

    record = tmp_path / "results" / "dual" / "seed_0.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"row": "dual", "seed": 0, "epochs": 2, "results": {"dual": {"t2v": {"R1": 50.0}}}}))
    assert read_record(record)["results"]["dual"]["t2v"]["R1"] == 50.0
    if how == "not a record":
        record.write_text("[1, 2, 3]")
    else:
        damage(record, how)
    with pytest.raises(DataFormatError) as raised:
        read_record(record)
    one_error(raised, record, "delete it and run `videotext benchmark run` again")
    assert isinstance(raised.value, VideoTextError)
