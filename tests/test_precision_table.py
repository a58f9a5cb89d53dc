"""The `--precision auto` table (src/videotext/configs/precision.json, bench/precision.py).

1. Its decisions follow the one rule (bf16 only where the measured min cosine to fp32 is at
   least `BF16_MIN_COSINE`), `network_precision` applies them, and every network the project
   runs (the experts with a network, every registered method) is in it.
2. On this machine, the cheap networks run under `auto` at the table's precision and their
   outputs stay within `BF16_MIN_COSINE` of fp32 on real inputs: `clip` on 8 real frames,
   `appearance` on 16, `dual`'s text tower on 32 Tux Paint captions.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from videotext import runtime

ASSETS = Path(os.environ.get("VIDEOTEXT_ASSETS", Path.home() / ".cache/videotext/debian"))
CLIPS = ("vtest.avi", "Megamind.avi", "tree.avi")  # Debian opencv-doc


def min_cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=1).min())


def real_frames(count: int, size: int | None) -> list[np.ndarray]:
    """`count` frames spread evenly over the Debian clips: uint8 [T_i, H_i, W_i, 3] per clip."""
    from videotext.data.video import probe, read_frames, uniform_times

    paths = [ASSETS / "opencv" / "videos" / name for name in CLIPS]
    share = [count // len(paths) + (i < count % len(paths)) for i in range(len(paths))]
    return [read_frames(p, uniform_times(probe(p).duration, n), size) for p, n in zip(paths, share)]


def real_captions(count: int) -> list[str]:
    """`count` distinct Tux Paint captions spread over the sorted stamp files."""
    from videotext.data.readers.tuxpaint import stamp_caption

    stamps = ASSETS / "tuxpaint" / "stamps"
    captions = list(dict.fromkeys(c for c in map(stamp_caption, sorted(stamps.rglob("*.txt"))) if c))
    return [captions[i] for i in np.linspace(0, len(captions) - 1, count).round().astype(int)]


@pytest.fixture
def real_inputs():
    absent = [str(p) for p in [*(ASSETS / "opencv" / "videos" / n for n in CLIPS), ASSETS / "tuxpaint" / "stamps"]
              if not p.exists()]
    if absent:
        pytest.skip(f"{', '.join(absent)} absent: run `make assets` (scripts/fetch_debian_assets.sh)")
    if not runtime.cpu_supports_bf16():
        pytest.skip("this CPU has no native bf16 (AVX512-BF16 / AMX): `auto` runs every network in fp32")


# --- 1. the table ---------------------------------------------------------------------------
def test_the_table_decides_by_the_rule_and_covers_every_network(monkeypatch):
    from videotext.data.experts import expert_class, expert_names
    from videotext.data.experts.appearance import CentreFrameNetworkExpert
    from videotext.models import METHODS
    from videotext.models.registry import method_class

    table = json.loads(runtime.PRECISION_TABLE.read_text(encoding="utf-8"))
    assert table["min_cosine"] == runtime.BF16_MIN_COSINE and table["rule"]
    networks = table["networks"]
    assert runtime.measured_precision() == networks
    with_network = {n for n in expert_names() if issubclass(expert_class(n), CentreFrameNetworkExpert)}
    assert {"clip", "appearance"} <= with_network
    retrieval = {m for m in METHODS if method_class(m).task == "retrieval"}  # a grounding head has no towers to compare
    assert retrieval and with_network | retrieval <= set(networks), sorted(with_network | retrieval - set(networks))
    for name in set(METHODS) - retrieval - set(networks):  # never measured: `auto` keeps it at fp32
        assert runtime.network_precision(name, "auto") is None, name
    for name, record in networks.items():
        assert record["machines"] and record["inputs"] and record["speedup"] > 0, name
        assert 0 < record["min_cosine"] <= record["mean_cosine"] <= 1 + 1e-9, name
        assert runtime.bf16_holds(name) == (record["min_cosine"] >= runtime.BF16_MIN_COSINE), name
    monkeypatch.setattr(runtime, "cpu_supports_bf16", lambda *args: True)  # a CPU with native bf16
    for name in networks:
        expected = torch.bfloat16 if runtime.bf16_holds(name) else None
        assert runtime.network_precision(name, "auto") is expected, name
        assert runtime.network_precision(name, "bf16") is torch.bfloat16 and runtime.network_precision(name, "fp32") is None
    assert runtime.network_precision("never-measured", "auto") is None


# --- 2. this machine ------------------------------------------------------------------------
def auto_dtype(name: str) -> torch.dtype | None:
    return torch.bfloat16 if runtime.bf16_holds(name) else None


@pytest.mark.heavy
@pytest.mark.parametrize("name, count", [("clip", 8), ("appearance", 16)])
def test_auto_experts_stay_within_the_rule_here(real_inputs, name, count):
    """`auto` runs the expert at the table's precision, within BF16_MIN_COSINE of fp32 on real frames."""
    from videotext.data.experts.appearance import AppearanceExpert
    from videotext.data.experts.clip import CLIPExpert

    make = {"clip": lambda p: CLIPExpert(model="ViT-B-32", pretrained="", precision=p),  # seeded random weights
            "appearance": lambda p: AppearanceExpert(precision=p)}[name]
    fp32, auto = make("fp32"), make("auto")
    crops = np.concatenate([fp32.prepare(f, None, None) for f in real_frames(count, fp32.frame_size)])
    assert len(crops) == count
    reference, measured = (torch.from_numpy(e.embed(crops)) for e in (fp32, auto))
    assert auto._dtype is auto_dtype(name)
    assert min_cosine(reference, measured) >= runtime.BF16_MIN_COSINE


def test_auto_dual_text_tower_stays_within_the_rule_here(real_inputs, tmp_path):
    """`load_model(..., precision="auto")` of a packaged dual config (real MiniLM) on 32 real captions."""
    from videotext.config import load_config, save_config
    from videotext.data.experts import get_expert
    from videotext.inference import load_model
    from videotext.models import build_method
    from videotext.train.checkpoint import save_checkpoint, seed_everything

    config = load_config("dual/synthetic")
    dims = {e: int(get_expert(e).dim) for e in config.data.experts}
    seed_everything(0)
    method = build_method("dual", config.model, expert_dims=dims).eval()
    config.model = method.config_dict()
    save_config(config, tmp_path / "config.yaml")
    save_checkpoint(tmp_path / "checkpoints" / "best", method, {"method": "dual", "model": config.model,
                                                                  "expert_dims": dims})
    fp32, auto = (load_model(tmp_path, device="cpu", precision=p) for p in ("fp32", "auto"))
    assert fp32.dtype is None and auto.dtype is auto_dtype("dual")
    captions = real_captions(32)
    assert min_cosine(fp32.encode_text(captions), auto.encode_text(captions)) >= runtime.BF16_MIN_COSINE
