"""The space-time transformer of Frozen in Time (§3.1, appendix §2.1), on pixels.

Pieces: `PatchEmbed` (a P×P-stride Conv2d per frame), `DividedAttention` (self-attention
within token groups: the same patch across frames for "time", one frame for "space"),
`SpaceTimeBlock` (temporal then spatial attention then MLP, with the paper's modified
residual) and `SpaceTimeTransformer` (embeddings + blocks + final norm → [CLS]).

Parameter names follow timm's ViT (`patch_embed.proj`, `cls_token`, `pos_embed`,
`blocks.i.{norm1,attn.qkv,attn.proj,norm2,mlp.fc1,mlp.fc2}`, `norm`) plus
`temporal_embed`, `blocks.i.timeattn.*` and `blocks.i.norm3`, which is also the layout
of the official Frozen checkpoints' `video_model.*`, so a ViT state dict initialises the
spatial weights by name (§3.2) and official checkpoints load without renaming.

[CLS] handling (the paper only says one [CLS] is prepended and read out at the end):
- ``cls_attention="shared"`` (default, the official code, `VarAttention.forward`):
  one [CLS]; its query attends to every token in both attention calls, and every patch
  query also attends to the [CLS] key/value beside its own group.
- ``cls_attention="per_frame"``: one [CLS] per frame (time attention runs over them like
  over any patch position), the output is the mean of the frames' [CLS]. With zeroed
  temporal attention this is exactly a ViT on every frame (the §3.2 claim), which the
  shared [CLS] only is for one frame.
"""
from __future__ import annotations

from typing import Iterable

import torch
import torch.nn.functional as F
from torch import nn

LN_EPS = 1e-6  # every LayerNorm of the official video model (video_transformer.py)
CLIP_LN_EPS = 1e-5  # open_clip's towers (torch's default): a tower initialised from CLIP keeps it
EXPANSIONS = ("zeros", "nearest", "bilinear")  # appendix Table 7
CLS_MODES = ("shared", "per_frame")
RESIDUALS = ("frozen", "timesformer")  # appendix Fig. 2 (right / left)


