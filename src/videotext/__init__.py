"""videotext: joint video-text embeddings and text-to-video search."""
__version__ = "0.1.0"
