"""The resolver of runs shared by name (`videotext.hub_runs`), without a hub: the name's grammar, and the
checks a downloaded snapshot passes before it is loaded (every file the card lists there whole, the card,
config and checkpoint naming one model, the bytes the card recorded). Downloads, caching and the hub's
answers are tested against the local hub in tests/integration/test_hub_runs.py."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.apps.test_push import make_run
from videotext.errors import VideoTextError
from videotext.hub_runs import IncompleteRun, _checked, is_hub_run, parse_spec, resolve_run


@pytest.mark.parametrize("spec, expected", [
    ("hf-hub:org/name", ("org/name", None)),
    ("hf-hub:my-org/run.v1@main", ("my-org/run.v1", "main")),
    ("hf-hub:org/name@0123456789abcdef0123456789abcdef01234567", ("org/name", "0123456789abcdef0123456789abcdef01234567")),
    ("hf-hub:org/name@refs/pr/3", ("org/name", "refs/pr/3")),
])
def test_names(spec, expected):
    assert is_hub_run(spec) and is_hub_run(Path(spec)) and parse_spec(spec) == expected


@pytest.mark.parametrize("spec", ["hf-hub:", "hf-hub:name", "hf-hub:org/name@", "hf-hub:org/na me", "hf-hub:/name",
                                  "hf-hub:org/name@a@b"])
def test_malformed_names_are_one_line(spec):
    with pytest.raises(VideoTextError, match="expected a run on the hub as hf-hub:ORG/NAME or hf-hub:ORG/NAME@REVISION"):
        parse_spec(spec)
    assert not is_hub_run("runs/demo") and not is_hub_run(None)


@pytest.fixture(scope="module")
def snapshot(tiny_synth, tmp_path_factory) -> Path:
    """A run staged as `videotext push` uploads it: what a download leaves in the hub cache."""
    from videotext.apps.model_card import read_records
    from videotext.apps.push import stage

    root = tmp_path_factory.mktemp("snapshot")
    folder = root / "0123456789abcdef0123456789abcdef01234567"
    stage(read_records(make_run(root, tiny_synth)), "videotext-tests/dual", folder)
    return folder


def copy_of(snapshot: Path, tmp_path: Path) -> Path:
    folder = tmp_path / snapshot.name
    shutil.copytree(snapshot, folder)
    return folder


def test_a_whole_snapshot_is_a_run_named_by_its_commit_and_digest(snapshot):
    from videotext.hub_runs import sha256_file

    run = _checked("hf-hub:videotext-tests/dual", "videotext-tests/dual", None, snapshot)
    assert run.commit == snapshot.name and run.revision == "main" and run.folder == snapshot
    assert run.weights_sha256 == sha256_file(snapshot / "checkpoints/best/model.safetensors")
    assert run.pinned == f"hf-hub:videotext-tests/dual@{snapshot.name}"
    assert run.weights_stamp == f"sha256:{run.weights_sha256}"


@pytest.mark.parametrize("damage, says", [
    (lambda f: (f / "checkpoints/best/meta.json").unlink(), "checkpoints/best/meta.json is missing"),
    (lambda f: (f / "README.md").unlink(), "it has no model card"),
    (lambda f: (f / "extraction.json").write_text("{}"), "extraction.json has 2 bytes, the model card says"),
    (lambda f: (f / "config.yaml").write_text((f / "config.yaml").read_text().replace("embed_dim: 32", "embed_dim: 33")),
     "the config does not match the weights"),
    (lambda f: (f / "config.yaml").write_text((f / "config.yaml").read_text().replace("epochs: 3", "epochs: 4")),
     "the model card does not match the config"),
    (lambda f: (f / "config.yaml").write_text((f / "config.yaml").read_text().replace("method: dual", "method: mmt")),
     "the model card does not match the weights: method 'dual' in the model card, 'mmt' in config.yaml, 'dual' in "
     "checkpoints/best/meta.json"),
    (lambda f: _flip_a_byte(f / "checkpoints/best/model.safetensors"), "the model card does not match the weights: "
                                                                        "checkpoints/best/model.safetensors has sha256"),
])
def test_a_snapshot_that_is_not_whole_or_does_not_match_is_refused(snapshot, tmp_path, damage, says):
    folder = copy_of(snapshot, tmp_path)
    damage(folder)
    if "bytes, the model card" not in says and "is missing" not in says and "no model card" not in says:
        _keep_sizes(snapshot, folder)
    with pytest.raises(IncompleteRun, match=says.replace("(", r"\(").replace(")", r"\)")):
        _checked("hf-hub:videotext-tests/dual", "videotext-tests/dual", None, folder)


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def _keep_sizes(snapshot: Path, folder: Path) -> None:
    """Pad or cut an edited text file back to the size the card lists, so the check after the sizes decides."""
    front = yaml.safe_load((snapshot / "README.md").read_text().split("---\n")[1])
    for name, size in front["videotext"]["files"].items():
        path = folder / name
        data = path.read_bytes()
        if len(data) != size:
            path.write_bytes((data + b" " * size)[:size] if len(data) < size else data[:size])


def test_offline_with_nothing_cached_is_one_line_and_asks_nothing(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(VideoTextError) as error:
        resolve_run("hf-hub:videotext-tests/not-cached")
    message = str(error.value)
    assert message.startswith("run 'hf-hub:videotext-tests/not-cached': HF_HUB_OFFLINE=1 is set and it is not in the "
                              "cache") and "Unset HF_HUB_OFFLINE" in message and "\n" not in message


def test_the_card_front_matter_is_read_back(snapshot):
    from videotext.hub_runs import read_card

    front, body = read_card(snapshot / "README.md")
    assert front["videotext"]["format"] == "videotext-run" and body.lstrip().startswith("# videotext-tests/dual")
    assert json.loads(json.dumps(front["videotext"]["files"])) == {
        p: (snapshot / p).stat().st_size for p in ("config.yaml", "extraction.json", "checkpoints/best/model.safetensors",
                                                   "checkpoints/best/meta.json")}
