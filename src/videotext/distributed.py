"""Multi-process training, extraction and indexing under `torchrun`: the same commands and
configs move from one process to many GPUs without changing code.

`init_distributed()` reads torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT) and joins the process group: nccl on CUDA (device
cuda:LOCAL_RANK), gloo on CPU. In a single process (no WORLD_SIZE, or 1) every function
here is a no-op, so the same code runs on a laptop and on many nodes.

Global-batch negatives: a method holds a `LossGather`, handed to it when it is built
(`build_method(..., gather=LossGather(train.global_negatives))`, as open_clip hands
`ClipLoss` its rank, world size and `gather_with_grad`); its `loss(batch)` calls
`self.gather(text, video)` before its loss, so the loss sees the embeddings of every rank
(rows in rank order, i.e. the global batch). The gather's backward *sums* the gradient every rank computed
for a slice and hands it to the rank that owns it (torch.distributed.nn's all_gather,
as open_clip's `gather_features(gather_with_grad=True)`). Every rank computes the same
full-batch loss L, so rank r receives R·∂L/∂x_r; DDP then averages parameter
gradients over the R ranks, which gives exactly the one-process gradient ∂L/∂θ on the
full batch — no extra loss scaling (tests/test_distributed.py checks it to 1e-5).
`train.global_negatives: false` builds the method with `LossGather(False)` (each rank's
loss sees its own rows only; DDP averages the per-rank losses).
"""
from __future__ import annotations

import atexit
import datetime
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

# --- the process group -------------------------------------------------------------------
def env_world_size() -> int:
    """WORLD_SIZE set by torchrun (1 when not launched by it)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def env_rank() -> int:
    """RANK set by torchrun (0 when not launched by it): known before the process group exists."""
    return int(os.environ.get("RANK", "0") or 0)


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def world() -> int:
    return dist.get_world_size() if is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if is_initialized() else 0


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0") or 0) if is_initialized() else 0


def is_main() -> bool:
    return rank() == 0


def init_distributed(device: str = "auto", backend: str | None = None,
                     timeout_minutes: float = 60.0) -> torch.device | None:
    """Join torchrun's process group when WORLD_SIZE > 1 (idempotent); returns this rank's device.

    `device` "auto"/"cuda" → cuda:LOCAL_RANK with nccl when CUDA is there, else CPU with
    gloo; an explicit "cpu" always uses gloo. Returns None in a single process (the
    caller keeps its own device choice).
    """
    if env_world_size() <= 1:
        return None
    use_cuda = torch.cuda.is_available() and device not in ("cpu",) and not device.startswith("cpu")
    if not is_initialized():
        dist.init_process_group(backend=backend or ("nccl" if use_cuda else "gloo"),
                                timeout=datetime.timedelta(minutes=timeout_minutes))
        atexit.register(cleanup)
    if use_cuda:
        torch.cuda.set_device(local_rank())
        return torch.device("cuda", local_rank())
    return torch.device("cpu")


def barrier() -> None:
    if is_initialized():
        dist.barrier()


def cleanup() -> None:
    if is_initialized():
        dist.destroy_process_group()


def all_gather_object(obj: Any) -> list[Any]:
    """[obj of rank 0, obj of rank 1, …]; [obj] in a single process."""
    if not is_initialized():
        return [obj]
    out: list[Any] = [None] * world()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """`obj` of rank `src` on every rank."""
    if not is_initialized():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_reduce_mean(values: dict[str, float]) -> dict[str, float]:
    """Average scalar log values over the ranks (a no-op in one process)."""
    if not is_initialized() or not values:
        return values
    keys = sorted(values)
    device = torch.device("cuda", local_rank()) if dist.get_backend() == "nccl" else torch.device("cpu")
    tensor = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return {**values, **{k: float(v) / world() for k, v in zip(keys, tensor.tolist())}}


# --- sharding ----------------------------------------------------------------------------
def shard_slice(count: int, rank_: int | None = None, world_: int | None = None) -> slice:
    """Contiguous rows of a global batch of `count` for a rank: rank r takes
    [r·count/R, (r+1)·count/R), so the gathered rows are the global batch in order."""
    rank_, world_ = rank() if rank_ is None else rank_, world() if world_ is None else world_
    return slice(rank_ * count // world_, (rank_ + 1) * count // world_)


# --- gathering with gradients ----------------------------------------------------------
def gather_with_grad(x: Tensor, pad_value: float | int | bool = 0) -> Tensor:
    """Concatenate `x` [N_r, ...] of every rank along dim 0 (rank order); the backward
    sums each slice's gradient over the ranks and returns it to its owner.

    Ranks may hold different N_r and different sizes of the other dims (padded
    sequences): every dim beyond 0 is padded with `pad_value` to the largest rank's size.
    Integer / bool tensors (masks, token ids) are gathered without gradient.
    """
    if not is_initialized() or world() == 1:
        return x
    shape = torch.tensor(x.shape, dtype=torch.long, device=x.device)
    shapes = [torch.empty_like(shape) for _ in range(world())]
    dist.all_gather(shapes, shape)
    shapes_list = [s.tolist() for s in shapes]
    biggest = torch.stack(shapes).amax(0).tolist()
    padding: list[int] = []
    for dim in reversed(range(x.ndim)):  # F.pad takes the last dim first
        padding += [0, biggest[dim] - x.shape[dim]]
    kind = x.dtype
    work = x.to(torch.uint8) if kind == torch.bool else x
    if any(padding):
        work = F.pad(work, padding, value=pad_value if kind != torch.bool else int(pad_value))
    if work.is_floating_point() and work.requires_grad:
        parts = list(_AllGatherSumBackward.apply(work))
    else:
        parts = [torch.empty_like(work) for _ in range(world())]
        dist.all_gather(parts, work.contiguous())
    rows = [p[: s[0]] for p, s in zip(parts, shapes_list)]
    out = torch.cat(rows, 0)
    return out.to(torch.bool) if kind == torch.bool else out


class _AllGatherSumBackward(torch.autograd.Function):
    """all_gather whose backward sums each slice's gradient over the ranks and returns the
    owner its slice (the semantics of torch.distributed.nn's all_gather, without its
    deprecation); works on gloo and nccl."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> tuple[Tensor, ...]:
        parts = [torch.empty_like(x) for _ in range(world())]
        dist.all_gather(parts, x.contiguous())
        return tuple(parts)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor) -> Tensor:
        stacked = torch.stack(grads).contiguous()  # [R, ...]: this rank's gradient for every slice
        dist.all_reduce(stacked)  # Σ over ranks
        return stacked[rank()]


