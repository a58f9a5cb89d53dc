"""A trained run shared on the hub and loaded by name, as timm and open_clip share models.

A real HTTP server on the loopback plays the Hugging Face Hub (tests/hub_server.py), downloads and
uploads alike (repository creation, branches, pre-upload, LFS, commits, as `huggingface_hub` sends
them). A `dual` run is trained in a fresh process on the tiny synthetic set with a text model named by
hub id (a tiny BERT the server holds), an index is built with it (which exports its query side beside
the checkpoint), and `videotext push` uploads it. Fresh processes then use `hf-hub:ORG/NAME` wherever
a run folder goes, and the tests check that:

- exactly the run's shared files went up (no logs, reports or training state; no path of this machine);
- loaded by name in a fresh process the run gives the same embeddings (1e-6) and, indexed and searched,
  the same hits as the local folder; the export it carries is what the hub index uses; a second use
  makes no request; `search --run`, `serve --run`, `eval --data` and `train --init-from` take the name;
- a push interrupted halfway (the process killed during the upload) leaves the revision as it was, and
  the same command then completes it; an existing name is replaced only with --revision (beside it)
  or --force;
- an unknown name, a private repository without a token, a revision that does not exist, a hub that
  answers with an HTML page, a download cut short and a card that does not match the weights each
  give one line naming the repository and what to do, and nothing half-downloaded is loaded.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import tiny_config_overrides
from tests.hub_server import LocalHub
from tests.models.test_mmt import tiny_bert
from videotext.weights import sha256_of

TEXT_MODEL = "videotext-tests/tiny-bert"
REPO = "videotext-tests/dual-tiny"
TOKEN = "hf_test_writer"
QUERIES = ["a red circle", "a blue square moves to the left", "then a circle"]
SHARED = {"README.md", "config.yaml", "extraction.json", "checkpoints/best/model.safetensors",
          "checkpoints/best/meta.json", "checkpoints/best/query_encoder/encoder.json",
          "checkpoints/best/query_encoder/model.onnx", "checkpoints/best/query_encoder/tokenizer.json"}

# What a run (a folder or a name) gives, in one process: its text and video embeddings at fp32, and the hits of
# an index folder for each query through the folder's exported query side and through the run's model.
GIVES = r"""
import json, sys
import numpy as np
import videotext
from videotext.data.features import FeatureStore
run, index, features, out, *queries = sys.argv[1:]
model = videotext.load_model(run, precision="fp32", device="cpu")
store = FeatureStore(features)
keys = sorted(store.keys("appearance"))[:4]
video = model.encode_video({e: np.stack([store.get(e, k)[0][:4] for k in keys]) for e in model.experts})
exported, by_model = videotext.open_index(index), videotext.open_index(index, run=run, precision="fp32")
hits = {name: [[(h.id, h.score) for h in opened.search(q, k=4, by="shown")] for q in queries]
        for name, opened in (("exported", exported), ("model", by_model))}
np.savez(out, text=model.encode_text(queries).numpy(), video=video.numpy(), stamp=np.array(model.weights_stamp()),
         hits=np.array(json.dumps(hits)))
"""


# The one resolver, its error printed as the command line prints it (exit 2), else the commit it resolved.
RESOLVE = r"""
import sys
from videotext.errors import VideoTextError
from videotext.hub_runs import resolve_run
try:
    print(resolve_run(sys.argv[1]).commit)
except VideoTextError as exc:
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(2)
"""


def cli(*args: str | Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    """The real `videotext` command in a fresh process."""
    return subprocess.run([sys.executable, "-m", "videotext", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=timeout)


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def one_error(done: subprocess.CompletedProcess) -> str:
    """The one `error:` line of a command that failed as a user's mistake (exit 2, no traceback)."""
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    return errors[0]


