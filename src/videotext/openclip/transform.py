"""The image preprocessing of open_clip models (open_clip's `transform`): its config for a model
and weights (`image_preprocess`), and its eval transform over decoded video frames
(`FramePreprocess`). The tag's mean, std, interpolation and resize mode are applied."""
from __future__ import annotations

from typing import Any

import torch

from videotext.openclip.factory import _open_clip, architecture, load_clip, pretrained_config


def image_preprocess(name: str, pretrained: str = "") -> dict[str, Any]:
    """open_clip's preprocessing config of the image tower: {"size", "mean", "std", "interpolation",
    "resize_mode", "fill_color"}, resolved as `open_clip.create_model_and_transforms` does (its
    defaults, the pretrained tag's values, the tower's image size), without building the model
    where it can."""
    open_clip = _open_clip()
    from open_clip.transform import PreprocessCfg, merge_preprocess_dict

    arch = architecture(name)
    config = open_clip.get_model_config(arch) if ":" not in arch else None
    if config is None:  # hf-hub: / local-dir: schemas: the built model knows
        cfg = dict(getattr(load_clip(name, pretrained).visual, "preprocess_cfg", {}) or {})
    else:
        tag = pretrained_config(arch, pretrained)  # the tag's mean, std, interpolation, resize mode
        cfg = merge_preprocess_dict(PreprocessCfg(), tag)
        cfg["size"] = config["vision_cfg"].get("image_size", 224)
    cfg = merge_preprocess_dict(PreprocessCfg(), cfg)
    size = cfg["size"]
    if isinstance(size, (tuple, list)):
        size = int(size[0]) if size[0] == size[1] else [int(v) for v in size]
    return {"size": size if isinstance(size, list) else int(size),
            "mean": tuple(float(v) for v in cfg["mean"]), "std": tuple(float(v) for v in cfg["std"]),
            "interpolation": str(cfg["interpolation"]), "resize_mode": str(cfg["resize_mode"]),
            "fill_color": int(cfg["fill_color"])}


class FramePreprocess:
    """open_clip's eval transform (what `create_model_and_transforms` returns as its val
    transform) applied to decoded video frames, in three consecutive parts:

    - `resize`: its first step (shorter side to the input size, bicubic, through PIL);
    - `crop`: the PIL steps after it (centre crop, RGB mode);
    - `pixels`: its tensor steps over a batch (ToTensor's x / 255, then Normalize by the model's
      mean / std).

    Frames go in at their decoded size (never scaled beforehand), as PIL images would; between
    the parts they are uint8 arrays, which PIL images are too, so `pixels(crop(resize(frames)))`
    equals open_clip's transform of each frame's PIL image bit for bit. Splitting lets the
    decoding workers do the PIL work and hand over small uint8 crops, a frame cache hold the
    resized frames (a training crop is cut from them), and the main process normalise batches.
    """

    def __init__(self, config: dict[str, Any]):
        self.config = dict(config)
        self._parts = None

    def __getstate__(self) -> dict[str, Any]:  # workers rebuild the transform
        return {"config": self.config, "_parts": None}

    @property
    def transform(self):
        """open_clip's eval transform (a torchvision Compose over one PIL image)."""
        from open_clip.transform import PreprocessCfg, image_transform_v2

        return image_transform_v2(PreprocessCfg(**self.config), is_train=False)

    def parts(self) -> tuple[list, list, list]:
        """(resize steps, other PIL steps, tensor steps after ToTensor) of `transform`."""
        if self._parts is None:
            from torchvision.transforms import ToTensor

            steps = list(self.transform.transforms)
            at = next(i for i, step in enumerate(steps) if isinstance(step, ToTensor))  # open_clip's MaybeToTensor
            self._parts = (steps[:1], steps[1:at], steps[at + 1:])
        return self._parts

    @property
    def size(self) -> int:
        size = self.config["size"]
        return int(size if isinstance(size, int) else size[0])

    @staticmethod
    def _pil(frames: Any, steps: list) -> Any:
        import numpy as np
        from PIL import Image

        out = []
        for frame in frames:
            image = Image.fromarray(np.ascontiguousarray(frame))
            for step in steps:
                image = step(image)
            out.append(np.asarray(image))
        return np.stack(out) if out else np.zeros((0, 0, 0, 3), np.uint8)

    def resize(self, frames: Any) -> Any:
        """uint8 RGB frames [N, H, W, 3] (one size) → resized uint8 [N, h, w, 3] (open_clip's resize)."""
        return self._pil(frames, self.parts()[0])

    def crop(self, frames: Any) -> Any:
        """Resized uint8 frames [N, h, w, 3] → uint8 crops [N, S, S, 3] (open_clip's crop)."""
        return self._pil(frames, self.parts()[1])

    def images(self, frames: Any) -> Any:
        """uint8 RGB frames [N, H, W, 3] at their decoded size → uint8 crops [N, S, S, 3]."""
        resize, crop, _ = self.parts()
        return self._pil(frames, resize + crop)

    def pixels(self, crops: Any) -> torch.Tensor:
        """uint8 crops [N, S, S, 3] → float32 pixels [N, 3, S, S], normalised by open_clip's own steps."""
        import numpy as np

        x = torch.from_numpy(np.ascontiguousarray(crops)).permute(0, 3, 1, 2).float().div(255)  # ToTensor
        for step in self.parts()[2]:
            x = step(x)
        return x

    def __call__(self, frames: Any) -> torch.Tensor:
        """uint8 RGB frames [N, H, W, 3] → model input [N, 3, S, S]."""
        return self.pixels(self.images(frames))
