"""The command line end to end on the tiny synthetic fixture: train → eval → index → search."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.conftest import tiny_config_overrides
from videotext.cli import app

CONFIG = "dual/synthetic"  # a packaged config, by name
runner = CliRunner()


def invoke(*args: str):
    result = runner.invoke(app, [str(a) for a in args])
    return result


@pytest.fixture(scope="module")
def trained_run(tiny_synth, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("cli") / "run"
    sets = [x for o in tiny_config_overrides(tiny_synth) for x in ("--set", o)]
    result = invoke("train", CONFIG, *sets, "--out", run, "--no-progress")
    assert result.exit_code == 0, result.output
    assert "t2v: R@1" in result.output and "v2t: R@1" in result.output
    return run


def test_eval_reproduces_the_test_metrics(trained_run):
    result = invoke("eval", trained_run, "--split", "test")
    assert result.exit_code == 0, result.output
    saved = json.loads((trained_run / "test_metrics.json").read_text())
    evaluated = json.loads((trained_run / "eval_test_best.json").read_text())
    for direction in ("t2v", "v2t"):
        for metric in ("R1", "R5", "MdR", "MnR"):
            assert evaluated[direction][metric] == pytest.approx(saved[direction][metric], abs=1e-4)


def test_index_build_and_search_cli_and_python_agree(trained_run, tiny_synth, tmp_path):
    index_dir = tmp_path / "idx"
    result = invoke("index", "build", trained_run, tiny_synth / "manifest.json", "-o", index_dir,
                    "--features", tiny_synth / "features")
    assert result.exit_code == 0, result.output
    assert "indexed 32 videos" in result.output
    from videotext.data.schema import VideoTextDataset

    dataset = VideoTextDataset.load(tiny_synth / "manifest.json")
    query = dataset[dataset.splits["test"][0]].captions[0]
    result = invoke("search", index_dir, query, "-k", "3", "--json")
    assert result.exit_code == 0, result.output
    hits = json.loads(result.output)
    assert [h["rank"] for h in hits] == [1, 2, 3]
    assert hits[0]["score"] >= hits[1]["score"] >= hits[2]["score"]
    assert all(Path(h["path"]).is_absolute() and Path(h["path"]).is_file() for h in hits)  # the user's own machine

    import videotext

    python_hits = videotext.load_model(trained_run, precision="fp32").search(query, index_dir, k=3)  # the exported query side is fp32
    assert [h.id for h in python_hits] == [h["id"] for h in hits]
    assert [h.score for h in python_hits] == pytest.approx([h["score"] for h in hits], abs=1e-5)
    assert [h.path for h in python_hits] == [h["path"] for h in hits]

    from fastapi.testclient import TestClient

    from videotext.apps.serve import create_app

    response = TestClient(create_app(index_dir)).get("/search", params={"q": query, "k": 3})
    served = response.json()["results"]
    assert [r["id"] for r in served] == [h["id"] for h in hits]
    # the HTTP API: paths relative to the indexed folder (the manifest's), never the server's own
    assert [r["path"] for r in served] == [Path(h["path"]).relative_to(tiny_synth).as_posix() for h in hits]
    assert all(r["path"].startswith("videos/") for r in served)
    assert str(tiny_synth) not in response.text and str(trained_run) not in response.text


COLD_SEARCH = """
import json, sys
from videotext.cli import app
try:
    app(sys.argv[1:], standalone_mode=False)
finally:
    print(json.dumps({"torch": "torch" in sys.modules, "transformers": "transformers" in sys.modules}))
