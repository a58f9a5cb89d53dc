"""CLIP's text tower (open_clip) as a text encoder: `text_model: openclip:ARCH@PRETRAINED`.

It pools like CLIP's own `encode_text` (the end-of-text token's state after the final
LayerNorm, CLIP §2.4) and applies CLIP's text projection, so its vectors live in the
joint image-text space: `hidden_size` is the projection's width (512 for ViT-B-32).
Captions are cut to `max_tokens` (CLIP4Clip §4.2: 32) and padded only to the longest in
the batch; the causal mask makes that equal to CLIP's 77-token encoding.
The model's `pooling` option does not apply (CLIP defines its pooling).

Architectures whose text tower is an HF transformers model (`xlm-roberta-base-ViT-B-32`, the
multilingual CLIP) pool and project as open_clip's `HFTextEncoder` does (its pooler, e.g. the
mean over tokens, then its projection), with its HF tokenizer: captions in any language the
tokenizer covers.

For open_clip's own text transformer, on the CPU without gradients (search, eval, index build, a
frozen tower), the blocks run with
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
        self.hf = openclip.is_hf_text(model)
        self.tokenizer = openclip.tokenizer(arch)
        tower = self.tower
        if self.hf:
            self.max_tokens = int(max_tokens)
            self.token_width = int(tower.transformer.config.hidden_size)
            self.hidden_size = int(tower.output_dim)
        else:
            self.max_tokens = min(int(max_tokens), int(tower.positional_embedding.shape[0]))
            projection = tower.text_projection
            width = int(tower.positional_embedding.shape[1])
            self.token_width = width
            self.hidden_size = int(projection.out_features if isinstance(projection, nn.Linear)
                                   else projection.shape[1] if projection is not None else width)
        self.freeze = freeze
        if freeze:
            self.freeze_model()

    @property
    def tower(self) -> nn.Module:
        """The text tower: open_clip's text transformer, or its `HFTextEncoder` (`self.hf`)."""
        return self.model.text if getattr(self, "hf", False) else openclip.text_tower(self.model)

    def tokenize(self, texts: list[str]) -> dict[str, Any]:
        """Strings → {"input_ids", "attention_mask" [B, L], "texts"}: CLIP BPE (or the tower's HF
        tokenizer) with start/end tokens, cut to `max_tokens` and padded to the longest caption of the batch."""
        ids = self.tokenizer(list(texts), context_length=self.max_tokens)  # [B, max_tokens]
        pad = int(self.tower.config.pad_token_id) if self.hf else 0
        mask = ids != pad
        width = max(1, int(mask.sum(1).max())) if len(texts) else 1
        return {"input_ids": ids[:, :width], "attention_mask": mask[:, :width].long(), "texts": list(texts)}

    def token_states(self, batch: dict[str, Any]) -> torch.Tensor:
        """States after the final LayerNorm [B, L, width] (before the pooling and projection)."""
        tower = self.tower
        ids = batch["input_ids"]  # [B, L]
        if self.hf:
            return tower.transformer(input_ids=ids, attention_mask=batch["attention_mask"]).last_hidden_state
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
        if self.hf:
            return self._hf_pool(states, attention_mask)
        from open_clip.transformer import text_global_pool

        tower = self.tower
        pool_type = getattr(tower, "text_pool_type", None) or getattr(tower, "pool_type", "argmax")
        pooled = text_global_pool(states, input_ids, pool_type, eos_token_id=getattr(tower, "text_eos_id", None))
        projection = tower.text_projection
        if projection is None:
            return pooled
        return projection(pooled) if isinstance(projection, nn.Linear) else pooled @ projection

    def _hf_pool(self, states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """open_clip `HFTextEncoder.forward`'s pooling and projection of the HF model's last states."""
        from open_clip.hf_model import ClsPooler
        from transformers.modeling_outputs import BaseModelOutput

        tower = self.tower
        pooler = tower.pooler
        head = getattr(tower.transformer, "pooler", None)  # the HF model's own pooler (cls_pooler only)
        if isinstance(pooler, ClsPooler) and pooler.use_pooler_output and head is not None:
            pooled = head(states)
        else:
            pooled = pooler(BaseModelOutput(last_hidden_state=states), attention_mask)
        return tower.proj(pooled)
