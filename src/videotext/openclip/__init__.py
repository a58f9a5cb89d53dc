"""open_clip models by name: the one place that builds CLIP-family towers (`open-clip-torch`), split
as open_clip splits itself:

- `factory`: what a name means (architecture, tag, its QuickGELU) and the model built from it
  (`load_clip`), through the hub cache (`videotext.hub.from_hub`);
- `tokenization`: a model's tokenizer, and its CLIP BPE as a `tokenizers.Tokenizer` for cold queries;
- `transform`: a model's image preprocessing (`image_preprocess`) and open_clip's eval transform
  over decoded video frames (`FramePreprocess`);
- `convert`: weights of other layouts (an HF `CLIPModel` folder in, a timm ViT state dict out);
- `packed_text`: the text transformer's CPU inference forward with pre-packed weights.

Everything is exported here as before the split (`from videotext import openclip; openclip.load_clip`).
"""
from __future__ import annotations

from videotext.openclip.convert import hf_clip_state, vit_timm_state
from videotext.openclip.factory import (
    RANDOM_SEED, SPEC_PREFIX, _open_clip, architecture, canonical, hf_text_name, hf_tokenizer_name, is_hf_text,
    is_spec, load_clip, needs_quick_gelu, parse_spec, pretrained_config, text_tower, weight_name,
)
from videotext.openclip.packed_text import PackedTextTransformer, _packing_available
from videotext.openclip.tokenization import CLIP_WORDS, fast_bpe_tokenizer, tokenizer
from videotext.openclip.transform import FramePreprocess, image_preprocess

__all__ = [
    "CLIP_WORDS", "FramePreprocess", "PackedTextTransformer", "RANDOM_SEED", "SPEC_PREFIX", "architecture",
    "canonical", "fast_bpe_tokenizer", "hf_clip_state", "hf_text_name", "hf_tokenizer_name", "image_preprocess",
    "is_hf_text", "is_spec", "load_clip", "needs_quick_gelu", "parse_spec", "pretrained_config", "text_tower",
    "tokenizer", "vit_timm_state", "weight_name",
    "_open_clip", "_packing_available",  # private, but tests build reference models through them
]