def hits(index: Path, query: str, env: dict[str, str], *extra: str) -> list[dict]:
    return json.loads(ok(cli("search", index, query, "--json", "-k", "4", "--by", "shown", *extra, env=env)))


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    server = LocalHub(tmp_path_factory.mktemp("hub")).start()
    server.add_repo(TEXT_MODEL, Path(tiny_bert(tmp_path_factory.mktemp("bert") / "tiny-bert")))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def shared(hub, tiny_synth, tmp_path_factory):
    """(the local run, its index, a folder of 4 videos, the pusher's environment): trained, indexed, pushed."""
    root = tmp_path_factory.mktemp("shared")
    env = {**hub.env(root / "pusher-cache"), "HF_TOKEN": TOKEN}
    sets = [x for item in tiny_config_overrides(tiny_synth) for x in ("--set", item)]
    ok(cli("train", "dual/synthetic", "-o", root / "run", *sets, "--set", f"model.text_model={TEXT_MODEL}",
           "--set", "train.threads=1", "--no-progress", "--no-report", env=env))
    videos = root / "videos"
    videos.mkdir()
    for path in sorted((tiny_synth / "videos").glob("*.mp4"))[:4]:
        shutil.copy(path, videos / path.name)
    ok(cli("index", "build", root / "run", videos, "-o", root / "local.index", env=env))
    assert (root / "run" / "checkpoints" / "best" / "query_encoder" / "model.onnx").is_file()  # exported beside it
    pushed = ok(cli("push", root / "run", REPO, env=env))
    assert f"load it with hf-hub:{REPO}" in pushed
    return root / "run", root / "local.index", videos, env


def reader(hub: LocalHub, tmp_path: Path) -> dict[str, str]:
    """A user's environment: this hub, an empty cache, no token."""
    return hub.env(tmp_path / "cache")


def test_only_the_shared_files_go_up_and_none_names_this_machine(hub, shared, tmp_path):
    run, _, _, _ = shared
    served = hub.repos[REPO]
    assert set(served) - {".gitattributes"} == SHARED  # no logs, reports, training state or tensorboard events
    for name, path in served.items():
        if name.endswith((".json", ".yaml", ".md")):
            text = path.read_text(encoding="utf-8")
            for local in (str(run.parent), str(Path.home()), socket.gethostname(), "/tmp"):
                assert local not in text, (name, local)
    assert served["checkpoints/best/model.safetensors"].read_bytes() == \
        (run / "checkpoints" / "best" / "model.safetensors").read_bytes()
    card = served["README.md"].read_text(encoding="utf-8")
    test = json.loads((run / "test_metrics.json").read_text())
    assert f"| t2v | {test['t2v']['R1']:.1f} | {test['t2v']['R5']:.1f} |" in card  # the run's own test figures
    assert "seed 0" in card and "library_name: videotext" in card and "license: other" in card  # tiny-bert: unknown
    assert f"| model.text_model | {TEXT_MODEL} | unknown |" in card
    assert "videotext synth data/synthetic --videos 32 --seed 0" in card and "--option appearance.input_size=64" in card


def test_loaded_by_name_it_embeds_and_finds_as_the_local_folder_and_asks_once(hub, shared, tmp_path, tiny_synth):
    run, local_index, videos, pusher = shared
    env = reader(hub, tmp_path)
    before = len(hub.requests)
    ok(cli("index", "build", f"hf-hub:{REPO}", videos, "-o", tmp_path / "hub.index", env=env))
    assert any(f"/{REPO}/resolve/" in path for _, path in hub.requests[before:])  # downloaded into the hub cache
    snapshot = next((tmp_path / "cache" / "hub").glob("models--*dual-tiny/snapshots/*"))
    assert sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file()) == sorted(SHARED)
    assert json.loads((tmp_path / "hub.index" / "index.json").read_text())["meta"]["run_dir"] == \
        f"hf-hub:{REPO}@{hub.commit(REPO)}"  # the index names exactly these files

    seen = len(hub.requests)
    for where, spec, index, environment in (("local", run, local_index, pusher),
                                            ("hub", f"hf-hub:{REPO}", tmp_path / "hub.index", env)):
        ok(subprocess.run([sys.executable, "-c", GIVES, str(spec), str(index), str(tiny_synth / "features"),
                           str(tmp_path / f"{where}.npz"), *QUERIES], env=environment, capture_output=True, text=True))
    assert hub.requests[seen:] == []  # the second use, and every one after it, reads the cache
    local, named = np.load(tmp_path / "local.npz"), np.load(tmp_path / "hub.npz")
    np.testing.assert_allclose(named["text"], local["text"], atol=1e-6)
    np.testing.assert_allclose(named["video"], local["video"], atol=1e-6)  # extracted as in training (extraction.json)
    export = json.loads((tmp_path / "hub.index" / "query_encoder" / "encoder.json").read_text())
    assert export["source"] == str(named["stamp"]) == f"sha256:{sha256_of(run / 'checkpoints/best/model.safetensors')}"
    local_hits, named_hits = json.loads(str(local["hits"])), json.loads(str(named["hits"]))
    for side in ("exported", "model"):  # the export the run carries (linked, not made again), and the model
        for expected, got in zip(local_hits[side], named_hits[side]):
            assert [i for i, _ in got] == [i for i, _ in expected]
            np.testing.assert_allclose([s for _, s in got], [s for _, s in expected], atol=1e-6)