def plain_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q kᵀ / √d) v with einsum: the unfused reference of `scaled_dot_product_attention`."""
    scores = torch.einsum("...id,...jd->...ij", q * q.shape[-1] ** -0.5, k)
    return torch.einsum("...ij,...jd->...id", scores.softmax(-1), v)


def einsum_trains_faster(q: torch.Tensor) -> bool:
    """True where, with autograd recording (training), the einsum attention ran faster than
    `scaled_dot_product_attention` on these short groups (the same patch over a few frames, one
    frame's patches), measured by bench/official_steps.py:
    - bf16 on a CPU: the CPU flash-attention backward is slower; a whole Frozen training step ran
      at 0.83x the official einsum code, and the tower's forward + backward took 130 ms fused vs
      102 ms plain (D = 192, 112 px, 4 frames, batch 8);
    - fp32 on a GPU: Frozen at the paper's size (ViT-B/16, 224 px, 4 frames, batch 16) on an H200
      ran 3.31 steps/s fused against 3.80 plain (under bf16 the fused kernel won, 11.29 vs 9.56).
    Inference and the other cases keep the fused kernel.
    """
    if not (torch.is_grad_enabled() and q.requires_grad):
        return False
    return (q.device.type == "cpu" and q.dtype == torch.bfloat16) or (q.device.type == "cuda" and q.dtype == torch.float32)


class PatchEmbed(nn.Module):
    """Frames [B, F, C, H, W] → patch tokens [B, F, N, D], N = (H/P)(W/P), row-major (appendix §2.1.1)."""

    def __init__(self, patch_size: int, dim: int, in_channels: int = 3):
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_channels, dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        b, f = frames.shape[:2]
        x = self.proj(frames.flatten(0, 1))  # [B*F, D, H/P, W/P]
        return x.flatten(2).transpose(1, 2).reshape(b, f, -1, x.shape[1])  # [B, F, N, D]


class DividedAttention(nn.Module):
    """Multi-head self-attention restricted to time groups or space groups (see module doc)."""

    def __init__(self, dim: int, heads: int, fused: bool = True):
        super().__init__()
        if dim % heads:
            raise ValueError(f"width {dim} is not divisible by {heads} heads")
        self.heads, self.fused = heads, fused
        self.qkv = nn.Linear(dim, 3 * dim)  # qkv_bias=True, as the official video model
        self.proj = nn.Linear(dim, dim)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.fused and not einsum_trains_faster(q):
            return F.scaled_dot_product_attention(q, k, v)
        return plain_attention(q, k, v)

    def forward(self, x: torch.Tensor, frames: int, axis: str, cls_mode: str = "shared") -> torch.Tensor:
        """x [B, L, D] → [B, L, D]; L = 1 + F*N (shared) or F*(1+N) (per_frame), frame-major."""
        b, length, dim = x.shape
        h = self.heads
        q, k, v = self.qkv(x).view(b, length, 3, h, dim // h).permute(2, 0, 3, 1, 4)  # 3 × [B, h, L, d]
        if cls_mode == "per_frame":
            out = self._grouped(q, k, v, frames, axis, None)  # [B, h, L, d]
        else:
            cls_out = self.attend(q[:, :, :1], k, v)  # [B, h, 1, d]: the [CLS] sees every token
            out = self._grouped(q[:, :, 1:], k[:, :, 1:], v[:, :, 1:], frames, axis, (k[:, :, :1], v[:, :, :1]))
            out = torch.cat([cls_out, out], dim=2)
        return self.proj(out.transpose(1, 2).reshape(b, length, dim))

    def _grouped(self, q, k, v, frames: int, axis: str, cls_kv) -> torch.Tensor:
        b, h, length, d = q.shape
        per_frame = length // frames
        q, k, v = (t.reshape(b, h, frames, per_frame, d) for t in (q, k, v))  # [B, h, F, n, d]
        if axis == "time":
            q, k, v = (t.transpose(2, 3) for t in (q, k, v))  # [B, h, n, F, d]
        elif axis != "space":
            raise ValueError(f"axis must be time or space, got {axis!r}")
        groups, size = q.shape[2], q.shape[3]
        if cls_kv is not None:  # the [CLS] key/value joins every group
            cls_k, cls_v = (t.unsqueeze(2).expand(b, h, groups, 1, d) for t in cls_kv)
            k, v = torch.cat([cls_k, k], dim=3), torch.cat([cls_v, v], dim=3)  # [B, h, G, 1+S, d]
        out = self.attend(q.reshape(b, h * groups, size, d), k.reshape(b, h * groups, -1, d),
                          v.reshape(b, h * groups, -1, d)).view(b, h, groups, size, d)
        if axis == "time":
            out = out.transpose(2, 3)
        return out.reshape(b, h, length, d)


class QuickGELU(nn.Module):
    """x·σ(1.702x): the activation OpenAI's CLIP towers were trained with (their weights need it)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int, quick_gelu: bool = False):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)
        self.act = QuickGELU() if quick_gelu else nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class SpaceTimeBlock(nn.Module):
    """Temporal attention → spatial attention → MLP (appendix Fig. 1–2).

    residual="frozen" (paper): x' = x + S(norm1(x + T(norm3(x)))): the temporal output only
    shapes the spatial attention's input, the residual comes from the block input.
    residual="timesformer": x' = x_t + S(norm1(x_t)) with x_t = x + T(norm3(x)).
    """

    def __init__(self, dim: int, heads: int, mlp_ratio: float = 4.0, residual: str = "frozen", fused: bool = True,
                 quick_gelu: bool = False, norm_eps: float = LN_EPS):
        super().__init__()
        if residual not in RESIDUALS:
            raise ValueError(f"residual must be one of {RESIDUALS}, got {residual!r}")
        self.residual = residual
        # declaration order = the official one (norm3 last)
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = DividedAttention(dim, heads, fused)
        self.timeattn = DividedAttention(dim, heads, fused)
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), quick_gelu)
        self.norm3 = nn.LayerNorm(dim, eps=norm_eps)

    def forward(self, x: torch.Tensor, frames: int, cls_mode: str = "shared") -> torch.Tensor:
        time_residual = x + self.timeattn(self.norm3(x), frames, "time", cls_mode)
        space = self.attn(self.norm1(time_residual), frames, "space", cls_mode)
        x = (x if self.residual == "frozen" else time_residual) + space
        return x + self.mlp(self.norm2(x))

    def zero_time_attention(self) -> None:
        """§3.2 init: time attention outputs exactly 0 (qkv = 0); proj.weight = 1 as in the
        official code so the gradient can leave zero (a zero proj would block it)."""
        with torch.no_grad():
            self.timeattn.qkv.weight.zero_()
            self.timeattn.qkv.bias.zero_()
            self.timeattn.proj.weight.fill_(1.0)
            self.timeattn.proj.bias.zero_()


