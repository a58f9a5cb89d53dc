"""Text side: tokenizers and text encoders shared by every method."""
from videotext.text.encoder import HFTextEncoder, default_text_model_path

__all__ = ["HFTextEncoder", "default_text_model_path"]