def test_serve_eval_and_init_from_take_the_name(hub, shared, tmp_path, tiny_synth):
    run, local_index, videos, pusher = shared
    env = reader(hub, tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "videotext", "serve", local_index, "--port", str(port), "--run",
                               f"hf-hub:{REPO}", "--precision", "fp32"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        answer = None
        for _ in range(240):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/search?q=a+red+circle&k=4&by=shown") as response:
                    answer = json.loads(response.read())
                break
            except OSError:
                assert server.poll() is None, server.stderr.read()[-3000:]
                time.sleep(0.5)
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
    expected = hits(local_index, "a red circle", pusher)
    assert answer is not None and [h["id"] for h in answer["results"]] == [h["id"] for h in expected]

    data = tmp_path / "data.yaml"
    data.write_text(f"data:\n  manifest: {tiny_synth / 'manifest.json'}\n  features: {tiny_synth / 'features'}\n")
    ok(cli("eval", run, "--data", data, "-o", tmp_path / "local-eval", "--precision", "fp32", env=pusher))
    ok(cli("eval", f"hf-hub:{REPO}", "--data", data, "-o", tmp_path / "hub-eval", "--precision", "fp32", env=env))
    local = json.loads((tmp_path / "local-eval" / "eval_test_best_on_data.json").read_text())
    named = json.loads((tmp_path / "hub-eval" / "eval_test_best_on_data.json").read_text())
    assert named == local
    assert "--data" in one_error(cli("eval", f"hf-hub:{REPO}", env=env))  # no data travels with a shared run

    sets = [x for item in tiny_config_overrides(tiny_synth) for x in ("--set", item)]
    ok(cli("train", "dual/synthetic", "-o", tmp_path / "finetuned", *sets, "--set", f"model.text_model={TEXT_MODEL}",
           "--set", "train.epochs=1", "--init-from", f"hf-hub:{REPO}", "--no-progress", "--no-report", env=env))
    report = json.loads((tmp_path / "finetuned" / "init_report.json").read_text())
    assert report["init_from"] == f"hf-hub:{REPO}" and report["counts"]["new"] == 0 and report["counts"]["loaded"] > 0


def test_an_existing_name_is_replaced_only_with_force_and_a_revision_goes_beside_it(hub, shared, tmp_path):
    run, _, _, pusher = shared
    head = hub.commit(REPO)
    message = one_error(cli("push", run, REPO, env=pusher))
    assert REPO in message and "--revision" in message and "--force" in message
    assert hub.commit(REPO) == head

    ok(cli("push", run, REPO, "--revision", "v2", env=pusher))
    assert hub.commit(REPO) == head and hub.commit(REPO, "v2") != head
    done = subprocess.run([sys.executable, "-c", RESOLVE, f"hf-hub:{REPO}@v2"], env=reader(hub, tmp_path),
                          capture_output=True, text=True)
    assert ok(done).strip() == hub.commit(REPO, "v2")
    ok(cli("push", run, REPO, "--force", env=pusher))
    assert hub.commit(REPO) != head


def test_a_push_killed_halfway_leaves_the_revision_as_it_was_and_the_same_command_completes_it(hub, shared, tmp_path):
    run, _, _, pusher = shared
    repo = "videotext-tests/interrupted"
    hub.faults["/lfs-upload/*"] = "hang"  # the upload arrives, its answer never does: the process is killed then
    command = [sys.executable, "-m", "videotext", "push", str(run), repo]
    before = len(hub.requests)
    pushing = subprocess.Popen(command, env=pusher, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for _ in range(600):
            if ("PUT", f"/lfs-upload/{repo}/") in [(m, p.rpartition("/")[0] + "/") for m, p in hub.requests[before:]] \
                    or pushing.poll() is not None:
                break
            time.sleep(0.1)
        assert pushing.poll() is None, pushing.stderr.read()[-3000:]
        pushing.kill()
        pushing.wait(timeout=30)
    finally:
        hub.faults.clear()
        hub.release()
    assert set(hub.repos[repo]) == {".gitattributes"}  # created, but no commit of the run was made
    env = reader(hub, tmp_path)
    assert repo in one_error(cli("index", "build", f"hf-hub:{repo}", tmp_path, "-o", tmp_path / "x", env=env))
    ok(cli("push", run, repo, env=pusher))
    assert set(hub.repos[repo]) - {".gitattributes"} == SHARED


def test_bad_names_and_bad_answers_are_one_line_each_and_nothing_half_downloaded_is_loaded(hub, shared, tmp_path):
    run, _, videos, pusher = shared
    env = reader(hub, tmp_path)
    message = one_error(cli("index", "build", "hf-hub:videotext-tests/no-such-run", videos, "-o", tmp_path / "x",
                            env=env))
    assert "videotext-tests/no-such-run" in message and "HF_TOKEN" in message and "check the name" in message

    def resolve(spec: str, environment: dict[str, str] = env) -> subprocess.CompletedProcess:
        """The one resolver in a fresh process, its error printed as the command line prints it."""
        return subprocess.run([sys.executable, "-c", RESOLVE, spec], env=environment, capture_output=True, text=True,
                              timeout=600)

    ok(cli("push", run, "videotext-tests/private", "--private", env=pusher))
    message = one_error(resolve("hf-hub:videotext-tests/private"))
    assert "videotext-tests/private" in message and "private" in message and "HF_TOKEN" in message
    assert ok(resolve("hf-hub:videotext-tests/private", {**env, "HF_TOKEN": TOKEN})).strip() == \
        hub.commit("videotext-tests/private")  # with the token that created it
    message = one_error(resolve(f"hf-hub:{REPO}@no-such-branch"))
    assert REPO in message and "'no-such-branch'" in message and "main" in message
    assert "expected a run on the hub as hf-hub:ORG/NAME" in one_error(resolve("hf-hub:not a name"))

    hub.faults["/api/models/*"] = "html"  # a sign-in page, a proxy or a captive portal
    try:
        message = one_error(resolve(f"hf-hub:{REPO}", {**env, "HF_HOME": str(tmp_path / "html-cache")}))
    finally:
        hub.faults.clear()
    assert REPO in message and "HTML" in message and "HF_ENDPOINT" in message
    assert list((tmp_path / "html-cache").rglob("blobs/*")) == []

    weights = hub.repos[REPO]["checkpoints/best/model.safetensors"]
    hub.faults[f"/{REPO}/resolve/{hub.commit(REPO)}/checkpoints/best/model.safetensors"] = \
        f"truncate:{weights.stat().st_size // 2}"
    cut = {**env, "HF_HOME": str(tmp_path / "cut-cache")}
    try:
        message = one_error(resolve(f"hf-hub:{REPO}", cut))
    finally:
        hub.faults.clear()
    assert REPO in message and "cut short" in message and "again" in message
    assert ok(resolve(f"hf-hub:{REPO}", cut)).strip() == hub.commit(REPO)  # the next call completes it
    cached = next((tmp_path / "cut-cache" / "hub").glob("models--*/snapshots/*/checkpoints/best/model.safetensors"))
    assert cached.read_bytes() == weights.read_bytes()

    config = hub.repos[REPO]["config.yaml"].read_text().replace("embed_dim: 32", "embed_dim: 64")
    edit = subprocess.run([sys.executable, "-c", "import sys; from huggingface_hub import HfApi, CommitOperationAdd; "
                           "HfApi().create_commit(sys.argv[1], [CommitOperationAdd('config.yaml', sys.argv[2].encode())],"
                           " commit_message='edit')", REPO, config], env=pusher, capture_output=True, text=True)
    ok(edit)  # a config edited on the hub after the push no longer matches the weights or the card: refused
    message = one_error(resolve(f"hf-hub:{REPO}", {**env, "HF_HOME": str(tmp_path / "edited-cache")}))
    assert REPO in message and "does not match" in message and "--force" in message
