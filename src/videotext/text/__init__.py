"""Text side: tokenizers and text encoders shared by every method."""
from videotext.openclip import is_spec
from videotext.text.encoder import (BUNDLED, CachedTextEncoder, HFTextEncoder, default_text_model_path, pretrained,
                                    text_config, text_model_source)
from videotext.text.openclip import OpenCLIPTextEncoder


def build_text_encoder(text_model: str = "", pooling: str = "cls", freeze: bool = False,
                       max_tokens: int = 30) -> CachedTextEncoder:
    """The text encoder a method's `text_model` names: `openclip:ARCH[@PRETRAINED]` is CLIP's text
    tower with its projection (`videotext.text.openclip`); anything else an HF folder or name
    (`bundled:minilm` or "" = the bundled MiniLM)."""
    if is_spec(text_model):
        return OpenCLIPTextEncoder(text_model, freeze, max_tokens)
    return HFTextEncoder(text_model, pooling, freeze, max_tokens)


__all__ = ["BUNDLED", "CachedTextEncoder", "HFTextEncoder", "build_text_encoder", "default_text_model_path", "pretrained",
           "text_config", "text_model_source"]
