"""Text side: tokenizers and text encoders shared by every method."""
from videotext.openclip import is_spec
from videotext.text.encoder import CachedTextEncoder, HFTextEncoder, default_text_model_path
from videotext.text.openclip import OpenCLIPTextEncoder


def build_text_encoder(text_model: str = "", pooling: str = "cls", freeze: bool = False,
                       max_tokens: int = 30) -> CachedTextEncoder:
    """The text encoder a method's `text_model` names: `openclip:ARCH[@PRETRAINED]` is CLIP's text
    tower with its projection (`videotext.text.openclip`); anything else an HF folder or name
    ("" = the bundled MiniLM)."""
    if is_spec(text_model):
        return OpenCLIPTextEncoder(text_model, freeze, max_tokens)
    return HFTextEncoder(text_model, pooling, freeze, max_tokens)


__all__ = ["CachedTextEncoder", "HFTextEncoder", "build_text_encoder", "default_text_model_path"]
