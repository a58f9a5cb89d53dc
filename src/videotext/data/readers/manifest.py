"""videotext's own JSON manifest (``format: videotext-manifest``), as written by `VideoTextDataset.save`.

The manifest is the schema itself, so this reader only delegates to
`VideoTextDataset.load`; it is registered so that every source, official or ours,
is named the same way (``read_dataset("manifest", path)``).
"""
from __future__ import annotations

from pathlib import Path

from videotext.data.schema import VideoTextDataset


def read_manifest(path: str | Path) -> VideoTextDataset:
    """Load a manifest; relative media paths resolve against its folder."""
    return VideoTextDataset.load(path)
