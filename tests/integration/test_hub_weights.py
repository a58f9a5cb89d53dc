"""Weights named in configs come from the hub through their own library's client, as on a user's machine.

A real HTTP server on the loopback plays the Hugging Face Hub (tests/hub_server.py) and serves small
generated weights under the names the packaged paper configs use. Fresh processes with
`HF_ENDPOINT` pointing at it and no offline setting then resolve every weight of every packaged
config: a text model by hub id (transformers), T5 (Support-set's encoder and decoder), `timm:NAME`
(Frozen's spatial init, timm) and a Whisper size by name (faster-whisper). Each check compares what
the process loaded with the served file, and a second process must make no request at all. With the
server gone, the CLI says so in one line.
"""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.hub_server import LocalHub
from tests.models.test_mmt import tiny_bert

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "src" / "videotext" / "configs"
VIT = "vit_base_patch16_224.orig_in21k"  # Frozen §3.2: ViT-B/16 trained on ImageNet-21k
WHISPER_REPO = "Systran/faster-whisper-small.en"  # what faster-whisper resolves the size "small.en" to

# Resolve every weight the packaged configs name, print {name: digest of a tensor of the loaded model}.
RESOLVE = r"""
import hashlib, json, sys
import torch
from videotext.config import load_config
from videotext.text import pretrained, text_model_source
from videotext.text.encoder import load_text_model
from videotext.models.frozen import vit_weights

def digest(tensor):
    return hashlib.sha256(tensor.detach().float().contiguous().numpy().tobytes()).hexdigest()

out = {}
for path in sys.argv[1:]:
    model = load_config(path).model
    for key in ("text_model", "decoder_model"):
        name = str(model.get(key, "") or "")
        label = name + ("#decoder" if key == "decoder_model" else "")
        if not name or name.startswith("bundled:") or name.startswith("openclip:") or label in out:
            continue
        if key == "decoder_model":
            from transformers import T5ForConditionalGeneration
            loaded = pretrained(name, T5ForConditionalGeneration.from_pretrained, what="caption decoder")
            out[label] = digest(loaded.get_decoder().embed_tokens.weight)
        else:
            loaded = pretrained(name, load_text_model)
            out[name] = digest(loaded.get_input_embeddings().weight)
    vit = str(model.get("vit_checkpoint", "") or "")
    if vit.startswith("timm:") and vit not in out:
        out[vit] = digest(vit_weights(vit)["pos_embed"])
print("RESULT " + json.dumps(out))
"""

WHISPER = r"""
import json, sys
import numpy as np
from videotext.data.speech.recognize import WhisperEngine
audio = np.load(sys.argv[1])
engine = WhisperEngine(sys.argv[2])
print("RESULT " + json.dumps([line.text for line in engine.recognize(audio)]))
"""


def digest(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.detach().float().contiguous().numpy().tobytes()).hexdigest()


def paper_configs() -> list[Path]:
    """Packaged configs of real datasets (the synthetic ones use the bundled models by design)."""
    return sorted(p for p in CONFIGS.glob("*/*.yaml") if "synthetic" not in p.stem and "tuxpaint" not in p.stem)


def named_weights() -> dict[str, set[str]]:
    """Every weight name the paper configs give, by config key."""
    from videotext.config import load_config

    names: dict[str, set[str]] = {}
    for path in paper_configs():
        model = load_config(path).model
        for key in ("text_model", "decoder_model", "vit_checkpoint", "clip_model", "pretrained"):
            value = str(model.get(key, "") or "")
            if value:
                names.setdefault(key, set()).add(value)
    return names


def run(script: str, args: list[str], env: dict[str, str], timeout: float = 600) -> tuple[object, str]:
    proc = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), proc.stderr


def tiny_distilbert(folder: Path) -> Path:
    from transformers import BertTokenizerFast, DistilBertConfig, DistilBertModel

    bert = Path(tiny_bert(folder))
    tokenizer = BertTokenizerFast.from_pretrained(bert)
    for file in ("model.safetensors", "config.json"):
        (bert / file).unlink()
    torch.manual_seed(1)
    DistilBertModel(DistilBertConfig(vocab_size=len(tokenizer), dim=16, n_layers=1, n_heads=2, hidden_dim=32,
                                     max_position_embeddings=40)).save_pretrained(bert)
    return bert


def timm_vit_file(folder: Path) -> Path:
    """A random ViT-B/16 in timm's layout, saved as timm's hub repos hold it (model.safetensors, fp16)."""
    import timm
    from safetensors.torch import save_file

    torch.manual_seed(2)
    model = timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=0)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.half().contiguous() for k, v in model.state_dict().items()}, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps({"architecture": "vit_base_patch16_224", "num_classes": 0}))
    return folder