"""


def test_a_query_through_the_exported_encoder_loads_neither_torch_nor_transformers(trained_run, tiny_synth, tmp_path):
    import subprocess
    import sys

    index_dir = tmp_path / "idx"
    result = invoke("index", "build", trained_run, tiny_synth / "manifest.json", "-o", index_dir,
                    "--features", tiny_synth / "features")
    assert result.exit_code == 0 and "query encoder: exported to" in result.output, result.output
    assert (index_dir / "query_encoder" / "model.onnx").is_file()
    query = "a red circle moves left"

    def cold(*extra: str) -> tuple[list[str], dict]:
        done = subprocess.run([sys.executable, "-c", COLD_SEARCH, "search", str(index_dir), query, "-k", "5", "--json",
                               *extra], capture_output=True, text=True, check=True)
        *hits, modules = done.stdout.strip().split("\n")
        return [h["id"] for h in json.loads("\n".join(hits))], json.loads(modules)

    ids, modules = cold()
    assert modules == {"torch": False, "transformers": False}
    # the same hits through torch: asked for (--precision), and from an index built before the export
    torch_ids, modules = cold("--precision", "fp32")
    assert torch_ids == ids and modules["torch"]
    shutil.rmtree(index_dir / "query_encoder")
    assert cold() == (ids, {"torch": True, "transformers": True})
    # an update keeps the exported encoder; a rebuild writes it again
    invoke("index", "build", trained_run, tiny_synth / "manifest.json", "-o", index_dir, "--features",
           tiny_synth / "features")
    stamp = (index_dir / "query_encoder" / "encoder.json").stat().st_mtime_ns
    assert invoke("index", "build", trained_run, tiny_synth / "manifest.json", "-o", index_dir, "--features",
                  tiny_synth / "features", "--update").exit_code == 0
    assert (index_dir / "query_encoder" / "encoder.json").stat().st_mtime_ns == stamp
    assert cold()[1]["torch"] is False
    # a damaged export is one line naming it and the remedy; an update writes it anew
    graph = index_dir / "query_encoder" / "model.onnx"
    graph.write_bytes(graph.read_bytes()[:1000])
    result = invoke("search", index_dir, query)
    assert result.exit_code == 2 and "query_encoder" in result.output and "build the index again" in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert invoke("index", "build", trained_run, tiny_synth / "manifest.json", "-o", index_dir, "--features",
                  tiny_synth / "features", "--update").exit_code == 0
    assert cold() == (ids, {"torch": False, "transformers": False})


def test_index_a_plain_folder_extracts_like_training(trained_run, tiny_synth, tmp_path):
    """New videos are extracted with the settings recorded in the training store."""
    folder = tmp_path / "my_videos"
    folder.mkdir()
    names = sorted((tiny_synth / "videos").glob("*.mp4"))[:3]
    for name in names:
        shutil.copy(name, folder / name.name)
    (folder / "broken.mp4").write_bytes(b"not a video")
    index_dir = tmp_path / "folder.index"
    result = invoke("index", "build", trained_run, folder, "-o", index_dir)
    assert result.exit_code == 0, result.output
    assert "indexed 3 videos" in result.output
    failures = (tmp_path / "folder.index.features" / "failures.jsonl").read_text()
    assert "broken" in failures

    from videotext.data.features import FeatureStore

    trained, fresh = FeatureStore(tiny_synth / "features"), FeatureStore(tmp_path / "folder.index.features")
    for expert in ("appearance", "motion", "audio"):
        a, _ = trained.get(expert, names[0].stem)
        b, _ = fresh.get(expert, names[0].stem)
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, atol=1e-2)


def test_user_errors_are_one_line_with_exit_status_2(tmp_path):
    result = invoke("train", tmp_path / "missing.yaml")
    assert result.exit_code == 2
    assert "missing.yaml: config file not found" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("method: nope\n")
    result = invoke("train", bad, "--set", f"data.manifest={tmp_path / 'm.json'}")
    assert result.exit_code == 2 and "Traceback" not in result.output
    result = invoke("search", tmp_path / "no-index", "query")
    assert result.exit_code == 2 and "index folder not found" in result.output
    result = invoke("synth", tmp_path / "s", "--splits", "0.5,x")
    assert result.exit_code == 2 and "--splits" in result.output
    result = invoke("synth", tmp_path / "s", "--splits", "0.5,0.6,0.1")
    assert result.exit_code == 2 and "summing to 1" in result.output


def test_synth_takes_split_fractions(tmp_path):
    result = invoke("synth", tmp_path / "s", "--videos", "4", "--splits", "0,0,1", "--workers", "1")
    assert result.exit_code == 0, result.output
    assert "(train 0, val 0, test 4)" in result.output  # the default 0.8,0.1,0.1 would give train 3+


def test_train_and_eval_write_the_run_report(trained_run):
    page = (trained_run / "report" / "index.html").read_text()
    assert "Test set" in page and "train_loss.png" in page and "recall_at_k.png" in page
    result = invoke("eval", trained_run, "--split", "val")
    assert result.exit_code == 0, result.output
    page = (trained_run / "report" / "index.html").read_text()
    assert "val split" in page and "Test set" not in page


def test_eval_of_a_missing_split_is_a_user_error(trained_run):
    result = invoke("eval", trained_run, "--split", "nope")
    assert result.exit_code == 2 and "no split 'nope'" in result.output


def test_index_build_update_adds_and_drops_from_the_command_line(trained_run, tiny_synth, tmp_path):
    from videotext.data.schema import VideoTextDataset

    dataset = VideoTextDataset.load(tiny_synth / "manifest.json")
    ids = [v.id for v in dataset]
    dataset.subset(ids[:10]).save(tmp_path / "first.json")
    dataset.subset(ids[5:12]).save(tmp_path / "second.json")
    index_dir = tmp_path / "idx"
    common = ["-o", index_dir, "--features", tiny_synth / "features"]
    assert "indexed 10 videos" in invoke("index", "build", trained_run, tmp_path / "first.json", *common).output
    result = invoke("index", "build", trained_run, tmp_path / "second.json", *common, "--update")
    assert result.exit_code == 0, result.output
    assert "indexed 7 videos" in result.output  # 5 kept, 2 added, 5 deleted ones dropped
    from videotext.search.index import Index

    assert sorted(e.video_id for e in Index.load(index_dir).entries()) == sorted(ids[5:12])


def test_the_same_commands_on_a_milvus_lite_store(trained_run, tiny_synth, tmp_path):
    """`index build --store milvus:PATH.db`, `--update`, `search --where` and the HTTP API answer as
    on the FAISS store: the same ids with scores within 1e-5."""
    from videotext.data.schema import VideoTextDataset
    from videotext.search.index import Index
    from videotext.search.milvus import MilvusIndex

    dataset = VideoTextDataset.load(tiny_synth / "manifest.json")
    ids = [v.id for v in dataset]
    dataset.subset(ids[:10]).save(tmp_path / "first.json")
    dataset.subset(ids[5:14]).save(tmp_path / "second.json")
    common = ["--features", tiny_synth / "features"]
    store = f"milvus:{tmp_path / 'videos.db'}"
    for out, extra in ((tmp_path / "faiss", []), (tmp_path / "milvus", ["--store", store, "--collection", "clips"])):
        result = invoke("index", "build", trained_run, tmp_path / "first.json", "-o", out, *common, *extra)
        assert result.exit_code == 0 and "indexed 10 videos" in result.output, result.output
        result = invoke("index", "build", trained_run, tmp_path / "second.json", "-o", out, *common, "--update")
        assert result.exit_code == 0 and "indexed 9 videos" in result.output, result.output
    milvus = Index.load(tmp_path / "milvus")
    assert isinstance(milvus, MilvusIndex) and milvus.alias == "clips" and milvus.collection == milvus.target()
    assert sorted(e.video_id for e in milvus.entries()) == sorted(ids[5:14])
    query = dataset[ids[7]].captions[0]
    for where in ([], ["--where", f'video_id in ["{ids[6]}", "{ids[7]}", "{ids[9]}"]']):
        faiss_hits = json.loads(invoke("search", tmp_path / "faiss", query, "-k", "3", "--json", *where).output)
        milvus_hits = json.loads(invoke("search", tmp_path / "milvus", query, "-k", "3", "--json", *where).output)
        assert [h["id"] for h in milvus_hits] == [h["id"] for h in faiss_hits] and len(faiss_hits) == 3
        assert [h["score"] for h in milvus_hits] == pytest.approx([h["score"] for h in faiss_hits], abs=1e-5)
    assert {h["id"] for h in faiss_hits} == {ids[6], ids[7], ids[9]}
    result = invoke("search", tmp_path / "milvus", query, "--where", "video_id ==")
    assert result.exit_code == 2 and "filter 'video_id ==', character 12: expected a value" in result.output

    from fastapi.testclient import TestClient

    from videotext.apps.serve import create_app

    served = TestClient(create_app(tmp_path / "milvus")).get("/search", params={"q": query, "k": 3}).json()
    assert [r["id"] for r in served["results"]][:1] == [json.loads(invoke(
        "search", tmp_path / "faiss", query, "-k", "1", "--json").output)[0]["id"]]


@pytest.mark.parametrize("store", ["faiss", "milvus"])
def test_a_file_changed_in_place_is_encoded_again_and_nothing_else_is_decoded(trained_run, tiny_synth, tmp_path,
                                                                             monkeypatch, store):
    """`--update` after one video file was overwritten in place with other footage: only that
    file is decoded again (its stale features discarded), its vector becomes the new
    footage's, every other vector is untouched; an update with nothing changed decodes and
    hashes nothing."""
    import videotext.data.media_files as media_files
    import videotext.run_model as run_model
    from videotext.search.index import Index

    folder = tmp_path / "videos"
    folder.mkdir()
    names = sorted((tiny_synth / "videos").glob("*.mp4"))[:4]
    for name in names:
        shutil.copy(name, folder / name.name)
    out = tmp_path / "idx"
    extra = ["--store", f"milvus:{tmp_path / 'v.db'}"] if store == "milvus" else []
    assert "indexed 4 videos" in invoke("index", "build", trained_run, folder, "-o", out, *extra).output
    before = Index.load(out)
    ids = sorted(before.ids)
    vectors = dict(zip(ids, before.embeddings_for(ids)))
    changed, footage = names[1].stem, names[3]
    shutil.copyfile(footage, folder / names[1].name)  # the same name, other content

    decoded, hashed = [], []
    real_extract, real_hash = run_model.extract_features, media_files.sha256_of
    monkeypatch.setattr(run_model, "extract_features",
                        lambda source, *a, **k: decoded.append([v.id for v in source]) or real_extract(source, *a, **k))
    monkeypatch.setattr(media_files, "sha256_of", lambda path: hashed.append(path.name) or real_hash(path))
    result = invoke("index", "build", trained_run, folder, "-o", out, "--update")
    assert result.exit_code == 0, result.output
    assert "update: 0 videos added, 1 changed in place (encoded again), 0 deleted, 3 entries kept" in result.output
    assert decoded == [[changed]] and hashed == [names[1].name]
    after = Index.load(out)
    assert sorted(after.ids) == ids
    np.testing.assert_allclose(after.embeddings_for([changed])[0], vectors[footage.stem], atol=1e-5)
    assert not np.allclose(vectors[changed], vectors[footage.stem], atol=1e-3)
    for other in set(ids) - {changed}:
        np.testing.assert_array_equal(after.embeddings_for([other])[0], vectors[other])
    assert after.get(changed).meta["hash"] == real_hash(footage)

    decoded.clear(), hashed.clear()
    result = invoke("index", "build", trained_run, folder, "-o", out, "--update")
    assert "update: 0 videos added, 0 changed in place (encoded again), 0 deleted, 4 entries kept" in result.output
    assert decoded == [] and hashed == []


@pytest.mark.parametrize("store", ["faiss", "milvus"])
def test_an_update_cut_short_leaves_a_searchable_index_and_the_next_one_completes_it(trained_run, tiny_synth,
                                                                                    tmp_path, monkeypatch, store):
    """The process dies after the new rows are written and before the deleted ones go: the
    FAISS folder is still the previous index, and so is the Milvus alias (the rows went into a new
    version, never published); searches still answer, and the next update ends equal to a clean build."""
    from videotext.data.schema import VideoTextDataset
    from videotext.inference import load_model
    from videotext.search import build
    from videotext.search.index import Index

    dataset = VideoTextDataset.load(tiny_synth / "manifest.json")
    ids = [v.id for v in dataset]
    first, second = dataset.subset(ids[:6]), dataset.subset(ids[3:10])
    model = load_model(trained_run, device="cpu")
    out, common = tmp_path / "idx", {"features_dir": tiny_synth / "features", "progress": False}
    where = "faiss" if store == "faiss" else f"milvus:{tmp_path / 'u.db'}"
    model.build_index(first, out, store=where, **common)

    def die(*args):
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(build, "finish_index", die)
    with pytest.raises(KeyboardInterrupt):
        model.build_index(second, out, update=True, **common)
    monkeypatch.undo()
    cut = Index.load(out)
    assert sorted(cut.ids) == sorted(ids[:6]) and "pending" not in cut.meta
    query = dataset[ids[4]].captions[0]
    assert len(model.search(query, cut, k=3)) == 3
    model.build_index(second, out, update=True, **common)
    done, clean = Index.load(out), model.build_index(second, tmp_path / "clean", **common)
    assert sorted(done.ids) == sorted(clean.ids) == sorted(ids[3:10]) and "pending" not in done.meta
    np.testing.assert_allclose(done.embeddings_for(clean.ids), clean.embeddings_for(clean.ids), atol=1e-5)
