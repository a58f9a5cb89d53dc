"""A contrastive step over a large batch in the memory of a small one (`train.chunk`).

Gradient Cache (Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under Memory
Limited Setup", §3): the loss of a dual encoder depends on the batch's rows only through their
embeddings, so the step splits in two passes.

1. The towers embed the batch `chunk` rows at a time without a graph (only the embeddings stay:
   [B, D] each); the random state before each chunk is kept.
2. The loss runs once over the whole batch on those embeddings, made leaves that require a
   gradient, and its backward leaves ∂L/∂embedding on them (and the loss's own weights, such
   as a learnt temperature, get their gradients directly).
3. Each chunk is embedded again, with a graph and with the random state it had in pass 1 (the
   same dropout masks), and back-propagated with its cached ∂L/∂embedding: the parameter
   gradients add up to those of the full-batch step, while the activations of one chunk at a
   time are alive (§3.2: "sub-batch gradient accumulation").

The towers run twice (about 1.3-1.5× a step's compute); memory is the activations of one
chunk plus the batch's embeddings. The random generator ends where pass 1 left it, where a
full-batch step would have left it. Dropout masks: on a CPU torch draws a tensor's masks in
row order, so one dropout layer per tower (dual) draws the same masks chunk by chunk as over
the batch; deeper towers draw layer by layer within each chunk (other masks than the
full-batch step, the same in both passes). Batch norms inside a tower would see chunk
statistics: the methods that chunk have none.

A method takes part by returning its two towers' inputs from `chunk_inputs(batch)` and its loss
from embeddings in `loss_from_embeddings(text, video, batch)` (`Method.loss` is that loss on
`encode_text` / `encode_video`). Under torchrun the loss gathers the ranks' embeddings as in the
plain step (its backward hands each rank R·∂L/∂x of its rows), and `average_gradients` then
averages the parameter gradients over the ranks, as DDP would: the one-process gradient.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
from torch import Tensor

from videotext import distributed as dist
from videotext.embedding import Embedding


def batch_rows(inputs: Any) -> int:
    """Rows of a tower's inputs: the first dimension of its first tensor (or length of its first list)."""
    if isinstance(inputs, Tensor):
        return int(inputs.shape[0])
    if isinstance(inputs, dict):
        for value in inputs.values():
            rows = batch_rows(value)
            if rows >= 0:
                return rows
        return -1
    if isinstance(inputs, (list, tuple)):
        return len(inputs)
    return -1


def slice_rows(inputs: Any, start: int, stop: int, rows: int) -> Any:
    """Rows [start, stop) of every tensor and list whose first dimension is the batch's `rows`
    (nested dicts followed); other values are kept whole."""
    if isinstance(inputs, Tensor):
        return inputs[start:stop] if inputs.ndim and inputs.shape[0] == rows else inputs
    if isinstance(inputs, dict):
        return {key: slice_rows(value, start, stop, rows) for key, value in inputs.items()}
    if isinstance(inputs, (list, tuple)) and len(inputs) == rows:
        return inputs[start:stop]
    return inputs


def _tensors(embedding: Embedding) -> list[Tensor]:
    """The floating-point tensors of an embedding (a tensor or a dict of tensors), in a fixed order."""
    values = list(embedding.values()) if isinstance(embedding, dict) else [embedding]
    return [v for v in values if isinstance(v, Tensor) and v.is_floating_point()]


def _concat(parts: list[Embedding]) -> Embedding:
    if isinstance(parts[0], dict):
        return {key: torch.cat([p[key] for p in parts]) for key in parts[0]}
    return torch.cat(parts)


def _as_leaves(embedding: Embedding) -> Embedding:
    """A copy of the embedding whose floating-point tensors are leaves that collect a gradient."""
    def leaf(value: Any) -> Any:
        if isinstance(value, Tensor) and value.is_floating_point():
            return value.detach().requires_grad_(True)
        return value

    if isinstance(embedding, dict):
        return {key: leaf(value) for key, value in embedding.items()}
    return leaf(embedding)


