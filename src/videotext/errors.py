"""Errors a user can cause.

Every message names the file, key or value at fault and what was expected; the CLI
prints the message alone (no traceback) and exits with status 2.
"""
from __future__ import annotations

import difflib
from typing import Iterable


class VideoTextError(Exception):
    """Base class for errors caused by user input (files, configs, names)."""


class DataFormatError(VideoTextError, ValueError):
    """An annotation, manifest or feature file does not have the expected layout."""

    def __init__(self, path: object, key: str | None, problem: str):
        self.path, self.key, self.problem = str(path), key, problem
        where = f"{self.path}" + (f" [{key}]" if key else "")
        super().__init__(f"{where}: {problem}")


class VideoDecodeError(VideoTextError, RuntimeError):
    """A video file is missing, empty, truncated or not decodable."""

    def __init__(self, path: object, problem: str):
        self.path, self.problem = str(path), problem
        super().__init__(f"{self.path}: {problem}")


def closest(name: str, choices: Iterable[str], count: int = 5, cutoff: float = 0.5) -> list[str]:
    """The valid names nearest to a misspelt `name` (case-insensitive), best first: what an error about
    an unknown tag, model or size lists."""
    lower = {str(c).lower(): str(c) for c in choices}
    return [lower[c] for c in difflib.get_close_matches(str(name).lower(), list(lower), n=count, cutoff=cutoff)]
