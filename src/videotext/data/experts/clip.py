"""`clip` expert: CLIP image-tower embeddings (open_clip) of one frame per step.

Each step's centre frame is decoded at its native size (`frame_size = None`: no scaling
at decode time) and goes through open_clip's own eval transform, the one
`open_clip.create_model_and_transforms` returns (`videotext.openclip.FramePreprocess`:
shorter side to the input size, bicubic through PIL, centre crop, the model's mean / std);
then `encode_image` gives the projected, not yet normalised, embedding [D] (D = the model's
embed_dim; 512 for ViT-B-32), with the tower in bf16 weights where `--precision` (`auto`: by
the tower's measured cosine, `videotext.runtime.network_precision`) says so. So a zero-shot run scores a video as open_clip does on PIL
images of the same frames. One step per second by default, as CLIP4Clip samples frames
(§4.2: 1 frame per second).

The PIL resize and crop run in the decoding workers (`prepare`, uint8 crops [T, S, S, 3]);
ToTensor and Normalize run batched in the main process (`pixels`). Version 2 marks stores
made this way (version 1 stores were scaled at decode time and differ in pixels).

`model` (an open_clip architecture or model-config JSON) and `pretrained` (tag, local
checkpoint file, or "" for seeded random weights) are recorded in the store, so
`index build` extracts new videos with the same tower (see `videotext.openclip`).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from videotext import openclip
from videotext.data.experts.appearance import CentreFrameNetworkExpert
from videotext.runtime import full_precision, network_precision


class CLIPExpert(CentreFrameNetworkExpert):
    """open_clip `encode_image` of the centre frame of each step."""

    name = "clip"
    version = "2"  # 2: native decode + open_clip's transform (stores of version 1 are not mixed in)
    frame_size = None  # decode at the native size: open_clip's transform does the resizing
    store_float32 = True  # zero-shot search scores these vectors directly: no float16 rounding

    def __init__(self, model: str = "ViT-B-32", pretrained: str = "", rate: float = 1.0, batch_size: int = 64,
                 device: str = "cpu", precision: str = "fp32", max_steps: int | None = None):
        openclip.architecture(str(model))  # fails early on an unknown name
        self.model_arg = openclip.canonical(model)
        self.pretrained = openclip.canonical(pretrained)
        self.rate = float(rate)
        self.batch_size = int(batch_size)
        self.device = device
        self.precision = precision  # auto | fp32 | bf16 (videotext.runtime); not a feature setting
        self.max_steps = max_steps  # at most this many steps per video (CentreFrameNetworkExpert)
        self._model = None
        self._dtype = None  # set with the model
        # open_clip's preprocessing config {"size", "mean", "std", "interpolation", "resize_mode", "fill_color"}
        self.preprocess = openclip.image_preprocess(self.model_arg, self.pretrained)
        self.transform = openclip.FramePreprocess(self.preprocess)

    @property
    def model(self):
        if self._model is None:
            # bf16: the tower's weights are stored in bf16 and it runs in them, autocast off: 1.8x
            # fp32's speed on an AVX512-BF16 CPU, where autocast's per-op casts were slower than fp32
            self._dtype = network_precision(self.name, self.precision, self.device)  # bf16, or None: fp32
            visual = openclip.load_clip(self.model_arg, self.pretrained).visual.to(self.device).eval()
            self._model = visual.to(self._dtype) if self._dtype is not None else visual
        return self._model

    @property
    def dim(self) -> int:  # type: ignore[override]
        return int(self.model.output_dim)

    def settings(self) -> dict[str, Any]:
        return {"model": self.model_arg, "pretrained": self.pretrained, **self.preprocess, **self.capped()}

    def prepare(self, frames: np.ndarray, shown: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Native-size uint8 frames [T, H, W, 3] → open_clip's resized, centre-cropped uint8 crops [T, S, S, 3]."""
        return self.transform.images(frames)

    def pixels(self, crops: np.ndarray):
        """uint8 RGB crops [N, S, S, 3] → normalised float pixels [N, 3, S, S] (open_clip's ToTensor, Normalize)."""
        return self.transform.pixels(crops)

    def embed(self, crops: np.ndarray) -> np.ndarray:
        """CLIP image embeddings [N, D] of uint8 RGB crops [N, S, S, 3]."""
        import torch

        model = self.model
        out = []
        with torch.inference_mode(), full_precision(self.device):
            for start in range(0, len(crops), self.batch_size):
                x = self.pixels(crops[start : start + self.batch_size]).to(self.device)  # [B, 3, S, S]
                out.append(model(x.to(self._dtype or x.dtype)).float().cpu().numpy())
        return np.concatenate(out)
