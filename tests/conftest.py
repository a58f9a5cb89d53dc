"""Shared fixtures: the tiny synthetic dataset (32 videos) with extracted features.

Made once per test session in a temporary folder; small extractor settings keep it to
a few seconds on 2 CPU cores.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TINY_EXTRACT = {"appearance": {"input_size": 64}, "motion": {"flow_size": 64, "frames_per_step": 2}}


@pytest.fixture(scope="session")
def tiny_synth(tmp_path_factory) -> Path:
    """Folder with manifest.json, videos/ and features/ (appearance, motion, audio) of 32 videos."""
    from videotext.data.experts import extract_features
    from videotext.data.synthetic import synthesize

    root = tmp_path_factory.mktemp("tiny_synth")
    synthesize(root, num_videos=32, seed=0, progress=False)
    summary = extract_features(root / "manifest.json", ["appearance", "motion", "audio"], root / "features",
                               rate=1.0, progress=False, options=TINY_EXTRACT)
    assert summary["failed"] == 0, summary
    return root


@pytest.fixture(scope="session")
def conse_run(tmp_path_factory) -> Path:
    """The zero-shot ConSE run of the shipped weights (`videotext convert conse efficientnet-lite0`)."""
    from videotext.convert import convert

    return convert("conse", "efficientnet-lite0", tmp_path_factory.mktemp("conse") / "run")


def serve_in_thread(app, timeout: float = 30.0):
    """uvicorn serving `app` on a free loopback port in a daemon thread: (base URL, stop)."""
    import socket
    import threading
    import time

    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + timeout
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=10)

    return f"http://127.0.0.1:{port}", stop


def tiny_config_overrides(root: Path) -> list[str]:
    """Config overrides that train `dual` on the tiny fixture in seconds."""
    return [f"data.manifest={root / 'manifest.json'}", f"data.features={root / 'features'}",
            "model.freeze_text=true", "model.embed_dim=32", "train.batch_size=8", "train.epochs=3",
            "schedule.warmup_steps=2", "schedule.decay=linear", "train.log_every=1", "optim.lr=0.003"]


@pytest.fixture(scope="session")
def tiny_t5(tmp_path_factory) -> Path:
    """A tiny random T5 (word-level tokenizer, 11 words) saved with save_pretrained, as released."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

    path = tmp_path_factory.mktemp("tiny_t5")
    words = ["<pad>", "</s>", "<unk>", "a", "red", "circle", "moves", "left", "blue", "square", "spins"]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    tok.save_pretrained(path)
    torch.manual_seed(0)
    config = T5Config(vocab_size=len(words), d_model=16, d_kv=4, d_ff=32, num_layers=2, num_decoder_layers=1,
                      num_heads=2, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    T5ForConditionalGeneration(config).save_pretrained(path)  # a full seq2seq checkpoint, as released
    return path


def pytest_collection_modifyitems(config, items):
    """End-to-end tests (tests/integration: processes, servers, browsers, training) are `heavy`: the inner
    loop, `make test-quick`, leaves them out."""
    for item in items:
        if "integration" in item.path.parts:
            item.add_marker(pytest.mark.heavy)