@dataclass(frozen=True)
class LossGather:
    """What a method's loss sees of the other ranks: their rows too (`global_negatives`, the
    default, `train.global_negatives`) or only this rank's. In one process it passes through."""

    global_negatives: bool = True

    @property
    def active(self) -> bool:
        """True when losses see the global batch (several ranks and global negatives on)."""
        return self.global_negatives and is_initialized() and world() > 1

    def __call__(self, *items: Any) -> Any:
        """The global-batch version of each item (a tensor, a dict of tensors, or None) when
        active; the items unchanged otherwise. One item → one value, else a tuple."""
        if self.active:
            items = tuple(_gather_item(item) for item in items)
        return items[0] if len(items) == 1 else items

    def positives(self, positives: Tensor | None) -> Tensor | None:
        """A batch's `positives` mask [B_text, B_video] → the global batch's (block-diagonal:
        positives of different ranks' rows never match). None stays None (the identity)."""
        if positives is None or not self.active:
            return positives
        masks = all_gather_object(positives.detach().cpu())
        return torch.block_diag(*[m.to(torch.uint8) for m in masks]).bool().to(positives.device)


def _gather_item(item: Any) -> Any:
    if item is None:
        return None
    if isinstance(item, dict):
        return {k: _gather_item(v) for k, v in item.items()}
    if isinstance(item, Tensor):
        return gather_with_grad(item, pad_value=False if item.dtype == torch.bool else 0)
    raise TypeError(f"LossGather: cannot gather a {type(item).__name__}")
