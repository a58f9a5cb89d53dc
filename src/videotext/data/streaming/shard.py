"""Reading one shard whole, through faults: a shard that cannot be opened, breaks off (dropped
connection, HTTP 5xx, a read slower than the timeout), or ends short of the samples its index
lists, is read again after a backoff of 1, 2, 4 … s, continuing after the samples already taken;
after its retries, `ShardFailed`."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from videotext.data.streaming.tar import tar_samples
from videotext.data.streaming.urls import open_url
from videotext.errors import VideoTextError


class ShardFailed(VideoTextError):
    """A shard could not be read whole after its retries."""



@dataclass
class Retry:
    """How a shard is read again: attempts, first backoff (doubled each time), read timeout."""

    retries: int = 3
    backoff: float = 1.0
    timeout: float = 60.0


def read_shard(url: str, needs: Sequence[str], expected: int | None = None, retry: Retry = Retry(),
               sleep: Callable[[float], None] = time.sleep) -> Iterator[tuple[int, dict[str, bytes]]]:
    """(offset, sample) of every complete sample of one shard. A break, a sample missing one of
    `needs` (cut off), or fewer than `expected` samples is retried from where it stopped; after
    `retry.retries` retries, ShardFailed."""
    taken, last_error = 0, None
    for attempt in range(retry.retries + 1):
        if attempt:
            sleep(retry.backoff * 2 ** (attempt - 1))
        try:
            stream, close = open_url(url, retry.timeout)
        except Exception as exc:  # noqa: BLE001 - the network's and the file system's errors alike
            last_error = exc
            continue
        try:
            seen = 0
            for sample in tar_samples(stream):
                if any(extension not in sample for extension in needs):
                    raise OSError(f"sample {sample['__key__']} is missing {[e for e in needs if e not in sample]}")
                if seen >= taken:
                    yield seen, sample
                    taken += 1
                seen += 1
            if expected is not None and seen < expected:
                raise OSError(f"ended after {seen} of its {expected} samples")
            return
        except GeneratorExit:
            raise
        except Exception as exc:  # noqa: BLE001 - truncated tar, dropped connection, read timeout
            last_error = exc
        finally:
            close()
    raise ShardFailed(f"{url}: {type(last_error).__name__}: {last_error} (after {retry.retries} retries)")