class RandomStates:
    """The random generators a forward pass draws from (CPU, and the device's when it is CUDA):
    saved before a chunk's first pass, put back before its second."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device

    def save(self) -> tuple[Tensor, Tensor | None]:
        return torch.get_rng_state(), torch.cuda.get_rng_state(self.device) if self.cuda else None

    def restore(self, state: tuple[Tensor, Tensor | None]) -> None:
        torch.set_rng_state(state[0])
        if self.cuda and state[1] is not None:
            torch.cuda.set_rng_state(state[1], self.device)


def _chunks(rows: int, chunk: int) -> Iterator[tuple[int, int]]:
    for start in range(0, rows, chunk):
        yield start, min(rows, start + chunk)


def chunked_backward(method: Any, batch: dict[str, Any], chunk: int, scale: Callable[[Tensor], Tensor],
                     autocast: Callable[[], Any] = contextlib.nullcontext) -> dict[str, Tensor]:
    """Back-propagate `scale(loss)` of `method` on `batch`, its towers `chunk` rows at a time.

    `scale` turns the loss into what is back-propagated (the trainer's accumulation divisor and
    gradient scaler); `autocast` opens the step's autocast context. Returns the loss parts
    (detached), as `method.loss` would. The parameter gradients are accumulated into `.grad`.
    """
    if chunk < 1:
        raise ValueError(f"train.chunk must be >= 1, got {chunk}")
    text_inputs, video_inputs = method.chunk_inputs(batch)
    device = next(method.parameters()).device
    states = RandomStates(device)
    towers = ((method.encode_text, text_inputs), (method.encode_video, video_inputs))

    # pass 1: embeddings without a graph, the random state before each chunk
    cached: list[list[tuple[Any, Any, Embedding]]] = []
    with torch.no_grad():
        for encode, inputs in towers:
            rows = batch_rows(inputs)
            parts = []
            for start, stop in _chunks(rows, chunk):
                state = states.save()
                with autocast():
                    parts.append((state, (start, stop), encode(slice_rows(inputs, start, stop, rows))))
            cached.append(parts)
    end_state = states.save()

    # the loss over the whole batch, once; its backward leaves dL/d(embedding) on the leaves
    text, video = (_as_leaves(_concat([p[2] for p in parts])) for parts in cached)
    with autocast():
        out = method.loss_from_embeddings(text, video, batch)
    scale(out["loss"]).backward()

    # pass 2: each chunk again with its own random state, back-propagated with its cached gradient
    for (encode, inputs), parts, leaves in zip(towers, cached, (text, video)):
        rows = batch_rows(inputs)
        leaf_tensors = _tensors(leaves)
        for state, (start, stop), _ in parts:
            states.restore(state)
            with autocast():
                again = _tensors(encode(slice_rows(inputs, start, stop, rows)))
            pairs = [(value, leaf.grad[start:stop]) for value, leaf in zip(again, leaf_tensors)
                     if leaf.grad is not None and value.requires_grad]
            if pairs:
                torch.autograd.backward([v for v, _ in pairs], [g.to(v.dtype) for v, g in pairs])
    states.restore(end_state)
    return {key: value.detach() for key, value in out.items() if isinstance(value, Tensor)}


def average_gradients(parameters: Any) -> None:
    """Average `.grad` over the ranks (what DDP's all-reduce does after a backward); nothing in
    one process. The gradients travel as one flat buffer per dtype."""
    if not dist.is_initialized() or dist.world() == 1:
        return
    world = dist.world()
    grads = [p.grad for p in parameters if p.requires_grad and p.grad is not None]
    by_dtype: dict[torch.dtype, list[Tensor]] = {}
    for grad in grads:
        by_dtype.setdefault(grad.dtype, []).append(grad)
    for group in by_dtype.values():
        flat = torch.cat([g.reshape(-1) for g in group])
        torch.distributed.all_reduce(flat)
        flat /= world
        offset = 0
        for grad in group:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()
