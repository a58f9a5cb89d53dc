"""`clip` expert: CLIP image-tower embeddings (open_clip) of one frame per step.

Each step's centre frame is decoded with its shorter side at the model's input size,
centre-cropped square and normalised with the model's mean/std (CLIP's own transform:
resize shortest side, centre crop), then `encode_image` gives the projected, not yet
normalised, embedding [D] (D = the model's embed_dim; 512 for ViT-B-32). One step per
second by default, as CLIP4Clip samples frames (§4.2: 1 frame per second).

`model` (an open_clip architecture or model-config JSON) and `pretrained` (tag, local
checkpoint file, or "" for seeded random weights) are recorded in the store, so
`index build` extracts new videos with the same tower (see `videotext.openclip`).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from videotext.data.experts.appearance import CentreFrameNetworkExpert


class CLIPExpert(CentreFrameNetworkExpert):
    """open_clip `encode_image` of the centre frame of each step."""

    name = "clip"
    version = "1"
    store_float32 = True  # zero-shot search scores these vectors directly: no float16 rounding

    def __init__(self, model: str = "ViT-B-32", pretrained: str = "", rate: float = 1.0, batch_size: int = 64,
                 device: str = "cpu"):
        from videotext import openclip

        openclip.architecture(str(model))  # fails early on an unknown name
        self.model_arg = openclip.canonical(model)
        self.pretrained = openclip.canonical(pretrained)
        self.rate = float(rate)
        self.batch_size = int(batch_size)
        self.device = device
        self._model = None
        self.preprocess = openclip.image_preprocess(self.model_arg, self.pretrained)  # {"size", "mean", "std"}
        self.frame_size = self.preprocess["size"]

    @property
    def model(self):
        if self._model is None:
            from videotext import openclip

            self._model = openclip.load_clip(self.model_arg, self.pretrained).visual.to(self.device).eval()
        return self._model

    @property
    def dim(self) -> int:  # type: ignore[override]
        return int(self.model.output_dim)

    def settings(self) -> dict[str, Any]:
        return {"model": self.model_arg, "pretrained": self.pretrained, **self.preprocess}

    def pixels(self, crops: np.ndarray):
        """uint8 RGB crops [N, S, S, 3] → normalised float pixels [N, 3, S, S] (CLIP's transform)."""
        import torch

        mean = torch.tensor(self.preprocess["mean"]).view(1, 3, 1, 1)
        std = torch.tensor(self.preprocess["std"]).view(1, 3, 1, 1)
        return (torch.from_numpy(np.ascontiguousarray(crops)).permute(0, 3, 1, 2).float() / 255.0 - mean) / std

    def embed(self, crops: np.ndarray) -> np.ndarray:
        """CLIP image embeddings [N, D] of uint8 RGB crops [N, S, S, 3]."""
        import torch

        model = self.model
        out = []
        with torch.inference_mode():
            for start in range(0, len(crops), self.batch_size):
                x = self.pixels(crops[start : start + self.batch_size]).to(self.device)  # [B, 3, S, S]
                out.append(model(x).float().cpu().numpy())
        return np.concatenate(out)