class SpaceTimeTransformer(nn.Module):
    """Frames [B, F, 3, H, W] (F ≤ max_frames) → [CLS] feature [B, D] after the final LayerNorm."""

    def __init__(self, img_size: int = 224, patch_size: int = 16, dim: int = 768, depth: int = 12,
                 heads: int = 12, mlp_ratio: float = 4.0, max_frames: int = 4, residual: str = "frozen",
                 cls_mode: str = "shared", fused: bool = True, time_init: str = "zeros", pre_norm: bool = False,
                 quick_gelu: bool = False, norm_eps: float = LN_EPS):
        super().__init__()
        if cls_mode not in CLS_MODES:
            raise ValueError(f"cls_attention must be one of {CLS_MODES}, got {cls_mode!r}")
        if img_size % patch_size:
            raise ValueError(f"image size {img_size} is not a multiple of the patch size {patch_size}")
        self.dim, self.max_frames, self.cls_mode = dim, max_frames, cls_mode
        self.patches_per_frame = (img_size // patch_size) ** 2
        self.patch_embed = PatchEmbed(patch_size, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + self.patches_per_frame, dim))  # [CLS] + N (appendix §2.1.2)
        self.temporal_embed = nn.Parameter(torch.zeros(1, max_frames, dim))  # M × D, zeros as officially
        self.blocks = nn.ModuleList(
            SpaceTimeBlock(dim, heads, mlp_ratio, residual, fused, quick_gelu, norm_eps) for _ in range(depth)
        )
        self.norm = nn.LayerNorm(dim, eps=norm_eps)
        # a LayerNorm before the blocks: CLIP's ViTs have one (ln_pre, timm's norm_pre), ImageNet ViTs not
        self.norm_pre = nn.LayerNorm(dim, eps=norm_eps) if pre_norm else nn.Identity()
        self._init_weights(time_init)

    def _init_weights(self, time_init: str) -> None:
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)
        if time_init == "zeros":
            for block in self.blocks:
                block.zero_time_attention()
        elif time_init != "random":
            raise ValueError(f"time_init must be zeros or random, got {time_init!r}")

    def set_fused(self, fused: bool) -> None:
        for module in self.modules():
            if isinstance(module, DividedAttention):
                module.fused = fused

    def embed(self, frames: torch.Tensor) -> torch.Tensor:
        """Frames → the first block's input [B, L, D] (eq. 1: z + E^s_p + E^t_m, plus [CLS])."""
        b, f = frames.shape[:2]
        if f > self.max_frames:
            raise ValueError(f"{f} frames given, the model has temporal embeddings for {self.max_frames}")
        patches = self.patch_embed(frames)  # [B, F, N, D]
        if patches.shape[2] != self.patches_per_frame:
            raise ValueError(f"frames give {patches.shape[2]} patches, the model expects {self.patches_per_frame}")
        time = self.temporal_embed[0, :f, None, :]  # [F, 1, D]
        patches = patches + self.pos_embed[:, None, 1:] + time  # [B, F, N, D]
        cls = (self.cls_token + self.pos_embed[:, :1]).expand(b, -1, -1)  # [B, 1, D]
        if self.cls_mode == "per_frame":
            cls = cls[:, None].expand(b, f, 1, self.dim) + time  # [B, F, 1, D]
            return torch.cat([cls, patches], dim=2).flatten(1, 2)  # [B, F*(1+N), D]
        return torch.cat([cls, patches.flatten(1, 2)], dim=1)  # [B, 1+F*N, D]: [CLS] gets no E^t

    def forward_tokens(self, frames: torch.Tensor) -> torch.Tensor:
        """All tokens after the final LayerNorm, [B, L, D]."""
        x = self.norm_pre(self.embed(frames))
        for block in self.blocks:
            x = block(x, frames.shape[1], self.cls_mode)
        return self.norm(x)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        tokens = self.forward_tokens(frames)
        if self.cls_mode == "per_frame":
            f = frames.shape[1]
            return tokens.view(tokens.shape[0], f, -1, self.dim)[:, :, 0].mean(1)  # [B, D]
        return tokens[:, 0]  # [B, D]

    # --- initialisation and temporal expansion ----------------------------------------
    def load_vit(self, state_dict: dict[str, torch.Tensor]) -> list[str]:
        """Copy the spatial weights of a timm-layout ViT (§3.2); returns the ViT keys left unused.

        Time attention, norm3 and temporal_embed keep their init. A missing spatial key or a
        shape mismatch raises (the official `strict=False` silently ignored them).
        """
        own = self.state_dict()
        spatial = [k for k in own if ".timeattn." not in k and ".norm3." not in k and k != "temporal_embed"]
        missing = [k for k in spatial if k not in state_dict]
        if missing:
            raise KeyError(f"ViT state dict lacks {len(missing)} key(s) the video model needs, e.g. {missing[:4]}")
        bad = [f"{k}: {tuple(state_dict[k].shape)} vs {tuple(own[k].shape)}" for k in spatial
               if tuple(state_dict[k].shape) != tuple(own[k].shape)]
        if bad:
            raise ValueError(f"ViT state dict shapes differ from the video model: {bad[:4]}")
        self.load_state_dict({k: state_dict[k] for k in spatial}, strict=False)
        return sorted(set(state_dict) - set(spatial))

    @torch.no_grad()
    def expand_temporal(self, trained: int, frames: int, mode: str = "zeros") -> None:
        """Grow the learned temporal embeddings E^t_{:trained} to E^t_{:frames} (§3.2, Table 7)."""
        self.temporal_embed.data[:, :frames] = expand_temporal_embed(
            self.temporal_embed.data[:, :trained], frames, mode)


def expand_temporal_embed(embed: torch.Tensor, frames: int, mode: str = "zeros") -> torch.Tensor:
    """[1, m, D] → [1, frames, D] by zero-padding, nearest or bilinear interpolation (Table 7)."""
    if mode not in EXPANSIONS:
        raise ValueError(f"temporal expansion must be one of {EXPANSIONS}, got {mode!r}")
    m, dim = embed.shape[1], embed.shape[2]
    if frames <= m:
        return embed[:, :frames].clone()
    if mode == "zeros":
        return torch.cat([embed, embed.new_zeros(1, frames - m, dim)], dim=1)
    grid = embed[None]  # [1, 1, m, D]: an "image" of height m (as the official fix does)
    return F.interpolate(grid, size=(frames, dim), mode=mode)[0]


def count_parameters(modules: Iterable[nn.Module]) -> int:
    return sum(p.numel() for m in modules for p in m.parameters())
