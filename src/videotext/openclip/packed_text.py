"""An open_clip text transformer's inference forward with pre-packed oneDNN weights, for fast
CPU queries (`PackedTextTransformer`; bench/query_latency.py measures it)."""
from __future__ import annotations

from typing import Any

import torch


def _packing_available() -> bool:
    """oneDNN's pre-packed linear (what torch.compile's CPU weight freezing uses) is in this torch build."""
    ops = torch.ops.mkldnn
    return bool(torch.backends.mkldnn.is_available() and hasattr(ops, "_reorder_linear_weight")
                and hasattr(ops, "_linear_pointwise") and hasattr(ops, "_is_mkldnn_bf16_supported"))


def _standard_blocks(tower: torch.nn.Module) -> bool:
    """True when every block of `tower` is open_clip's plain `ResidualAttentionBlock` (nn.MultiheadAttention
    with packed biased in-projection, batch first, MLP c_fc → act → c_proj) under a causal mask."""
    from open_clip.transformer import ResidualAttentionBlock

    transformer = getattr(tower, "transformer", None)
    if getattr(tower, "attn_mask", None) is None or getattr(tower, "cls_emb", None) is not None \
            or transformer is None or not getattr(transformer, "batch_first", False):
        return False
    for block in transformer.resblocks:
        attn = getattr(block, "attn", None)
        if type(block) is not ResidualAttentionBlock or hasattr(block, "ln_1_kv") \
                or not isinstance(attn, torch.nn.MultiheadAttention) or not attn.batch_first \
                or not attn._qkv_same_embed_dim or attn.in_proj_bias is None or attn.bias_k is not None \
                or attn.add_zero_attn or attn.out_proj.bias is None \
                or list(dict(block.mlp.named_children())) != ["c_fc", "gelu", "c_proj"] \
                or block.mlp.c_fc.bias is None or block.mlp.c_proj.bias is None:
            return False
    return True


class PackedTextTransformer:
    """Inference forward of an open_clip text transformer whose linear weights are pre-packed for
    oneDNN (`torch.ops.mkldnn._linear_pointwise`), on the CPU without gradients.

    A caption is a few tokens against 38 M weights (ViT-B-32's text tower): 48 matrix products of
    5–32 rows, slow through ATen's linear on the plain weight layout (which, under bf16 autocast,
    also casts every weight to bf16 on each call). Packed, the products of one ViT-B-32 caption
    take 14 instead of 25 ms in fp32 and 8 instead of 18 ms in bf16 (one thread, CPU time; the
    whole query: bench/query_latency.py). The packed copies are made once per compute dtype and
    remade when a weight changes (its version counter), e.g. between training epochs. The blocks compute what `ResidualAttentionBlock` does, in the same order and layout
    (nn.MultiheadAttention's in-projection, scaled dot-product attention under the causal mask,
    out-projection, MLP); under bf16 autocast every matrix product takes bf16 inputs as autocast
    would give them, so the states equal the module path's, and in fp32 they agree to round-off.
    Costs one extra copy of the tower's linear weights per dtype used (ViT-B-32: 151 MB fp32, 76 MB
    bf16)."""

    def __init__(self, tower: torch.nn.Module, rows: int = 32):
        self.tower = tower
        self.rows = rows  # rows per product that oneDNN tunes the packed layout for: a caption's tokens
        self.ok = _packing_available() and _standard_blocks(tower)
        self._packed: dict[torch.dtype, tuple[tuple, list]] = {}  # dtype -> (weight versions, per block)

    def __getstate__(self) -> dict[str, Any]:  # copies and pickles (data-loader workers) repack if they need to
        return {**self.__dict__, "_packed": {}}

    def usable(self, ids: torch.Tensor) -> bool:
        """Whether this call can take the packed path: CPU, no gradients, eval mode, fp32 weights,
        fp32 or bf16-autocast compute."""
        if not self.ok or torch.is_grad_enabled() or self.tower.training or ids.device.type != "cpu":
            return False
        if self.tower.transformer.get_cast_dtype() != torch.float32:
            return False
        if not torch.is_autocast_enabled("cpu"):
            return True
        return torch.get_autocast_dtype("cpu") == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported()

    def _weights(self) -> list[tuple[torch.Tensor, ...]]:
        """Per block: (in_proj W, b, out_proj W, b, c_fc W, b, c_proj W, b)."""
        return [(b.attn.in_proj_weight, b.attn.in_proj_bias, b.attn.out_proj.weight, b.attn.out_proj.bias,
                 b.mlp.c_fc.weight, b.mlp.c_fc.bias, b.mlp.c_proj.weight, b.mlp.c_proj.bias)
                for b in self.tower.transformer.resblocks]

    def packed(self, dtype: torch.dtype) -> list[tuple[torch.Tensor, ...]]:
        """Per block: (weight, bias) pairs of the four linears packed for `dtype`, (re)made when stale."""
        weights = self._weights()
        key = tuple((t.data_ptr(), t._version) for block in weights for t in block)
        cached = self._packed.get(dtype)
        if cached is None or cached[0] != key:
            reorder = torch.ops.mkldnn._reorder_linear_weight
            blocks = []
            for block in weights:
                pairs = []
                for w, b in zip(block[0::2], block[1::2]):
                    pairs += [reorder(w.detach().to(dtype), self.rows), b.detach().to(dtype)]
                blocks.append(tuple(pairs))
            self._packed = {k: v for k, v in self._packed.items() if v[0] == key}  # drop stale dtypes
            self._packed[dtype] = (key, blocks)
            cached = self._packed[dtype]
        return cached[1]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Token states [B, L, width] (embeddings + positions, fp32) → states after the last block."""
        dtype = torch.bfloat16 if torch.is_autocast_enabled("cpu") else torch.float32  # of the matrix products
        linear = torch.ops.mkldnn._linear_pointwise
        length = x.shape[1]
        mask = self.tower.attn_mask[:length, :length].to(x.dtype)[None, None]  # [1, 1, L, L] causal
        for block, (w_in, b_in, w_out, b_out, w_fc, b_fc, w_proj, b_proj) in zip(
                self.tower.transformer.resblocks, self.packed(dtype)):
            batch, _, width = x.shape
            heads = block.attn.num_heads
            h = block.ln_1(x).transpose(0, 1)  # [L, B, W]: nn.MultiheadAttention's layout
            qkv = linear(h.to(dtype), w_in, b_in, "none", [], "")  # [L, B, 3W]
            qkv = qkv.unflatten(-1, (3, width)).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()  # [3, L, B, W]
            q, k, v = (t.view(length, batch * heads, -1).transpose(0, 1).view(batch, heads, length, -1) for t in qkv)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, mask.to(q.dtype))  # [B, H, L, W/H]
            a = a.permute(2, 0, 1, 3).reshape(length * batch, width)  # [L·B, W]
            a = linear(a, w_out, b_out, "none", [], "").view(length, batch, width).transpose(0, 1)  # [B, L, W]
            x = x + block.ls_1(a)
            h = linear(block.ln_2(x).to(dtype), w_fc, b_fc, "none", [], "")  # [B, L, 4W]
            x = x + block.ls_2(linear(block.mlp.gelu(h), w_proj, b_proj, "none", [], ""))
        return x