@pytest.fixture(scope="module")
def hub(tmp_path_factory, tiny_t5):
    """The local hub, serving the paper configs' names with small generated weights."""
    root = tmp_path_factory.mktemp("hub")
    server = LocalHub(root / "served").start()
    server.add_repo("google-bert/bert-base-cased", Path(tiny_bert(root / "bert-cased")))
    server.add_repo("google-bert/bert-base-uncased", Path(tiny_bert(root / "bert-uncased")))
    server.add_repo("distilbert/distilbert-base-uncased", tiny_distilbert(root / "distilbert"))
    server.add_repo("google-t5/t5-base", tiny_t5)
    server.add_repo(f"timm/{VIT}", timm_vit_file(root / "vit"))
    yield server
    server.stop()


def test_paper_configs_name_the_papers_weights_and_no_file_to_fetch_by_hand():
    names = named_weights()
    assert names["text_model"] == {"google-bert/bert-base-cased", "google-bert/bert-base-uncased",
                                   "distilbert/distilbert-base-uncased", "google-t5/t5-base"}
    assert names["decoder_model"] == {"google-t5/t5-base"}
    assert names["vit_checkpoint"] == {f"timm:{VIT}"}
    assert names["clip_model"] == {"ViT-B-32"} and names["pretrained"] == {"openai"}
    for key, values in names.items():  # a hub id, a scheme or a tag: never a path the user must fill
        for value in values:
            assert not Path(value).suffix in (".pth", ".pt", ".bin", ".safetensors"), (key, value)
            assert re.fullmatch(r"(timm:)?[\w.-]+(/[\w.-]+)?", value), (key, value)


def test_every_packaged_weight_resolves_through_the_hub_once(hub, tmp_path):
    env = hub.env(tmp_path / "cache")
    configs = [str(p) for p in paper_configs()]
    before = len(hub.requests)
    loaded, _ = run(RESOLVE, configs, env)
    assert len(hub.requests) > before  # downloaded from the served repos
    served = hub.repos
    from safetensors.torch import load_file

    def served_tensor(repo: str, key: str) -> torch.Tensor:
        return load_file(served[repo]["model.safetensors"])[key]

    assert loaded == {
        "google-bert/bert-base-cased": digest(served_tensor("google-bert/bert-base-cased",
                                                            "embeddings.word_embeddings.weight")),
        "google-bert/bert-base-uncased": digest(served_tensor("google-bert/bert-base-uncased",
                                                              "embeddings.word_embeddings.weight")),
        "distilbert/distilbert-base-uncased": digest(served_tensor("distilbert/distilbert-base-uncased",
                                                                   "embeddings.word_embeddings.weight")),
        "google-t5/t5-base": digest(served_tensor("google-t5/t5-base", "shared.weight")),
        "google-t5/t5-base#decoder": digest(served_tensor("google-t5/t5-base", "shared.weight")),
        f"timm:{VIT}": digest(served_tensor(f"timm/{VIT}", "pos_embed")),
    }
    cache = tmp_path / "cache" / "hub"
    assert (cache / "models--google-bert--bert-base-cased").is_dir()  # the standard hub cache layout
    assert (cache / f"models--timm--{VIT}").is_dir()

    requests = len(hub.requests)
    again, _ = run(RESOLVE, configs, env)  # a second run reads the cache and asks nothing
    assert again == loaded
    assert hub.requests[requests:] == []


