"""The samples of a WebDataset tar stream, read in one pass (no seeking: a socket or a pipe will do)."""
from __future__ import annotations

import tarfile
from typing import Any, Iterator


def tar_samples(stream: Any) -> Iterator[dict[str, bytes]]:
    """Samples of a tar stream in order: {"__key__": key, extension: bytes, …}. A sample's files
    are consecutive members named KEY.EXTENSION."""
    sample: dict[str, Any] = {}
    with tarfile.open(fileobj=stream, mode="r|*") as archive:
        for member in archive:
            if not member.isreg():
                continue
            name = member.name.rsplit("/", 1)[-1]
            key, _, extension = name.partition(".")
            data = archive.extractfile(member).read()
            if sample and sample["__key__"] != key:
                yield sample
                sample = {}
            sample.setdefault("__key__", key)
            sample[extension] = data
    if sample:
        yield sample
