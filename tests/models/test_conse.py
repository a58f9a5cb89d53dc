"""ConSE with the shipped weights: real image-caption pairs answer text queries far above
random features, a text query ranks exactly as ConSE's cosine, and the run searches real clips.

200 Debian Tux Paint stamps spread over the sorted ids (`make assets`), each picture against its
own caption; bench/conse.py measures all 785.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

STAMPS = Path(os.environ.get("VIDEOTEXT_ASSETS", Path.home() / ".cache/videotext/debian")) / "tuxpaint" / "stamps"
PAIRS = 200


@pytest.fixture(scope="module")
def run(conse_run):
    return conse_run


@pytest.fixture(scope="module")
def stamps(tmp_path_factory):
    """(dataset, appearance features [N, 1, 1280]) of PAIRS stamps."""
    import sys

    if not STAMPS.is_dir():
        pytest.skip(f"{STAMPS} is absent: run `make assets`")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench.conse import stamp_features
    from videotext.data.readers import read_dataset

    dataset = read_dataset("tuxpaint", STAMPS)
    ids = [v.id for v in dataset]
    dataset = dataset.subset([ids[i] for i in np.linspace(0, len(ids) - 1, PAIRS).round().astype(int)])
    return dataset, stamp_features(dataset, tmp_path_factory.mktemp("stamps") / "features")


@pytest.mark.heavy
def test_tuxpaint_pairs_far_above_random_features(run, stamps):
    from bench.conse import tuxpaint_scores
    from videotext.inference import load_model

    model = load_model(run, precision="fp32")
    dataset, real = stamps
    rng = np.random.default_rng(0)
    random = np.maximum(rng.normal(real.mean((0, 1)), real.std((0, 1)), real.shape), 0).astype(np.float32)
    conse, control = tuxpaint_scores(model, dataset, real), tuxpaint_scores(model, dataset, random)
    # measured: R@1 text→image 17.0, image→text 16.0, R@10 31.5 (ConSE); 1.0, 2.0, 6.0 (random; chance 0.5)
    assert conse["t2v"]["R1"] >= 12 and conse["v2t"]["R1"] >= 10, conse
    assert control["t2v"]["R1"] <= 3 and control["v2t"]["R1"] <= 3, control
    assert conse["t2v"]["R10"] >= 3 * control["t2v"]["R10"]


def test_text_ranking_is_conse_cosine_and_examples_mix_the_parts(run, stamps):
    from videotext.inference import load_model

    model = load_model(run, precision="fp32")
    method = model.method
    dataset, real = stamps
    features = torch.from_numpy(real[:8])  # [8, 1, 1280]
    layout = F.normalize(torch.randn(8, 1, method.layout_dim, generator=torch.Generator().manual_seed(0)), dim=-1)
    video = model.encode_video({"appearance": features, "layout": layout})  # [8, 384 + 1280 + 192]
    text = model.encode_text([v.captions[0] for v in list(dataset)[:8]])
    mask = torch.ones(8, 1, dtype=torch.bool)
    conse = method.conse(features, mask)  # eq. 1 alone
    captions = F.normalize(method.text_encoder(method.prepare_text([v.captions[0] for v in list(dataset)[:8]])), dim=-1)
    torch.testing.assert_close(model.similarity(text, video), method.conse_weight ** 0.5 * captions @ conse.T,
                               atol=1e-5, rtol=0)
    torch.testing.assert_close(video.norm(dim=1), torch.ones(8), atol=1e-5, rtol=0)
    w = method.config
    expected = (method.conse_weight * conse @ conse.T + w.visual_weight * method.visual(features, mask)
                @ method.visual(features, mask).T + w.layout_weight * layout[:, 0] @ layout[:, 0].T)
    torch.testing.assert_close(video @ video.T, expected, atol=1e-5, rtol=0)
    # ConSE's point is the probability-weighted mean of the top T class-name embeddings
    probs = method.classifier(features[0, 0]).softmax(-1)
    top, classes = probs.topk(method.config.top_classes)
    point = F.normalize((top[:, None] * method.class_embeddings[classes]).sum(0), dim=0)
    torch.testing.assert_close(conse[0], point, atol=1e-5, rtol=0)


def test_class_names_and_batch_norm_moments():
    from videotext.models.conse import class_names, relu6_moments

    names = class_names()
    assert len(names) == 1000 and names[0] == "tench" and names[1] == "goldfish" and names[999] == "toilet tissue"
    rng = np.random.default_rng(0)
    beta, gamma = np.array([-1.0, 0.5, 3.0, 7.0]), np.array([1.0, 2.0, 0.5, 1.0])
    samples = np.clip(beta + gamma * rng.standard_normal((400_000, 4)), 0, 6)
    mean, std = relu6_moments(beta, gamma)
    np.testing.assert_allclose(mean, samples.mean(0), atol=5e-3)
    np.testing.assert_allclose(std, samples.std(0), atol=5e-3)