@pytest.mark.assets
def test_whisper_size_by_name_downloads_once_and_is_the_served_model(hub, tmp_path):
    from tests.speech_media import ESPEAK, espeak

    if ESPEAK is None:
        pytest.skip("espeak-ng missing")
    from faster_whisper import WhisperModel

    from videotext.data.speech.recognize import WhisperEngine
    from videotext.weights import verified_folder

    served = verified_folder("whisper_tiny_en")  # real CTranslate2 files, served under another size's repo
    hub.add_repo(WHISPER_REPO, {name: served / name for name in
                                ("config.json", "model.bin", "tokenizer.json", "vocabulary.txt")})
    speech, rate = espeak("The quick brown fox jumps over the lazy dog.")
    import scipy.signal

    audio = scipy.signal.resample_poly(np.concatenate([np.zeros(rate // 2, np.float32), speech]), 16000, rate)
    audio_file = tmp_path / "speech.npy"
    np.save(audio_file, audio.astype(np.float32))
    env = hub.env(tmp_path / "cache")
    before = len(hub.requests)
    lines, _ = run(WHISPER, [str(audio_file), "small.en"], env)
    assert any(path.startswith(f"/api/models/{WHISPER_REPO}") or f"/{WHISPER_REPO}/resolve/" in path
               for _, path in hub.requests[before:])
    reference = WhisperEngine.__new__(WhisperEngine)  # the library's own model built from the served files
    reference._model, reference.language, reference.beam_size = WhisperModel(str(served), compute_type="int8"), "en", 5
    assert lines == [line.text for line in reference.recognize(audio.astype(np.float32))]
    # real speech recognized: tiny.en at int8 hears "quick brown fox" on Intel's kernels and "quick round-fark" on
    # AMD's, so the check is the share of the sentence's words, not one word
    heard = set(re.findall(r"[a-z]+", " ".join(lines).lower()))
    assert len(heard & {"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog"}) >= 4, lines
    requests = len(hub.requests)
    again, _ = run(WHISPER, [str(audio_file), "small.en"], env)
    assert again == lines and hub.requests[requests:] == []


def test_text_model_by_hub_id_in_a_cli_run_and_one_line_when_the_hub_is_gone(hub, tmp_path):
    """`convert conse --option text_model=ID` builds a run whose text model is downloaded by id; with the
    server stopped and an empty cache the same command prints one line and exits 2."""
    env = hub.env(tmp_path / "cache")
    cmd = [sys.executable, "-m", "videotext", "convert", "conse", "efficientnet-lite0",
           "--option", "text_model=google-bert/bert-base-uncased", "-o", str(tmp_path / "run")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert any("/google-bert/bert-base-uncased/resolve/" in path for _, path in hub.requests)

    gone = LocalHub(tmp_path / "gone").start()
    url = gone.url
    gone.stop()  # nothing listens there now
    env = {**hub.env(tmp_path / "empty-cache"), "HF_ENDPOINT": url}
    cmd[-1] = str(tmp_path / "run2")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    message = errors[0]
    for part in ("'google-bert/bert-base-uncased'", str(tmp_path / "empty-cache" / "hub"), "HF_ENDPOINT",
                 "HF_HUB_OFFLINE=1", url):
        assert part in message, (part, message)

    env["HF_HUB_OFFLINE"] = "1"  # cache only, nothing cached: the same one line, saying offline was asked for
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "HF_HUB_OFFLINE=1 is set" in proc.stderr


def resolve_text_model(name: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """A fresh process loading text model `name` as a method does (`videotext.text.pretrained`)."""
    code = ("from videotext.text import pretrained\nfrom videotext.text.encoder import load_text_model\n"
            "from videotext.errors import VideoTextError\nimport sys\n"
            f"try:\n    pretrained({name!r}, load_text_model)\nexcept VideoTextError as exc:\n"
            "    print('error:', exc, file=sys.stderr); sys.exit(2)\nprint('RESULT ok')\n")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_a_page_served_instead_of_weights_is_refused_and_nothing_cached(hub, tmp_path):
    """A captive portal or a sign-in page answers the resolve URLs with HTML (no hub headers)."""
    repo = "google-bert/bert-base-cased"
    hub.faults[f"/{repo}/resolve/*"] = "html"
    try:
        proc = resolve_text_model(repo, hub.env(tmp_path / "cache"))
    finally:
        hub.faults.clear()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and repo in errors[0], proc.stderr[-2000:]
    blobs = list((tmp_path / "cache" / "hub").glob("models--*/blobs/*"))
    assert blobs == []  # nothing of the page was kept as a weight


def test_a_truncated_download_is_never_loaded_and_the_next_run_completes_it(hub, tmp_path):
    repo = "google-bert/bert-base-uncased"
    weights = hub.repos[repo]["model.safetensors"]
    hub.faults[f"/{repo}/resolve/{hub.commit(repo)}/model.safetensors"] = f"truncate:{weights.stat().st_size // 2}"
    env = hub.env(tmp_path / "cache")
    try:
        proc = resolve_text_model(repo, env)
    finally:
        hub.faults.clear()
    assert proc.returncode == 2 and "RESULT ok" not in proc.stdout  # half a file is not a model
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cut short" in errors[0] and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    proc = resolve_text_model(repo, env)
    assert proc.returncode == 0 and "RESULT ok" in proc.stdout, proc.stderr[-2000:]
    cached = next((tmp_path / "cache" / "hub").glob(f"models--google-bert--bert-base-uncased/snapshots/*/model.safetensors"))
    assert cached.read_bytes() == weights.read_bytes()
