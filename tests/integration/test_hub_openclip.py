"""open_clip weights by tag come from the hub through open_clip's own client, as on a user's machine.

A real HTTP server on the loopback plays the Hugging Face Hub (tests/hub_server.py) and serves
generated weights (random open_clip models from a fixed seed, fp16 safetensors) at the repo and
file name open_clip's pretrained table names for the tag (`hf_hub`: open_clip asks for
`open_clip_model.safetensors` first). Fresh CLI processes with `HF_ENDPOINT` pointing at it then run
`convert openclip` → `index build` → `search`, and the test checks that:

- the served weights are the ones in use: the run's text embedding equals open_clip's own model
  built from the served file (`ViT-B-32-quickgelu` for OpenAI's tag, whose weights need QuickGELU);
- a second `convert` (and the index build after it) makes no request;
- a multilingual model (`xlm-roberta-base-ViT-B-32`, its HF text tower and tokenizer served as a
  small generated `xlm-roberta-base` repo) answers a French query end to end;
- with the server gone, the CLI says so in one line (exit 2, no traceback).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("open_clip")
import open_clip  # noqa: E402

from tests.hub_server import LocalHub  # noqa: E402

VIT_REPO = "timm/vit_base_patch32_clip_224.openai"  # open_clip's hf_hub for ViT-B-32@openai
XLM_ARCH, XLM_TAG = "xlm-roberta-base-ViT-B-32", "laion5b_s13b_b90k"
XLM_REPO = "laion/CLIP-ViT-B-32-xlm-roberta-base-laion5B-s13B-b90k"
WEIGHTS_FILE = "open_clip_model.safetensors"  # the safetensors name open_clip tries before open_clip_pytorch_model.bin
SEED = 7

# The run's text embedding of one caption, as the library computes it (fp32), saved to a .npy file.
EMBED = r"""
import sys
import numpy as np
import videotext
model = videotext.load_model(sys.argv[1], precision="fp32")
np.save(sys.argv[2], model.encode_text([sys.argv[3]]).numpy())
"""


def cli(*args: str | Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The real `videotext` command in a fresh process."""
    return subprocess.run([sys.executable, "-m", "videotext", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=600)


def run_embedding(run: Path, caption: str, env: dict[str, str], out: Path) -> np.ndarray:
    done = subprocess.run([sys.executable, "-c", EMBED, str(run), str(out), caption], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return np.load(out)[0]


def save_fp16(model: torch.nn.Module, path: Path) -> Path:
    """The model's weights as an fp16 safetensors file (half the size; open_clip casts on load)."""
    from safetensors.torch import save_file

    save_file({k: v.detach().half().contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


def unit(vector: torch.Tensor) -> np.ndarray:
    return F.normalize(vector.float(), dim=-1)[0].numpy()


def pipeline(run: Path, videos: Path, query: str, env: dict[str, str]) -> list[dict]:
    """`index build RUN VIDEOS` then `search INDEX QUERY -k 3 --json`: the hits."""
    index = run.parent / f"{run.name}.index"
    built = cli("index", "build", run, videos, "-o", index, env=env)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    found = cli("search", index, query, "-k", "3", "--json", env=env)
    assert found.returncode == 0, found.stdout[-2000:] + found.stderr[-3000:]
    hits = json.loads(found.stdout[found.stdout.index("["):])
    assert [h["rank"] for h in hits] == [1, 2, 3]
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    return hits


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> Path:
    """A folder of three small synthetic mp4 videos."""
    from videotext.data.synthetic import synthesize

    root = tmp_path_factory.mktemp("videos")
    synthesize(root, num_videos=3, seed=0, workers=1, progress=False)
    return root / "videos"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    server = LocalHub(tmp_path_factory.mktemp("hub")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def vit_weights(tmp_path_factory) -> Path:
    """A random open_clip ViT-B-32 (seed 7) as an fp16 safetensors file."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = open_clip.create_model("ViT-B-32", pretrained=None)
    return save_fp16(model, tmp_path_factory.mktemp("vit") / WEIGHTS_FILE)


def test_openai_tag_comes_from_the_hub_once_with_quick_gelu(tmp_path, hub, videos, vit_weights):
    hub.add_repo(VIT_REPO, {WEIGHTS_FILE: vit_weights})
    env = hub.env(tmp_path / "cache")
    before = len(hub.requests)
    done = cli("convert", "openclip", "ViT-B-32", "--option", "pretrained=openai", "-o", tmp_path / "run", env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "QuickGELU mismatch" not in done.stderr  # the tag's activation is applied, not warned about
    fetched = [path for _, path in hub.requests[before:]]
    assert f"/{VIT_REPO}/resolve/main/{WEIGHTS_FILE}" in fetched

    seen = len(hub.requests)
    again = cli("convert", "openclip", "ViT-B-32", "--option", "pretrained=openai", "-o", tmp_path / "run2", env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    hits = pipeline(tmp_path / "run", videos, "a red circle", env)
    assert all(Path(h["path"]).parent == videos for h in hits)
    assert hub.requests[seen:] == []  # cached: neither the second convert nor the index build asked the hub

    ours = run_embedding(tmp_path / "run", "a red circle", env, tmp_path / "text.npy")
    tokens = open_clip.get_tokenizer("ViT-B-32")(["a red circle"])
    with torch.no_grad():
        quick = open_clip.create_model("ViT-B-32-quickgelu", pretrained=str(vit_weights)).eval()
        gelu = open_clip.create_model("ViT-B-32", pretrained=str(vit_weights)).eval()
        reference, plain = unit(quick.encode_text(tokens)), unit(gelu.encode_text(tokens))
    np.testing.assert_allclose(ours, reference, atol=1e-5)
    assert np.abs(ours - plain).max() > 1e-4  # GELU, what open_clip builds for the bare tag, is another network


def test_unreachable_hub_is_one_line(tmp_path):
    gone = LocalHub(tmp_path / "hub").start()
    env = gone.env(tmp_path / "cache")
    gone.stop()
    done = cli("convert", "openclip", "ViT-B-32", "--option", "pretrained=openai", "-o", tmp_path / "run", env=env)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr + done.stdout
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    line = errors[0]
    for part in ("open_clip ViT-B-32@openai", str(tmp_path / "cache"), "HF_ENDPOINT", "HF_HUB_OFFLINE"):
        assert part in line, line


# --- the multilingual CLIP: an HF text tower and tokenizer -----------------------------------------

WORDS = ["a", "red", "circle", "blue", "square", "un", "cercle", "rouge", "carré", "bleu", "moves", "left", "right"]


def xlm_roberta_folder(folder: Path) -> Path:
    """A small `xlm-roberta-base` look-alike: XLM-R config (width 32, 2 layers) and an XLM-R
    (Unigram) tokenizer over a few English and French words and single letters."""
    from transformers import XLMRobertaConfig, XLMRobertaTokenizer

    pieces = [f"▁{w}" for w in WORDS] + ["▁"] + sorted({c for w in WORDS for c in w})
    vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("<mask>", 0.0)]
    vocab += [(piece, -float(i) / 10 - (0.0 if piece.startswith("▁") else 5.0)) for i, piece in enumerate(pieces)]
    tokenizer = XLMRobertaTokenizer(vocab=vocab)
    tokenizer.save_pretrained(folder)
    config = XLMRobertaConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=64, max_position_embeddings=80, pad_token_id=1, bos_token_id=0,
                              eos_token_id=2)
    config.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def xlm_files(tmp_path_factory):
    """(the xlm-roberta-base folder, open_clip's reference model, the served checkpoint): the
    checkpoint is a random xlm-roberta-base-ViT-B-32 built on that folder (seed 7, fp16)."""
    root = tmp_path_factory.mktemp("xlm")
    text = xlm_roberta_folder(root / "xlm-roberta-base")
    config = json.loads((Path(open_clip.__file__).parent / "model_configs" / f"{XLM_ARCH}.json").read_text())
    config["text_cfg"].update(hf_model_name=str(text), hf_tokenizer_name=str(text))
    local = root / "local-xlm-roberta-base-ViT-B-32.json"  # the same architecture, text tower from the folder
    local.write_text(json.dumps(config))
    open_clip.add_model_config(local)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = open_clip.create_model(local.stem, pretrained=None, pretrained_text=False)
    weights = save_fp16(model, root / WEIGHTS_FILE)
    return text, local.stem, weights


def test_multilingual_tag_with_an_hf_text_tower_end_to_end(tmp_path, hub, videos, xlm_files):
    text, local_arch, weights = xlm_files
    hub.add_repo("xlm-roberta-base", text)
    hub.add_repo(XLM_REPO, {WEIGHTS_FILE: weights})
    env = hub.env(tmp_path / "cache")
    before = len(hub.requests)
    done = cli("convert", "openclip", XLM_ARCH, "--option", f"pretrained={XLM_TAG}", "-o", tmp_path / "run", env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    fetched = [path for _, path in hub.requests[before:]]
    assert f"/{XLM_REPO}/resolve/main/{WEIGHTS_FILE}" in fetched
    assert any(re.fullmatch(r"/xlm-roberta-base/resolve/[^/]+/config\.json", p) for p in fetched)  # the HF text tower
    assert any(re.fullmatch(r"/xlm-roberta-base/resolve/[^/]+/tokenizer.*", p) for p in fetched), fetched  # its tokenizer

    seen = len(hub.requests)
    again = cli("convert", "openclip", XLM_ARCH, "--option", f"pretrained={XLM_TAG}", "-o", tmp_path / "run2", env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert hub.requests[seen:] == []

    hits = pipeline(tmp_path / "run", videos, "un cercle rouge", env)
    assert all(Path(h["path"]).parent == videos for h in hits)
    ours = run_embedding(tmp_path / "run", "un cercle rouge", env, tmp_path / "text.npy")
    with torch.no_grad():
        reference_model = open_clip.create_model(local_arch, pretrained=str(weights), pretrained_text=False).eval()
        tokens = open_clip.get_tokenizer(local_arch)(["un cercle rouge"])
        reference = unit(reference_model.encode_text(tokens))
    assert (tokens[0] != 3).all()  # the French words are in the served vocabulary (3 is <unk>)
    np.testing.assert_allclose(ours, reference, atol=1e-5)
