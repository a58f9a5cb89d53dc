"""CLIP's text tower (open_clip) as a text encoder: `text_model: openclip:ARCH@PRETRAINED`.

It pools like CLIP's own `encode_text` (the end-of-text token's state after the final
LayerNorm, CLIP §2.4) and applies CLIP's text projection, so its vectors live in the
joint image-text space: `hidden_size` is the projection's width (512 for ViT-B-32).
Captions are cut to `max_tokens` (CLIP4Clip §4.2: 32) and padded only to the longest in
the batch; the causal mask makes that equal to CLIP's 77-token encoding.
The model's `pooling` option does not apply (CLIP defines its pooling).

On the CPU without gradients (search, eval, index build, a frozen tower) the blocks run with
pre-packed weights (`videotext.openclip.PackedTextTransformer`): the same states, bit for bit
under bf16 autocast and to fp32 round-off otherwise, in about half the time of a single query.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from videotext import openclip
from videotext.text.encoder import CachedTextEncoder


class OpenCLIPTextEncoder(CachedTextEncoder):
    """open_clip text transformer + projection → [B, embed_dim]; `model` keeps CLIP's `logit_scale`."""

    packed_inference = True  # CPU inference without gradients runs `openclip.PackedTextTransformer`

    def __init__(self, spec: str, freeze: bool = False, max_tokens: int = 32):
        super().__init__()
        self.path = spec
        arch, pretrained = openclip.parse_spec(spec)
        model = openclip.load_clip(arch, pretrained)
        model.visual = nn.Identity()  # the image tower is the `clip` expert's (or the method's) business
        self.model = model
        openclip.text_tower(model)  # fails early for towers we do not support
        self.tokenizer = openclip.tokenizer(arch)
        context = int(self.tower.positional_embedding.shape[0])
        self.max_tokens = min(int(max_tokens), context)
        projection = self.tower.text_projection
        width = int(self.tower.positional_embedding.shape[1])
        self.token_width = width
        self.hidden_size = int(projection.out_features if isinstance(projection, nn.Linear)
                               else projection.shape[1] if projection is not None else width)
        self.freeze = freeze
        if freeze:
            self.freeze_model()

    @property
    def tower(self) -> nn.Module:
        return openclip.text_tower(self.model)

    def tokenize(self, texts: list[str]) -> dict[str, Any]:
        """Strings → {"input_ids", "attention_mask" [B, L], "texts"}: CLIP BPE with start/end tokens,
        cut to `max_tokens` and padded (0) to the longest caption of the batch."""
        ids = self.tokenizer(list(texts), context_length=self.max_tokens)  # [B, max_tokens]
        mask = ids != 0
        width = max(1, int(mask.sum(1).max())) if len(texts) else 1
        return {"input_ids": ids[:, :width], "attention_mask": mask[:, :width].long(), "texts": list(texts)}

    def token_states(self, batch: dict[str, Any]) -> torch.Tensor:
        """States after the final LayerNorm [B, L, width] (before the projection)."""
        tower = self.tower
        ids = batch["input_ids"]  # [B, L]
        length = ids.shape[1]
        cast = tower.transformer.get_cast_dtype()
        x = tower.token_embedding(ids).to(cast) + tower.positional_embedding[:length].to(cast)
        packed = self._packed_transformer() if self.packed_inference else None
        if packed is not None and packed.usable(ids):
            x = packed(x)  # inference on the CPU: pre-packed weights, same states
        else:
            x = tower.transformer(x, attn_mask=tower.attn_mask[:length, :length])  # causal mask
        return tower.ln_final(x)

    def _packed_transformer(self) -> openclip.PackedTextTransformer | None:
        """The tower's inference forward with pre-packed weights (`videotext.openclip`), made once."""
        packed = getattr(self, "_packed", None)
        if packed is None or packed.tower is not self.tower:
            packed = self._packed = openclip.PackedTextTransformer(self.tower)
        return packed if packed.ok else None

    def pool(self, states: torch.Tensor, attention_mask: torch.Tensor, input_ids: Any = None) -> torch.Tensor:
        """CLIP's pooling (end-of-text token) and projection → [B, hidden_size]."""
        from open_clip.transformer import text_global_pool

        tower = self.tower
        pool_type = getattr(tower, "text_pool_type", None) or getattr(tower, "pool_type", "argmax")
        pooled = text_global_pool(states, input_ids, pool_type, eos_token_id=getattr(tower, "text_eos_id", None))
        projection = tower.text_projection
        if projection is None:
            return pooled
        return projection(pooled) if isinstance(projection, nn.Linear) else pooled @ projection
