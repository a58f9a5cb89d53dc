"""`conse`: zero-shot text search through an ImageNet classifier (ConSE, Norouzi et al. 2014).

No training and no image-text weights: a frame's ImageNet class probabilities p(y|x) from
the `appearance` expert's own classifier head, and a sentence embedding s(y) of each class
name, give the frame a point in the sentence space, the convex combination of its T most
probable classes (§3, eq. 1: f(x) = 1/Z Σ_{t≤T} p(ŷ_t|x) s(ŷ_t), Z = Σ_{t≤T} p(ŷ_t|x);
T = 10, §5). Here s is the shipped MiniLM (mean-pooled, as it was trained) and a video's
probabilities are the mean of its frames' before the top T are taken. A caption is its MiniLM
embedding; the score is their cosine.

The video vector also carries what the frames look like: `visual`, the mean of its frames'
pooled features, each standardised by the ImageNet statistics of the last batch norm (the
expected value and spread of ReLU6(z), z ~ N(β, γ²), per channel: centres away what every
natural image shares) and L2-normalised; and `layout`, the mean of its frames' colour layouts
(the `layout` expert: where the colours lie, mirror-symmetric), which tells apart footage of
one look that the classifier's features hardly separate. Unit vectors are joined as
[√c·conse, √v·visual, √l·layout] (v = `visual_weight`, l = `layout_weight`, c = 1 − v − l),
captions as [text, 0, 0]: a text query's ranking is ConSE's (its score scaled by √c), and a
video or an image as the query (query by example, near-duplicates) scores
c·conse cosine + v·visual cosine + l·layout cosine.

A method built from its config takes the shipped network's ImageNet head and batch-norm
statistics (`weights`) and embeds the class names at its first use;
`videotext convert conse efficientnet-lite0 -o RUN` writes a run with all three in its
checkpoint. `loss` (the symmetric InfoNCE of Frozen in Time §3.2, σ = 0.05) fine-tunes the
head on captioned videos; the zero-shot run has no training.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from videotext.config import ConfigError
from videotext.data.experts.appearance import build_efficientnet_lite0
from videotext.losses import info_nce
from videotext.models.base import Method
from videotext.models.layers.pooling import masked_pool
from videotext.models.registry import register
from videotext.text.encoder import HFTextEncoder

CLASSES = 1000  # ImageNet-1k
FEATURE_DIM = 1280  # EfficientNet-Lite0's pooled features (the appearance expert)


@dataclass
class ConSEConfig:
    text_model: str = ""  # "" = the shipped all-MiniLM-L6-v2 (the sentence space s(y))
    expert: str = "appearance"  # the feature-store expert: ImageNet EfficientNet-Lite0 pooled features
    top_classes: int = 10  # T, ConSE §5 (T = 10 did best of 1, 10, 1000)
    # shares of a video-to-video score (the rest is ConSE's cosine); bench/duplicates.py
    visual_weight: float = 0.2  # the appearance features' cosine
    layout_weight: float = 0.7  # the colour layout's cosine
    layout_expert: str = "layout"  # "" = no layout part (appearance alone)
    # cut a plain, centred border (bars, a frame) before the appearance and layout experts read a
    # frame (videotext.data.borders): a padded or framed copy then matches its source
    trim_borders: bool = True
    max_text_tokens: int = 32
    input_size: int = 224  # the appearance expert's crop (the classifier's training resolution)
    weights: str = ""  # "" = the shipped EfficientNet-Lite0 state dict (head + batch-norm statistics)
    temperature: float = 0.05  # InfoNCE σ when fine-tuned (Frozen in Time §4.3)


def class_names() -> list[str]:
    """The 1000 ImageNet-1k class names in the classifier's order: each synset's first synonym
    (timm's descriptions: "tench, Tinca tinca" → "tench")."""
    from timm.data import ImageNetInfo

    info = ImageNetInfo()
    return [info.index_to_description(i).split(",")[0].strip() for i in range(info.num_classes())]


def relu6_moments(beta: np.ndarray, gamma: np.ndarray, points: int = 4001) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of ReLU6(z), z ~ N(beta, gamma²), per channel (numerical
    integration on a ±8σ grid): the pooled features' centre and spread on the data the batch
    norm was fitted to (ImageNet)."""
    sigma = np.maximum(np.abs(gamma), 1e-6)[:, None]  # [C, 1]
    grid = np.linspace(-8.0, 8.0, points)[None, :]  # [1, P] in standard units
    density = np.exp(-0.5 * grid**2)
    density /= density.sum(1, keepdims=True)
    values = np.clip(beta[:, None] + sigma * grid, 0.0, 6.0)  # [C, P]
    mean = (values * density).sum(1)
    std = np.sqrt(np.maximum(((values - mean[:, None]) ** 2 * density).sum(1), 0.0))
    return mean, np.maximum(std, 1e-3)


@register
class ConSE(Method):
    name = "conse"
    Config = ConSEConfig
    video_inputs = "features"

    def __init__(self, config: ConSEConfig, expert_dims: dict[str, int] | None = None):
        super().__init__(config)
        self.text_encoder = HFTextEncoder(config.text_model, pooling="mean", freeze=True,
                                          max_tokens=config.max_text_tokens)
        width = self.text_encoder.hidden_size
        self.classifier = nn.Linear(FEATURE_DIM, CLASSES)  # the network's own ImageNet head (converter fills it)
        self.register_buffer("class_embeddings", torch.zeros(CLASSES, width))  # s(y), unit rows [1000, E]
        self.register_buffer("feature_mean", torch.zeros(FEATURE_DIM))  # E[ReLU6(z)] per channel [1280]
        self.register_buffer("feature_std", torch.ones(FEATURE_DIM))  # its spread [1280]
        if config.visual_weight < 0 or config.layout_weight < 0 or config.visual_weight + config.layout_weight >= 1:
            raise ConfigError(f"conse: visual_weight {config.visual_weight} and layout_weight {config.layout_weight} "
                              "must be >= 0 and leave ConSE a share (sum < 1)")
        dims = expert_dims or {}
        self.layout_dim = int(dims.get(config.layout_expert, 3 * 8 * 8)) if config.layout_expert else 0
        self._take_network(config.weights)

    def _take_network(self, weights: str) -> None:
        """The ImageNet head and the last batch norm's statistics of EfficientNet-Lite0."""
        network = build_efficientnet_lite0(weights or None)
        norm = network.bn2  # the last batch norm, before ReLU6 and the global pool
        mean, std = relu6_moments(norm.bias.detach().double().numpy(), norm.weight.detach().double().numpy())
        with torch.no_grad():
            self.classifier.load_state_dict(network.get_classifier().state_dict())
            self.feature_mean.copy_(torch.from_numpy(mean).float())
            self.feature_std.copy_(torch.from_numpy(std).float())

    def class_points(self) -> torch.Tensor:
        """s(y) [1000, E]: the class names' unit MiniLM vectors, embedded once (a loaded run has them)."""
        if not bool(self.class_embeddings.any()):
            names = class_names()
            with torch.no_grad():
                self.class_embeddings.copy_(torch.cat([self.embed_sentences(names[i : i + 128])
                                                       for i in range(0, len(names), 128)]))
        return self.class_embeddings

    @property
    def text_dim(self) -> int:
        return int(self.class_embeddings.shape[1])

    # --- text --------------------------------------------------------------------------
    def prepare_text(self, texts: list[str]) -> dict[str, Any]:
        return self.text_encoder.tokenize(texts)

    def embed_sentences(self, texts: list[str]) -> torch.Tensor:
        """Unit MiniLM vectors [N, E] of strings (captions, class names)."""
        return F.normalize(self.text_encoder(self.prepare_text(texts)).float(), dim=-1)

    def encode_text(self, batch: dict[str, Any]) -> torch.Tensor:
        text = F.normalize(self.text_encoder(batch).float(), dim=-1)  # [B, E]
        return F.pad(text, (0, FEATURE_DIM + self.layout_dim))  # [B, E + 1280 + L]: zeros after the caption's part

    # --- video -------------------------------------------------------------------------
    def conse(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """ConSE vectors [B, E] of frame features [B, T, 1280] with valid mask [B, T] (eq. 1)."""
        probs = self.classifier(features).softmax(-1)  # [B, T, 1000]
        mean = masked_pool(probs, mask, "mean")  # [B, 1000]
        weights, classes = mean.topk(self.config.top_classes, dim=-1)  # [B, K]
        points = (weights.unsqueeze(-1) * self.class_points()[classes]).sum(1)  # [B, E]
        return F.normalize(points / weights.sum(-1, keepdim=True).clamp_min(1e-12), dim=-1)

    def visual(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Unit appearance vectors [B, 1280]: frames standardised by ImageNet's statistics, pooled."""
        frames = F.normalize((features - self.feature_mean) / self.feature_std, dim=-1)  # [B, T, 1280]
        return F.normalize(masked_pool(frames, mask, "mean"), dim=-1)

    @property
    def conse_weight(self) -> float:
        return 1.0 - self.config.visual_weight - (self.config.layout_weight if self.layout_dim else 0.0)

    def encode_video(self, batch: dict[str, Any]) -> torch.Tensor:
        expert = self.config.expert
        features, mask = batch["features"][expert].float(), batch["masks"][expert]  # [B, T, 1280], [B, T]
        parts = [self.conse_weight ** 0.5 * self.conse(features, mask),
                 self.config.visual_weight ** 0.5 * self.visual(features, mask)]
        if self.layout_dim:
            name = self.config.layout_expert
            cells = F.normalize(batch["features"][name].float(), dim=-1)  # [B, T', L]
            layout = F.normalize(masked_pool(cells, batch["masks"][name], "mean"), dim=-1)
            parts.append(self.config.layout_weight ** 0.5 * layout)
        return torch.cat(parts, dim=1)  # [B, E + 1280 + L], unit rows

    def loss(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        text, video = self.gather(self.encode_text(batch["text"]), self.encode_video(batch["video"]))
        sims = text @ video.T  # [B, B]: √c·cosine of caption and ConSE vector
        return info_nce(sims / self.conse_weight ** 0.5, temperature=self.config.temperature,
                        positives=self.gather.positives(batch.get("positives")), reduction="mean")

    def expert_options(self) -> dict[str, dict[str, Any]]:
        trim = {"trim_borders": True} if self.config.trim_borders else {}
        options = {self.config.expert: {"input_size": int(self.config.input_size), **trim}}
        if self.layout_dim:
            options[self.config.layout_expert] = {"grid": int(round((self.layout_dim / 3) ** 0.5)), **trim}
        return options
