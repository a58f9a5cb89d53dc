"""Frozen in Time: space-time transformer, ViT init equivalence, temporal expansion, the method."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from videotext.config import ConfigError
from videotext.models.layers.space_time import (
    DividedAttention, SpaceTimeBlock, SpaceTimeTransformer, einsum_trains_faster, expand_temporal_embed,
)

timm = pytest.importorskip("timm")


def tiny_vit(num_classes: int = 5):
    """A timm ViT with the ViT-B/16 key layout at toy size (random weights, eps 1e-6 LayerNorms)."""
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    vit = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=num_classes)
    with torch.no_grad():  # non-trivial norms and embeddings
        for name, p in vit.named_parameters():
            if "norm" in name or name in ("cls_token", "pos_embed"):
                p.add_(torch.randn_like(p) * 0.3)
    return vit.eval()


def masked_reference(attn: DividedAttention, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Full multi-head attention over the whole sequence with an explicit [L, L] allowed mask."""
    b, length, dim = x.shape
    h = attn.heads
    q, k, v = F.linear(x, attn.qkv.weight, attn.qkv.bias).view(b, length, 3, h, dim // h).permute(2, 0, 3, 1, 4)
    scores = (q @ k.transpose(-1, -2)) * (dim // h) ** -0.5
    out = scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v  # [B, h, L, d]
    return F.linear(out.transpose(1, 2).reshape(b, length, dim), attn.proj.weight, attn.proj.bias)


def shared_masks(frames: int, patches: int) -> dict[str, torch.Tensor]:
    """The official `VarAttention.forward`: [CLS] query sees all; patch queries see their group + [CLS]."""
    idx = torch.arange(frames * patches)
    frame, patch = idx // patches, idx % patches
    out = {}
    for axis, group in (("time", patch), ("space", frame)):
        allowed = torch.ones(1 + frames * patches, 1 + frames * patches, dtype=torch.bool)
        allowed[1:, 1:] = group[:, None] == group[None, :]
        out[axis] = allowed
    return out


@pytest.mark.parametrize("fused", [True, False])
def test_divided_attention_equals_masked_full_attention(fused):
    torch.manual_seed(1)
    frames, patches, dim = 3, 4, 16
    attn = DividedAttention(dim, heads=2, fused=fused)
    x = torch.randn(2, 1 + frames * patches, dim)
    for axis, allowed in shared_masks(frames, patches).items():
        torch.testing.assert_close(attn(x, frames, axis, "shared"), masked_reference(attn, x, allowed),
                                   atol=1e-5, rtol=1e-5)
    # per-frame [CLS]: groups over 1 + N positions per frame, no special token
    x = torch.randn(2, frames * (1 + patches), dim)
    idx = torch.arange(frames * (1 + patches))
    frame, position = idx // (1 + patches), idx % (1 + patches)
    torch.testing.assert_close(attn(x, frames, "time", "per_frame"),
                               masked_reference(attn, x, position[:, None] == position[None, :]), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(attn(x, frames, "space", "per_frame"),
                               masked_reference(attn, x, frame[:, None] == frame[None, :]), atol=1e-5, rtol=1e-5)


def test_training_takes_the_einsum_attention_where_it_ran_faster():
    """bf16 autocast training on a CPU and fp32 training on a GPU run the einsum attention (faster
    there, and the same numbers); the fused kernel stays for the rest and for inference."""
    torch.manual_seed(2)
    fused, plain = DividedAttention(16, heads=2, fused=True), DividedAttention(16, heads=2, fused=False)
    plain.load_state_dict(fused.state_dict())
    x = torch.randn(2, 1 + 3 * 4, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(fused(x, 3, "time"), plain(x, 3, "time"))
        assert torch.equal(fused(x, 3, "space"), plain(x, 3, "space"))
    q = torch.randn(2, 2, 5, 8)
    assert einsum_trains_faster(q.bfloat16().requires_grad_())
    assert not einsum_trains_faster(q.clone().requires_grad_())  # fp32 on a CPU
    with torch.no_grad():
        assert not einsum_trains_faster(q.bfloat16())  # inference
    if torch.cuda.is_available():
        g = q.cuda()
        assert einsum_trains_faster(g.clone().requires_grad_())  # fp32 on a GPU
        assert not einsum_trains_faster(g.bfloat16().requires_grad_())


def test_residual_variants_follow_appendix_fig2():
    torch.manual_seed(2)
    block = SpaceTimeBlock(16, 2, residual="frozen")
    x = torch.randn(2, 1 + 2 * 4, 16)
    t = block.timeattn(block.norm3(x), 2, "time")
    s = block.attn(block.norm1(x + t), 2, "space")
    y = x + s  # the paper: the space residual comes from the block input
    torch.testing.assert_close(block(x, 2), y + block.mlp(block.norm2(y)))
    block.residual = "timesformer"
    y = x + t + s
    torch.testing.assert_close(block(x, 2), y + block.mlp(block.norm2(y)))
    assert (t.abs().max() > 1e-3)  # the two variants really differ here
    block.zero_time_attention()  # with the §3.2 init both are the same, and time attention is an exact no-op
    out_t = block(x, 2)
    block.residual = "frozen"
    torch.testing.assert_close(block(x, 2), out_t, atol=0, rtol=0)


def test_zeroed_time_attention_is_a_vit_on_every_frame():
    """§3.2: with temporal attention zero-initialised, each frame's tokens equal the ViT's on it."""
    vit = tiny_vit()
    model = SpaceTimeTransformer(32, 8, 32, 2, 2, max_frames=3, cls_mode="per_frame").eval()
    unused = model.load_vit(vit.state_dict())
    assert unused == ["head.bias", "head.weight"]
    torch.manual_seed(3)
    frames = torch.randn(2, 3, 3, 32, 32)
    with torch.no_grad():
        ours = model.forward_tokens(frames).view(2, 3, 17, 32)  # [B, F, 1+N, D]
        theirs = vit.forward_features(frames.flatten(0, 1)).view(2, 3, 17, 32)
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(model(frames), theirs[:, :, 0].mean(1), atol=1e-5, rtol=1e-5)
        # the shared [CLS] of the official model is a ViT for one frame
        shared = SpaceTimeTransformer(32, 8, 32, 2, 2, max_frames=3, cls_mode="shared").eval()
        shared.load_vit(vit.state_dict())
        torch.testing.assert_close(shared(frames[:, :1]), theirs[:, 0, 0], atol=1e-5, rtol=1e-5)
        # once time attention is learned (non-zero), frames interact and the equivalence is gone
        # (qkv alone is not enough: proj.weight = 1 makes the time output constant across channels,
        # and norm1 removes exactly that; the frozen residual never adds it to the stream)
        model.blocks[0].timeattn.qkv.weight.normal_()
        assert (model.forward_tokens(frames).view(2, 3, 17, 32) - theirs).abs().max() < 1e-5
        model.blocks[0].timeattn.proj.weight.normal_()
        assert (model.forward_tokens(frames).view(2, 3, 17, 32) - theirs).abs().max() > 1e-2


def test_vit_loading_rejects_wrong_layouts():
    model = SpaceTimeTransformer(32, 8, 32, 2, 2, max_frames=2)
    state = tiny_vit().state_dict()
    with pytest.raises(KeyError, match="blocks.1.attn.qkv.weight"):
        model.load_vit({k: v for k, v in state.items() if k != "blocks.1.attn.qkv.weight"})
    state["pos_embed"] = torch.zeros(1, 5, 32)
    with pytest.raises(ValueError, match="pos_embed"):
        model.load_vit(state)


def test_base_preset_has_the_papers_114M_parameters():
    """Appendix Table 4: S-Tformer 224/16 B has 114M parameters: ViT-B/16 (85,798,656 without its
    head) + 12 × time attention (2,362,368) + 12 × norm3 (1,536) + temporal_embed 4 × 768."""
    with torch.device("meta"):
        model = SpaceTimeTransformer(224, 16, 768, 12, 12, max_frames=4)
    total = sum(p.numel() for p in model.parameters())
    assert total == 85_798_656 + 12 * (2_362_368 + 1_536) + 4 * 768 == 114_168_576
    assert model.patches_per_frame == 196  # appendix §2.1: N = 196 at 224×224


def test_token_layout_and_embeddings_match_the_official_tiling():
    model = SpaceTimeTransformer(16, 8, 4, 1, 1, max_frames=3)
    with torch.no_grad():
        model.temporal_embed.copy_(torch.arange(3.0).view(1, 3, 1) * 100)
        model.patch_embed.proj.weight.zero_()
        model.patch_embed.proj.bias.zero_()
    x = model.embed(torch.zeros(1, 2, 3, 16, 16))  # [1, 1 + 2*4, 4]
    pos = model.pos_embed.detach()
    torch.testing.assert_close(x[0, 0], (model.cls_token + pos[:, 0])[0, 0].detach())  # [CLS]: no E^t
    expected = torch.cat([pos[0, 1:] + 0, pos[0, 1:] + 100])  # frame-major, E^s tiled, E^t per frame
    torch.testing.assert_close(x[0, 1:].detach(), expected)


def test_temporal_expansion_hand_values():
    embed = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])  # [1, m=2, D=2]
    torch.testing.assert_close(expand_temporal_embed(embed, 4, "zeros")[0],
                               torch.tensor([[1.0, 2], [3, 4], [0, 0], [0, 0]]))
    torch.testing.assert_close(expand_temporal_embed(embed, 4, "nearest")[0],
                               torch.tensor([[1.0, 2], [1, 2], [3, 4], [3, 4]]))
    # bilinear, half-pixel centres: sources -0.25, 0.25, 0.75, 1.25 (clamped)
    torch.testing.assert_close(expand_temporal_embed(embed, 4, "bilinear")[0],
                               torch.tensor([[1.0, 2], [1.5, 2.5], [2.5, 3.5], [3, 4]]))
    torch.testing.assert_close(expand_temporal_embed(embed, 1)[0], torch.tensor([[1.0, 2]]))  # truncation
    with pytest.raises(ValueError, match="temporal expansion"):
        expand_temporal_embed(embed, 4, "cubic")


# --- the method ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def method():
    from videotext.models import build_method

    torch.manual_seed(0)
    return build_method("frozen", {"preset": "tiny", "num_frames": 4, "freeze_text": True,
                                   "frame_schedule": [1, 2, 4], "frame_schedule_epochs": [0, 2, 3],
                                   "temporal_expansion": "nearest"})


def test_curriculum_schedule_and_expansion(method):
    assert [method.frames_for_epoch(e) for e in range(5)] == [1, 1, 2, 4, 4]
    video = method.video_model
    with torch.no_grad():
        video.temporal_embed.copy_(torch.arange(4.0).view(1, 4, 1).expand(1, 4, 32))
    method.train()
    method.grow_frames(1)  # first batch: nothing trained yet, nothing expanded
    assert int(method.trained_frames) == 1 and method.eval_frames() == 1
    method.grow_frames(2)  # nearest from 1 row: both rows = row 0
    assert video.temporal_embed[0, :, 0].tolist() == [0.0, 0.0, 2.0, 3.0]
    method.grow_frames(2)  # no second expansion (resume-safe: the count is a saved buffer)
    assert "trained_frames" in method.state_dict()
    with torch.no_grad():
        video.temporal_embed[0, 1] = 1.0
    method.grow_frames(4)
    assert video.temporal_embed[0, :, 0].tolist() == [0.0, 0.0, 1.0, 1.0]
    assert method.eval_frames() == 4


def test_method_loss_is_symmetric_infonce_with_sigma_005(method):
    torch.manual_seed(4)
    method.eval()
    frames = torch.randn(3, 2, 3, 32, 32)
    text = method.prepare_text(["a red square", "a blue circle moves", "two shapes"])
    batch = {"text": text, "video": {"frames": frames}}
    out = method.loss(batch)
    t, v = method.encode_text(text), method.encode_video({"frames": frames})
    logits = t @ v.T / 0.05
    target = torch.arange(3)
    expected = F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)  # eq. 2 + eq. 3
    torch.testing.assert_close(out["loss"], expected, atol=1e-5, rtol=1e-5)
    assert torch.allclose(t.norm(dim=1), torch.ones(3)) and torch.allclose(v.norm(dim=1), torch.ones(3))


def test_video_embedding_is_the_mean_of_its_clips(method):
    torch.manual_seed(5)
    frames = torch.randn(3, 2, 3, 32, 32)
    clips = method.encode_clips(frames)
    video = method.encode_video({"frames": frames, "clip_video": torch.tensor([0, 0, 1]), "video_ids": ["a", "b"]})
    torch.testing.assert_close(video, torch.stack([F.normalize(clips[0] + clips[1], dim=0), clips[2]]))


def test_config_errors_name_the_key():
    from videotext.models import build_method

    with pytest.raises(ConfigError, match="model.residual"):
        build_method("frozen", {"preset": "tiny", "residual": "post"})
    with pytest.raises(ConfigError, match="frame_schedule"):
        build_method("frozen", {"preset": "tiny", "frame_schedule": [1, 8], "frame_schedule_epochs": [0, 1]})
    with pytest.raises(ConfigError, match="model.preset"):
        build_method("frozen", {"preset": "huge"})
